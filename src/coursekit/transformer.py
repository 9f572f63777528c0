"""Transformer blocks, from LayerNorm up to the whole encoder–decoder of Vaswani et al. (2017).

One block is two sub-layers, each wrapped in a residual connection and a LayerNorm. Where the
norm goes is the ``norm_first`` flag:

    Post-LN (the 2017 paper, BERT):   X <- LayerNorm(X + Sublayer(X))
    Pre-LN  (GPT-2 and most since):   X <- X + Sublayer(LayerNorm(X))

The sub-layers are multi-head attention (the book's one implementation,
:class:`coursekit.attention.MultiHeadAttention`) and a position-wise feed-forward network. An
encoder block attends over its whole input; a decoder block attends causally over its own
prefix, then across to the encoder's output (cross-attention). An :class:`EncoderBlock` called
with ``is_causal=True`` is the decoder-only (GPT) block: self-attention and FFN, no
cross-attention.

Masks follow :mod:`coursekit.attention`: boolean, True where attention is *allowed*; a key
padding mask is (B, N_k), True at real tokens; a row with no allowed key gets zero weights.
Parameter names follow ``nn.TransformerEncoderLayer``/``nn.TransformerDecoderLayer`` (``norm1``,
``linear1``, ...) so weights port both ways.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.attention import KVCache, MultiHeadAttention

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,  # exact: x·Φ(x) (BERT's "gelu")
    "gelu_tanh": partial(F.gelu, approximate="tanh"),  # GPT-2's "gelu_new": the tanh approximation
}

# ----------------------------------------------------------------------------- LayerNorm


class LayerNorm(nn.Module):
    """y = (x − μ) / √(σ² + ε) · γ + δ over the last dimension (Ba, Kiros & Hinton, 2016).

    μ and σ² are the mean and the *biased* variance (divide by d, not d − 1) of each token's
    d_model features; ε sits inside the square root. γ (``weight``) and δ (``bias``) are learned,
    one per feature, as in ``nn.LayerNorm`` (same names, same ε default). Ba et al. write them g
    and b; γ and β are BatchNorm's names, which PyTorch's documentation uses, and the book writes
    δ because its β is a projection's bias. x: (..., d_model).
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # γ
        self.bias = nn.Parameter(torch.zeros(d_model))  # δ

    def forward(self, x: Tensor) -> Tensor:
        # The equation above (Exercise 6.1 writes it out: mean, biased variance, scale, shift) as
        # one fused kernel: written out, its backward pass is a dozen small operations, which
        # made the models of Chapters 7-9 up to 1.7x slower than Hugging Face's on the CPU.
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """y = x / √(mean(x²) + ε) · γ over the last dimension: x: (..., d_model), γ: (d_model,).

    No mean is subtracted and nothing is added: a token's direction is kept, only its root mean
    square is set to 1 before the gain γ (``F.rms_norm`` computes the same).
    """
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    """y = x / √(mean(x²) + ε) · γ: LayerNorm without the mean and without the shift δ (Zhang &
    Sennrich, 2019). T5 calls it ``T5LayerNorm`` (ε = 1e-6), Llama ``LlamaRMSNorm``; ``nn.RMSNorm``
    computes the same. x: (..., d_model)."""

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # γ

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


NORMS: dict[str, type[nn.Module]] = {"layer": LayerNorm, "rms": RMSNorm}

# ----------------------------------------------------------------------------- feed-forward


class FeedForward(nn.Module):
    """FFN(x) = φ(x W₁ + β₁) W₂ + β₂, the same two-layer MLP applied to every position alone.

    x is a row (one token); W₁: (d_model, d_ff), W₂: (d_ff, d_model), stored transposed as the
    ``nn.Linear`` weights; φ is ReLU (the 2017 paper) or GELU (BERT, GPT).
    ``bias=False`` drops β₁ and β₂ (T5). x: (B, N, d_model) -> (B, N, d_model).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}: expected one of {sorted(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[activation]
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)  # W₁ᵀ, β₁
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)  # W₂ᵀ, β₂

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (B, N, d_model)


# ----------------------------------------------------------------------------- blocks


class EncoderBlock(nn.Module):
    """Self-attention and FFN, each with a residual connection and a LayerNorm.

    Post-LN (``norm_first=False``)::           Pre-LN (``norm_first=True``)::

        X = LN₁(X + MHSA(X))                       X = X + MHSA(LN₁(X))
        X = LN₂(X + FFN(X))                        X = X + FFN(LN₂(X))

    Dropout acts on each sub-layer's output before the residual sum (and inside attention and
    the FFN). With ``is_causal=True`` this is the decoder-only (GPT) block. T5's block is
    ``norm_first=True, bias=False, norm="rms", scale=1.0``: no biases anywhere, RMSNorm, and
    scores QKᵀ without 1/√d_head.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, eps: float = 1e-5, *,
                 bias: bool = True, norm: str = "layer", scale: float | None = None) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias,
                                            scale=scale)
        self.ff = FeedForward(d_model, d_ff, dropout, activation, bias=bias)
        self.norm1 = NORMS[norm](d_model, eps)
        self.norm2 = NORMS[norm](d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: Tensor, key_mask: Tensor | None = None, attn_mask: Tensor | None = None,
                is_causal: bool = False, need_weights: bool = False,
                cache: KVCache | None = None, attn_bias: Tensor | None = None,
                qk_transform: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
                ) -> tuple[Tensor, Tensor | None]:
        """x: (B, N, d_model); key_mask: (B, N) bool, True at real tokens -> (B, N, d_model),
        attention weights (B, H, N, N) or None.

        attn_mask, is_causal, cache, attn_bias and qk_transform go to
        :class:`~coursekit.attention.MultiHeadAttention` unchanged.
        """

        def attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            a, w = self.self_attn(h, attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal,
                                  need_weights=need_weights, cache=cache, attn_bias=attn_bias,
                                  qk_transform=qk_transform)
            return self.dropout1(a), w

        if self.norm_first:
            a, weights = attend(self.norm1(x))
            x = x + a
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, weights = attend(x)
            x = self.norm1(x + a)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, weights


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to the encoder output ``memory``, then FFN.

    Post-LN (``norm_first=False``)::           Pre-LN (``norm_first=True``)::

        Y = LN₁(Y + MHSA_causal(Y))                Y = Y + MHSA_causal(LN₁(Y))
        Y = LN₂(Y + MHA(Y, memory))                Y = Y + MHA(LN₂(Y), memory)
        Y = LN₃(Y + FFN(Y))                        Y = Y + FFN(LN₃(Y))

    In cross-attention the queries come from the decoder and the keys and values from
    ``memory``, which is not normalised again here (the encoder's last norm did that).
    ``bias``, ``norm`` and ``scale`` as in :class:`EncoderBlock`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", norm_first: bool = False, eps: float = 1e-5, *,
                 bias: bool = True, norm: str = "layer", scale: float | None = None) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias,
                                            scale=scale)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias,
                                             scale=scale)
        self.ff = FeedForward(d_model, d_ff, dropout, activation, bias=bias)
        self.norm1 = NORMS[norm](d_model, eps)
        self.norm2 = NORMS[norm](d_model, eps)
        self.norm3 = NORMS[norm](d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, y: Tensor, memory: Tensor, key_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, is_causal: bool = True,
                need_weights: bool = False, cache: KVCache | None = None,
                attn_bias: Tensor | None = None, memory_cache: KVCache | None = None,
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """y: (B, N_t, d_model) decoder input, memory: (B, N_s, d_model) encoder output;
        key_mask: (B, N_t) and memory_mask: (B, N_s), bool, True at real tokens. ``cache`` and
        ``attn_bias`` (e.g. T5's relative bias) go to the self-attention; ``memory_cache`` keeps
        the cross-attention's keys and values of ``memory``, projected once for a whole
        generation.

        -> (B, N_t, d_model), self-attention weights (B, H, N_t, N_t) and cross-attention
        weights (B, H, N_t, N_s), both None unless ``need_weights``.
        """

        def self_attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            a, w = self.self_attn(h, key_mask=key_mask, is_causal=is_causal,
                                  need_weights=need_weights, cache=cache, attn_bias=attn_bias)
            return self.dropout1(a), w

        def cross_attend(h: Tensor) -> tuple[Tensor, Tensor | None]:
            a, w = self.cross_attn(h, memory, key_mask=memory_mask, need_weights=need_weights,
                                   cache=memory_cache)
            return self.dropout2(a), w

        if self.norm_first:
            a, w_self = self_attend(self.norm1(y))
            y = y + a
            a, w_cross = cross_attend(self.norm2(y))
            y = y + a
            y = y + self.dropout3(self.ff(self.norm3(y)))
        else:
            a, w_self = self_attend(y)
            y = self.norm1(y + a)
            a, w_cross = cross_attend(y)
            y = self.norm2(y + a)
            y = self.norm3(y + self.dropout3(self.ff(y)))
        return y, w_self, w_cross


# ----------------------------------------------------------------------------- stacks


class Encoder(nn.Module):
    """``n_layers`` encoder blocks, then a final LayerNorm when ``final_norm`` (default: Pre-LN
    stacks have one, since their residual stream is never normalised otherwise; Post-LN stacks
    end normalised already, but ``nn.Transformer`` adds one to both, hence the flag).
    ``bias``, ``norm`` and ``scale`` as in :class:`EncoderBlock`."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int,
                 dropout: float = 0.0, activation: str = "relu", norm_first: bool = False,
                 final_norm: bool | None = None, eps: float = 1e-5, *, bias: bool = True,
                 norm: str = "layer", scale: float | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout, activation, norm_first, eps,
                         bias=bias, norm=norm, scale=scale)
            for _ in range(n_layers))
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = NORMS[norm](d_model, eps) if final_norm else None

    def forward(self, x: Tensor, key_mask: Tensor | None = None, is_causal: bool = False,
                need_weights: bool = False, attn_bias: Tensor | None = None,
                ) -> tuple[Tensor, list[Tensor] | None]:
        """x: (B, N, d_model), key_mask: (B, N) -> (B, N, d_model), per-layer weights or None.
        ``attn_bias`` (B|1, H, N, N) is added to the scores of every layer (T5 computes its
        relative bias once and shares it)."""
        weights = []
        for layer in self.layers:
            x, w = layer(x, key_mask=key_mask, is_causal=is_causal, need_weights=need_weights,
                         attn_bias=attn_bias)
            weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        return x, weights if need_weights else None


class Decoder(nn.Module):
    """``n_layers`` decoder blocks over one encoder output, then an optional final LayerNorm.
    ``bias``, ``norm`` and ``scale`` as in :class:`EncoderBlock`."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int,
                 dropout: float = 0.0, activation: str = "relu", norm_first: bool = False,
                 final_norm: bool | None = None, eps: float = 1e-5, *, bias: bool = True,
                 norm: str = "layer", scale: float | None = None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout, activation, norm_first, eps,
                         bias=bias, norm=norm, scale=scale)
            for _ in range(n_layers))
        final_norm = norm_first if final_norm is None else final_norm
        self.norm = NORMS[norm](d_model, eps) if final_norm else None

    def forward(self, y: Tensor, memory: Tensor, key_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, need_weights: bool = False,
                attn_bias: Tensor | None = None, caches: list[KVCache] | None = None,
                memory_caches: list[KVCache] | None = None,
                ) -> tuple[Tensor, list[Tensor] | None, list[Tensor] | None]:
        """y: (B, N_t, d_model), memory: (B, N_s, d_model) -> (B, N_t, d_model) and, with
        ``need_weights``, per-layer self- (B, H, N_t, N_t) and cross-attention (B, H, N_t, N_s)
        weights. ``attn_bias`` is added to every layer's self-attention scores; ``caches`` and
        ``memory_caches`` (one :class:`~coursekit.attention.KVCache` per layer each) make
        generation one position per call: y holds only the new positions."""
        self_weights, cross_weights = [], []
        for i, layer in enumerate(self.layers):
            y, w_self, w_cross = layer(y, memory, key_mask=key_mask, memory_mask=memory_mask,
                                       need_weights=need_weights, attn_bias=attn_bias,
                                       cache=None if caches is None else caches[i],
                                       memory_cache=None if memory_caches is None
                                       else memory_caches[i])
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        if self.norm is not None:
            y = self.norm(y)
        if not need_weights:
            return y, None, None
        return y, self_weights, cross_weights


class EncoderDecoder(nn.Module):
    """The Transformer of Vaswani et al. (2017) without its embeddings: an :class:`Encoder` reads
    the source, a :class:`Decoder` writes the target while attending to it.

    The same computation as ``nn.Transformer`` (which always ends both stacks with a LayerNorm:
    pass ``final_norm=True`` to match it). Defaults are the paper's base model.
    """

    def __init__(self, d_model: int = 512, n_heads: int = 8, n_encoder_layers: int = 6,
                 n_decoder_layers: int = 6, d_ff: int = 2048, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False,
                 final_norm: bool | None = None, eps: float = 1e-5) -> None:
        super().__init__()
        args = (d_model, n_heads, d_ff, dropout, activation, norm_first, final_norm, eps)
        self.encoder = Encoder(n_encoder_layers, *args)
        self.decoder = Decoder(n_decoder_layers, *args)

    def forward(self, src: Tensor, tgt: Tensor, src_key_mask: Tensor | None = None,
                tgt_key_mask: Tensor | None = None) -> Tensor:
        """src: (B, N_s, d_model), tgt: (B, N_t, d_model) embedded sequences; key masks (B, N_s)
        and (B, N_t), True at real tokens -> (B, N_t, d_model). The decoder is always causal."""
        memory, _ = self.encoder(src, key_mask=src_key_mask)
        y, _, _ = self.decoder(tgt, memory, key_mask=tgt_key_mask, memory_mask=src_key_mask)
        return y


def xavier_init_(module: nn.Module) -> nn.Module:
    """Glorot-uniform every weight matrix of ``module`` (biases and LayerNorms keep their init),
    as the 2017 paper's code and ``nn.Transformer`` do. PyTorch's default for ``nn.Linear`` is
    smaller (by √3 for a square matrix): sub-layer outputs then stay small against the residual
    stream, which hides how Post-LN and Pre-LN stacks differ at initialisation."""
    for p in module.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return module


# ----------------------------------------------------------------------------- a token model


class Seq2SeqTransformer(nn.Module):
    """Tokens in, tokens out: embeddings (× √d_model, as in the paper) plus learned positions,
    an :class:`EncoderDecoder`, and a linear layer to the target vocabulary.

    Id ``pad_id`` is padding in both sequences; the source's padding is masked out of every
    attention over it, and the target needs no mask (it is right-padded and causal).
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 64, n_heads: int = 4,
                 n_encoder_layers: int = 2, n_decoder_layers: int = 2, d_ff: int | None = None,
                 max_len: int = 64, dropout: float = 0.0, activation: str = "relu",
                 norm_first: bool = True, pad_id: int = 0) -> None:
        super().__init__()
        self.d_model, self.pad_id, self.max_len = d_model, pad_id, max_len
        self.src_tok = nn.Embedding(src_vocab, d_model)
        self.tgt_tok = nn.Embedding(tgt_vocab, d_model)
        self.src_pos = nn.Embedding(max_len, d_model)
        self.tgt_pos = nn.Embedding(max_len, d_model)
        self.transformer = EncoderDecoder(d_model, n_heads, n_encoder_layers, n_decoder_layers,
                                          d_ff or 4 * d_model, dropout, activation, norm_first)
        self.head = nn.Linear(d_model, tgt_vocab)
        xavier_init_(self.transformer)
        for table in (self.src_tok, self.tgt_tok):  # × √d_model below brings them to std 1
            nn.init.normal_(table.weight, std=d_model**-0.5)

    def embed(self, ids: Tensor, tok: nn.Embedding, pos: nn.Embedding) -> Tensor:
        """ids: (B, N) -> (B, N, d_model)."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        return tok(ids) * math.sqrt(self.d_model) + pos(positions)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src: (B, N_s) ids -> memory (B, N_s, d_model) and its key mask (B, N_s)."""
        src_mask = src != self.pad_id
        memory, _ = self.transformer.encoder(self.embed(src, self.src_tok, self.src_pos),
                                             key_mask=src_mask)
        return memory, src_mask

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor,
               need_weights: bool = False) -> tuple[Tensor, list[Tensor] | None]:
        """tgt_in: (B, N_t) ids -> logits (B, N_t, V_tgt), per-layer cross-attention weights."""
        y, _, cross = self.transformer.decoder(self.embed(tgt_in, self.tgt_tok, self.tgt_pos),
                                               memory, memory_mask=src_mask,
                                               need_weights=need_weights)
        return self.head(y), cross

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing. src: (B, N_s), tgt_in: (B, N_t) starting with BOS -> logits."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)[0]

    @torch.no_grad()
    def generate(self, src: Tensor, max_len: int, bos_id: int,
                 need_weights: bool = False) -> tuple[Tensor, list[Tensor] | None]:
        """Greedy decoding -> ids (B, max_len) and, with ``need_weights``, the cross-attention of
        every layer for the generated sequence, (B, H, max_len, N_s) each."""
        memory, src_mask = self.encode(src)
        ids = src.new_full((src.shape[0], 1), bos_id)
        for _ in range(max_len):  # recomputes the prefix each step: short outputs, clear code
            logits, _ = self.decode(ids, memory, src_mask)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        cross = self.decode(ids[:, :-1], memory, src_mask, need_weights=True)[1] \
            if need_weights else None
        return ids[:, 1:], cross

