"""Recurrent networks, written out: the cells the book derives and the seq2seq model they build.

Weights follow PyTorch's layout so that every cell can be checked against ``torch.nn``:
``W_ih: (G d_h, D)``, ``W_hh: (G d_h, d_h)``, ``b_ih, b_hh: (G d_h,)`` with ``G = 1`` for the plain
RNN and ``G = 4`` for the LSTM, whose gates are stacked in the order input, forget, cell, output.
The book's symbols: ``B`` the batch, ``N`` the number of time steps (``N_out`` on a decoder's
side), ``D`` the width of an input vector, ``d_h`` the hidden size. In the attention models
(Chapter 2) ``h_j`` is an encoder state (an annotation) of size ``d_enc`` (``2 d_h`` when the
encoder is bidirectional), ``s_i`` the decoder state and ``c_i`` the context; the decoder LSTM's
own cell state is called its memory cell, never ``c``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from coursekit.attention import AdditiveAttention, padding_mask


def rnn_cell(x: Tensor, h: Tensor, W_ih: Tensor, W_hh: Tensor, b_ih: Tensor, b_hh: Tensor) -> Tensor:
    """One Elman step: h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh).

    x: (B, D), h: (B, d_h) -> h': (B, d_h).
    """
    return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)


def lstm_cell(
    x: Tensor, state: tuple[Tensor, Tensor], W_ih: Tensor, W_hh: Tensor, b_ih: Tensor, b_hh: Tensor
) -> tuple[Tensor, Tensor]:
    """One LSTM step (Hochreiter & Schmidhuber 1997, with a forget gate).

    i, f, o = σ(·), g = tanh(·) from the stacked pre-activation x W_ihᵀ + b_ih + h W_hhᵀ + b_hh;
    c' = f ⊙ c + i ⊙ g;  h' = o ⊙ tanh(c').
    x: (B, D), state = (h, c) with h, c: (B, d_h) -> (h', c'), each (B, d_h).
    """
    h, c = state
    i, f, g, o = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)
    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_next = torch.sigmoid(o) * torch.tanh(c_next)
    return h_next, c_next


class RNN(nn.Module):
    """A single-layer Elman RNN unrolled with :func:`rnn_cell`; same parameters as ``nn.RNN``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.RNNCell(input_size, hidden_size)  # holds weight_ih, weight_hh, biases

    def forward(self, x: Tensor, h: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: (B, N, D), h: (B, d_h) -> outputs (B, N, d_h), final h (B, d_h)."""
        if h is None:
            h = x.new_zeros(x.shape[0], self.hidden_size)
        c = self.cell
        outputs = []
        for x_t in x.unbind(dim=1):
            h = rnn_cell(x_t, h, c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h


class LSTM(nn.Module):
    """A single-layer LSTM unrolled with :func:`lstm_cell`; same parameters as ``nn.LSTM``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(input_size, hidden_size)

    def forward(
        self, x: Tensor, state: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x: (B, N, D) -> outputs (B, N, d_h), final (h, c), each (B, d_h)."""
        if state is None:
            zeros = x.new_zeros(x.shape[0], self.hidden_size)
            state = (zeros, zeros)
        c = self.cell
        outputs = []
        for x_t in x.unbind(dim=1):
            state = lstm_cell(x_t, state, c.weight_ih, c.weight_hh, c.bias_ih, c.bias_hh)
            outputs.append(state[0])
        return torch.stack(outputs, dim=1), state


def last_real(h: Tensor, src_len: Tensor) -> Tensor:
    """The output of a one-way encoder at each source's last real token: h (B, N, d), src_len (B,)
    -> (B, d). Over right-padded inputs this equals the final state that packing the batch
    (``pack_padded_sequence``) would give, and the fused LSTM runs unpacked: Chapter 2's models
    train 14–18 % faster per step on one CPU thread."""
    return h[torch.arange(h.shape[0], device=h.device), src_len.to(h.device) - 1]


class Seq2Seq(nn.Module):
    """Encoder–decoder without attention (Sutskever et al. 2014).

    The encoder reads the source and hands the decoder only its final state (h, c): a fixed-size
    summary, whatever the source length. That bottleneck is what Chapter 2's attention removes.
    The loops run inside ``nn.LSTM`` (fused kernels) so training is fast; the cell is the one above.
    """

    def __init__(
        self, src_vocab: int, tgt_vocab: int, d_emb: int = 32, d_hidden: int = 64, pad_id: int = 0
    ) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, d_emb, padding_idx=pad_id)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_emb, padding_idx=pad_id)
        self.encoder = nn.LSTM(d_emb, d_hidden, batch_first=True)
        self.decoder = nn.LSTM(d_emb, d_hidden, batch_first=True)
        self.out = nn.Linear(d_hidden, tgt_vocab)

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        """src: (B, N) token ids, src_len: (B,) -> the final state (h_N, c_N), each (1, B, d_h)."""
        packed = pack_padded_sequence(
            self.src_emb(src), src_len.cpu(), batch_first=True, enforce_sorted=False
        )
        _, state = self.encoder(packed)
        return state

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing. tgt_in: (B, N_out) starts with BOS -> logits (B, N_out, V_tgt)."""
        outputs, _ = self.decoder(self.tgt_emb(tgt_in), self.encode(src, src_len))
        return self.out(outputs)

    @torch.no_grad()
    def generate(self, src: Tensor, src_len: Tensor, max_len: int, bos_id: int) -> Tensor:
        """Greedy decoding: (B, N) -> (B, max_len) token ids (callers cut at EOS)."""
        state = self.encode(src, src_len)
        token = src.new_full((src.shape[0], 1), bos_id)
        generated = []
        for _ in range(max_len):
            output, state = self.decoder(self.tgt_emb(token), state)
            token = self.out(output).argmax(-1)
            generated.append(token)
        return torch.cat(generated, dim=1)


class AttentionSeq2Seq(nn.Module):
    """Encoder–decoder with additive attention (Bahdanau, Cho & Bengio 2015).

    The encoder is a bidirectional LSTM whose annotations h_j = [→h_j; ←h_j] are all kept. At
    output step i the decoder state s_{i-1} scores every annotation, e_ij = a(s_{i-1}, h_j),
    α_i = softmax(e_i) over the real (non-padding) positions, and reads the context
    c_i = Σ_j α_ij h_j. Then s_i = LSTM([y_{i-1}; c_i], s_{i-1}) and the next token comes from
    the deep output g(s_i, c_i, y_{i-1}). The initial state is s_0 = tanh(W_s ←h_1), as in the paper,
    with a memory cell of zeros. With ``bidirectional=False`` the annotations are the one-way states
    and s_0 = tanh(W_s h_N); everything else is the same.
    """

    def __init__(
        self, src_vocab: int, tgt_vocab: int, d_emb: int = 32, d_hidden: int = 64,
        d_attn: int = 64, bidirectional: bool = True, pad_id: int = 0,
    ) -> None:
        super().__init__()
        d_enc = 2 * d_hidden if bidirectional else d_hidden  # size of an annotation h_j
        self.src_emb = nn.Embedding(src_vocab, d_emb, padding_idx=pad_id)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_emb, padding_idx=pad_id)
        self.encoder = nn.LSTM(d_emb, d_hidden, batch_first=True, bidirectional=bidirectional)
        self.init_state = nn.Linear(d_hidden, d_hidden)  # W_s
        self.attention = AdditiveAttention(d_hidden, d_enc, d_attn)
        self.decoder = nn.LSTMCell(d_emb + d_enc, d_hidden)
        self.out = nn.Linear(d_hidden + d_enc + d_emb, tgt_vocab)

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor]]:
        """src: (B, N) -> annotations h (B, N, d_enc), mask (B, N) True at real tokens, and the
        decoder's initial (s_0, memory cell), each (B, d_h). Annotations at padding positions are
        never attended to (the mask); what they hold is unspecified."""
        mask = padding_mask(src_len.to(src.device), src.shape[1])
        if self.encoder.bidirectional:  # ←h_j must start at each source's own last token
            packed = pack_padded_sequence(
                self.src_emb(src), src_len.cpu(), batch_first=True, enforce_sorted=False
            )
            h, (h_n, _) = self.encoder(packed)
            h, _ = pad_packed_sequence(h, batch_first=True, total_length=src.shape[1])
            h_last = h_n[-1]  # ←h_1
        else:  # a one-way state never sees the padding after it: no packing needed
            h, _ = self.encoder(self.src_emb(src))
            h_last = last_real(h, src_len)  # →h_S
        s0 = torch.tanh(self.init_state(h_last))
        return h, mask, (s0, torch.zeros_like(s0))

    def step(
        self, y_prev: Tensor, state: tuple[Tensor, Tensor], h: Tensor, mask: Tensor,
        keys: Tensor | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor]:
        """One decoder step. y_prev: (B,) ids; keys: ``self.attention.keys(h)``, the part of the
        scores that is the same at every step (None: computed here) -> logits (B, V_tgt), new
        state, weights α_i (B, N)."""
        y = self.tgt_emb(y_prev)
        c, alpha = self.attention(state[0], h, mask, keys)  # uses s_{i-1}
        state = self.decoder(torch.cat([y, c], dim=-1), state)
        return self.out(torch.cat([state[0], c, y], dim=-1)), state, alpha

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing. tgt_in: (B, N_out) starts with BOS -> logits (B, N_out, V_tgt)."""
        h, mask, state = self.encode(src, src_len)
        keys = self.attention.keys(h)  # U h_j: once per sentence, not at every step
        logits = []
        for y_prev in tgt_in.unbind(dim=1):
            step_logits, state, _ = self.step(y_prev, state, h, mask, keys)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)

    @torch.no_grad()
    def generate(self, src: Tensor, src_len: Tensor, max_len: int, bos_id: int) -> tuple[Tensor, Tensor]:
        """Greedy decoding -> token ids (B, max_len) and attention weights α (B, max_len, N)."""
        h, mask, state = self.encode(src, src_len)
        keys = self.attention.keys(h)
        token = src.new_full((src.shape[0],), bos_id)
        tokens, weights = [], []
        for _ in range(max_len):
            step_logits, state, alpha = self.step(token, state, h, mask, keys)
            token = step_logits.argmax(-1)
            tokens.append(token)
            weights.append(alpha)
        return torch.stack(tokens, dim=1), torch.stack(weights, dim=1)


class ContextSeq2Seq(nn.Module):
    """:class:`AttentionSeq2Seq` with the search taken out: the decoder reads one fixed context.

    The encoder is one-way and its final state h_N is the context c of every decoder step. The
    rest is wired as in the attention model: s_0 = tanh(W_s h_N) with a zero cell,
    s_i = LSTM([y_{i-1}; c], s_{i-1}), and the next token from the deep output g(s_i, c, y_{i-1}).
    This is the decoder of Cho et al. (2014), on which Bahdanau et al. built theirs; it differs
    from :class:`AttentionSeq2Seq` with ``bidirectional=False`` only in c_i = h_N for every i
    (no alignment model). Since c does not change, the decoder runs in ``nn.LSTM`` (fused).
    """

    def __init__(
        self, src_vocab: int, tgt_vocab: int, d_emb: int = 32, d_hidden: int = 64, pad_id: int = 0
    ) -> None:
        super().__init__()
        self.src_emb = nn.Embedding(src_vocab, d_emb, padding_idx=pad_id)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_emb, padding_idx=pad_id)
        self.encoder = nn.LSTM(d_emb, d_hidden, batch_first=True)
        self.init_state = nn.Linear(d_hidden, d_hidden)  # W_s
        self.decoder = nn.LSTM(d_emb + d_hidden, d_hidden, batch_first=True)
        self.out = nn.Linear(2 * d_hidden + d_emb, tgt_vocab)

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """src: (B, N) -> the context c = h_N (B, d_h) and the decoder's initial (s_0, memory cell
        of zeros), each (1, B, d_h)."""
        h, _ = self.encoder(self.src_emb(src))  # one-way: the padding after h_N cannot reach it
        h_n = last_real(h, src_len)
        s0 = torch.tanh(self.init_state(h_n))[None]
        return h_n, (s0, torch.zeros_like(s0))

    def decode(
        self, y_prev: Tensor, c: Tensor, state: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """y_prev: (B, N_out) ids, c: (B, d_h) -> logits (B, N_out, V_tgt) and the last state."""
        y = self.tgt_emb(y_prev)
        c = c[:, None, :].expand(-1, y.shape[1], -1)
        s, state = self.decoder(torch.cat([y, c], dim=-1), state)
        return self.out(torch.cat([s, c, y], dim=-1)), state

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing. tgt_in: (B, N_out) starts with BOS -> logits (B, N_out, V_tgt)."""
        c, state = self.encode(src, src_len)
        return self.decode(tgt_in, c, state)[0]

    @torch.no_grad()
    def generate(self, src: Tensor, src_len: Tensor, max_len: int, bos_id: int) -> Tensor:
        """Greedy decoding: (B, N) -> (B, max_len) token ids (callers cut at EOS)."""
        c, state = self.encode(src, src_len)
        token = src.new_full((src.shape[0], 1), bos_id)
        generated = []
        for _ in range(max_len):
            logits, state = self.decode(token, c, state)
            token = logits.argmax(-1)
            generated.append(token)
        return torch.cat(generated, dim=1)
