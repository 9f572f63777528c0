"""T5 (Raffel et al., 2020), the text-to-text encoder–decoder, built from the book's blocks.

The blocks are Chapter 6's :class:`~coursekit.transformer.EncoderBlock` and
:class:`~coursekit.transformer.DecoderBlock`, Pre-LN, with T5's five departures from the 2017
Transformer (the table of notebook 07g)::

    x = x + MHA(RMSNorm(x))       # 1. RMSNorm: no mean, no shift δ, ε = 1e-6 (T5LayerNorm)
    x = x + FFN(RMSNorm(x))       # 2. W₂ ReLU(W₁ x): no biases anywhere
    scores = Q Kᵀ + b(j − i)      # 3. no 1/√d_head (W^Q's initialisation is that much smaller)

4. positions: no position is embedded; the relative bias b (Chapter 5's buckets) is all T5 knows
   about order, and it is *one* table per stack (bidirectional buckets in the encoder, causal
   ones in the decoder), computed once from the lengths and added in every layer (Raffel et al.,
   §2.1: shared across layers "for efficiency") — Hugging Face keeps the table in the first block
   of each stack and passes its output on;
5. the output layer: one embedding table ``shared`` for encoder input, decoder input and output;
   the output layer is that table, applied to the decoder's output scaled by d_model^-1/2 (T5
   v1.0, ``T5ForConditionalGeneration`` with ``tie_word_embeddings=True``), where the 2017
   Transformer multiplies the embeddings by √d_model instead.

The decoder starts from the padding id (``decoder_start_token_id = pad = 0``).

:func:`hf_config` and :func:`to_hf_state_dict` / :func:`from_hf_state_dict` map a model to and
from ``transformers.T5ForConditionalGeneration`` (Hugging Face's separate W^Q, W^K, W^V are
the rows of the packed ``in_proj``). :meth:`T5.generate` is greedy decoding with a KV cache for
the decoder's self-attention and the encoder's keys and values projected once per layer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.attention import KVCache
from coursekit.positional import T5RelativeBias
from coursekit.transformer import Decoder, Encoder


@dataclass
class T5Config:
    """Sizes in the book's notation; ``hf_config`` renames them for Hugging Face."""

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4  # H; d_head = d_model / H (Hugging Face's d_kv)
    n_layers: int = 2  # encoder blocks
    n_decoder_layers: int | None = None  # default: as many as the encoder
    d_ff: int = 256
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6
    dropout: float = 0.0
    pad_id: int = 0  # padding, and the decoder's start token
    eos_id: int = 2  # coursekit.data.vocab.Vocab's <eos>

    def __post_init__(self) -> None:
        if self.n_decoder_layers is None:
            self.n_decoder_layers = self.n_layers


class T5(nn.Module):
    """T5 v1.0: ``forward(input_ids, decoder_input_ids) -> logits (B, N_t, vocab_size)``.

    input_ids: (B, N_s), right-padded with ``pad_id``; decoder_input_ids: (B, N_t), the target
    shifted right behind ``pad_id`` (:func:`shift_right`).
    """

    def __init__(self, config: T5Config) -> None:
        super().__init__()
        self.config = c = config
        self.shared = nn.Embedding(c.vocab_size, c.d_model)
        t5_block = dict(dropout=c.dropout, activation="relu", norm_first=True, final_norm=True,
                        eps=c.eps, bias=False, norm="rms", scale=1.0)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, **t5_block)
        self.decoder = Decoder(c.n_decoder_layers, c.d_model, c.n_heads, c.d_ff, **t5_block)
        self.encoder_bias = T5RelativeBias(c.n_heads, True, c.num_buckets, c.max_distance)
        self.decoder_bias = T5RelativeBias(c.n_heads, False, c.num_buckets, c.max_distance)
        self.dropout = nn.Dropout(c.dropout)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """T5's initialisation (Mesh TensorFlow, as ``T5PreTrainedModel._init_weights``): unit
        embeddings, and each matrix at std fan_in^-1/2, except W^Q at (d_model · d_head)^-1/2 —
        the missing 1/√d_head of the scores is folded into the queries' initial scale."""
        d, d_head = self.config.d_model, self.config.d_model // self.config.n_heads
        nn.init.normal_(self.shared.weight, std=1.0)
        for table in (self.encoder_bias, self.decoder_bias):
            nn.init.normal_(table.relative_attention_bias.weight, std=d**-0.5)
        for name, p in self.named_parameters():
            if name.endswith("in_proj.weight"):
                nn.init.normal_(p, std=d**-0.5)
                nn.init.normal_(p[:d], std=(d * d_head) ** -0.5)  # W^Q
            elif name.endswith(("out_proj.weight", "linear1.weight", "linear2.weight")):
                nn.init.normal_(p, std=p.shape[1] ** -0.5)

    def encode(self, input_ids: Tensor, need_weights: bool = False,
               ) -> tuple[Tensor, Tensor, list[Tensor] | None]:
        """input_ids: (B, N_s) -> memory (B, N_s, d_model), its key mask (B, N_s) and, with
        ``need_weights``, each layer's self-attention (B, H, N_s, N_s)."""
        src_mask = input_ids != self.config.pad_id
        n = input_ids.shape[1]
        bias = self.encoder_bias.score_bias(n, n)[None]  # (1, H, N_s, N_s), shared by all layers
        memory, weights = self.encoder(self.dropout(self.shared(input_ids)), key_mask=src_mask,
                                       attn_bias=bias, need_weights=need_weights)
        return self.dropout(memory), src_mask, weights

    def decode(self, decoder_input_ids: Tensor, memory: Tensor, src_mask: Tensor,
               caches: list[KVCache] | None = None, memory_caches: list[KVCache] | None = None,
               need_weights: bool = False, bias: Tensor | None = None,
               ) -> tuple[Tensor, list[Tensor] | None]:
        """decoder_input_ids: (B, N_t), the new positions only when ``caches`` hold the earlier
        ones -> logits (B, N_t, vocab_size) and, with ``need_weights``, each layer's
        cross-attention (B, H, N_t, N_s). ``bias``: the relative bias of these positions,
        (1, H, N_t, N_past + N_t), computed here when not given."""
        if bias is None:
            n_new = decoder_input_ids.shape[1]
            n_past = len(caches[0]) if caches else 0
            bias = self.decoder_bias.score_bias(n_new, n_past + n_new)[None]
        y, _, cross = self.decoder(self.dropout(self.shared(decoder_input_ids)), memory,
                                   memory_mask=src_mask, attn_bias=bias, caches=caches,
                                   memory_caches=memory_caches, need_weights=need_weights)
        y = self.dropout(y) * self.config.d_model**-0.5  # the tied head's rescaling
        return F.linear(y, self.shared.weight), cross

    def forward(self, input_ids: Tensor, decoder_input_ids: Tensor) -> Tensor:
        """Teacher forcing: -> logits (B, N_t, vocab_size)."""
        memory, src_mask, _ = self.encode(input_ids)
        return self.decode(decoder_input_ids, memory, src_mask)[0]

    @torch.no_grad()
    def generate(self, input_ids: Tensor, max_new_tokens: int = 20,
                 use_cache: bool = True) -> Tensor:
        """Greedy decoding -> (B, N_out) ids, each row ending at its ``<eos>`` and padded after
        it; stops when every row has one (as Hugging Face's ``generate`` with its start token
        removed).

        With ``use_cache`` each step runs the decoder on the newest token only: its
        self-attention keys and values are appended to a :class:`KVCache` per layer, and the
        cross-attention's keys and values of the memory are projected at the first step and
        reused. Without it, each step recomputes the whole prefix (the same ids, O(N²) work).
        """
        c = self.config
        memory, src_mask, _ = self.encode(input_ids)
        n_layers = len(self.decoder.layers)
        caches = [KVCache() for _ in range(n_layers)] if use_cache else None
        memory_caches = [KVCache() for _ in range(n_layers)] if use_cache else None
        ids = input_ids.new_full((input_ids.shape[0], 1), c.pad_id)  # decoder_start_token_id
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        # the bias depends on offsets only: one (1, H, T, T) table, sliced at each step
        bias = self.decoder_bias.score_bias(max_new_tokens, max_new_tokens)[None]
        for t in range(max_new_tokens):
            step_in = ids[:, -1:] if use_cache else ids
            step_bias = bias[:, :, t:t + 1, :t + 1] if use_cache else bias[:, :, :t + 1, :t + 1]
            logits, _ = self.decode(step_in, memory, src_mask, caches, memory_caches,
                                    bias=step_bias)
            token = logits[:, -1].argmax(-1).masked_fill(done, c.pad_id)
            ids = torch.cat([ids, token[:, None]], dim=1)
            done |= token == c.eos_id
            if bool(done.all()):
                break
        return ids[:, 1:]


def shift_right(labels: Tensor, start_id: int = 0, pad_id: int = 0) -> Tensor:
    """The decoder's input for teacher forcing: ``start_id`` then the labels minus the last one.
    labels: (B, N_t), with -100 where the loss ignores them -> (B, N_t)."""
    shifted = labels.new_full(labels.shape, start_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_id)


# ----------------------------------------------------------------------------- Hugging Face


def hf_config(config: T5Config) -> dict:
    """Keyword arguments of ``transformers.T5Config`` for the same model (v1.0: ReLU FFN, tied
    and rescaled head)."""
    c = asdict(config)
    return dict(vocab_size=c["vocab_size"], d_model=c["d_model"],
                d_kv=c["d_model"] // c["n_heads"], d_ff=c["d_ff"], num_layers=c["n_layers"],
                num_decoder_layers=c["n_decoder_layers"], num_heads=c["n_heads"],
                relative_attention_num_buckets=c["num_buckets"],
                relative_attention_max_distance=c["max_distance"], dropout_rate=c["dropout"],
                layer_norm_epsilon=c["eps"], feed_forward_proj="relu", tie_word_embeddings=True,
                pad_token_id=c["pad_id"], eos_token_id=c["eos_id"],
                decoder_start_token_id=c["pad_id"])


def _attention_names(ours: str, theirs: str) -> list[tuple[str, str]]:
    return [(f"{ours}.out_proj.weight", f"{theirs}.o.weight")] + [
        (f"{ours}.in_proj.weight[{i}]", f"{theirs}.{w}.weight") for i, w in enumerate("qkv")]


def _names(config: T5Config) -> list[tuple[str, str]]:
    """(coursekit name, Hugging Face name) for every tensor; ``in_proj.weight[i]`` is the i-th
    third (W^Q, W^K, W^V) of the packed projection."""
    pairs = [("shared.weight", "shared.weight"),
             ("encoder_bias.relative_attention_bias.weight",
              "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
             ("decoder_bias.relative_attention_bias.weight",
              "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
             ("encoder.norm.weight", "encoder.final_layer_norm.weight"),
             ("decoder.norm.weight", "decoder.final_layer_norm.weight")]
    for i in range(config.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"encoder.block.{i}.layer"
        pairs += _attention_names(f"{ours}.self_attn", f"{theirs}.0.SelfAttention")
        pairs += [(f"{ours}.norm1.weight", f"{theirs}.0.layer_norm.weight"),
                  (f"{ours}.ff.linear1.weight", f"{theirs}.1.DenseReluDense.wi.weight"),
                  (f"{ours}.ff.linear2.weight", f"{theirs}.1.DenseReluDense.wo.weight"),
                  (f"{ours}.norm2.weight", f"{theirs}.1.layer_norm.weight")]
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"decoder.block.{i}.layer"
        pairs += _attention_names(f"{ours}.self_attn", f"{theirs}.0.SelfAttention")
        pairs += _attention_names(f"{ours}.cross_attn", f"{theirs}.1.EncDecAttention")
        pairs += [(f"{ours}.norm1.weight", f"{theirs}.0.layer_norm.weight"),
                  (f"{ours}.norm2.weight", f"{theirs}.1.layer_norm.weight"),
                  (f"{ours}.ff.linear1.weight", f"{theirs}.2.DenseReluDense.wi.weight"),
                  (f"{ours}.ff.linear2.weight", f"{theirs}.2.DenseReluDense.wo.weight"),
                  (f"{ours}.norm3.weight", f"{theirs}.2.layer_norm.weight")]
    return pairs


def to_hf_state_dict(model: T5) -> dict[str, Tensor]:
    """coursekit's parameters under Hugging Face's names, including the tied copies of the
    shared table (``encoder.embed_tokens``, ``decoder.embed_tokens``, ``lm_head``)."""
    ours = model.state_dict()
    out = {}
    for mine, theirs in _names(model.config):
        if mine.endswith("]"):
            name, i = mine[:-3], int(mine[-2])
            out[theirs] = ours[name].chunk(3)[i].clone()
        else:
            out[theirs] = ours[mine].clone()
    for tied in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
        out[tied] = out["shared.weight"]
    return out


def from_hf_state_dict(state: dict[str, Tensor], config: T5Config) -> dict[str, Tensor]:
    """A Hugging Face ``T5ForConditionalGeneration`` state dict -> coursekit's, for
    ``T5(config).load_state_dict``."""
    out: dict[str, Tensor] = {}
    thirds: dict[str, list[Tensor]] = {}
    for mine, theirs in _names(config):
        if mine.endswith("]"):
            thirds.setdefault(mine[:-3], []).append(state[theirs])
        else:
            out[mine] = state[theirs].clone()
    out.update({name: torch.cat(parts) for name, parts in thirds.items()})
    return out


# ----------------------------------------------------------------------------- size


def t5_parameters(n_layers: int, d_model: int, d_ff: int, n_heads: int, d_head: int,
                  vocab_size: int = 32128, num_buckets: int = 32) -> int:
    """The parameters of a T5 v1.0 ``T5ForConditionalGeneration`` (tied head, no biases).

    The shared table |V|·d; each stack has ``n_layers`` blocks, one relative-bias table
    (buckets × H) and a final RMSNorm d. Encoder block: attention 4·d·(H·d_head), FFN 2·d·d_ff,
    two RMSNorms 2d; decoder block: self- and cross-attention 8·d·(H·d_head), FFN 2·d·d_ff, three
    RMSNorms 3d. The larger T5s widen H·d_head beyond d_model (T5-3B: 32 × 128 = 4096 for d = 1024).
    """
    d, inner = d_model, n_heads * d_head
    encoder = n_layers * (4 * d * inner + 2 * d * d_ff + 2 * d) + num_buckets * n_heads + d
    decoder = n_layers * (8 * d * inner + 2 * d * d_ff + 3 * d) + num_buckets * n_heads + d
    return vocab_size * d + encoder + decoder


T5_PUBLISHED = {  # name: (n_layers per stack, d_model, d_ff, H, d_head, stated size)
    "T5-small": (6, 512, 2048, 8, 64, 60e6),
    "T5-base": (12, 768, 3072, 12, 64, 220e6),
    "T5-large": (24, 1024, 4096, 16, 64, 770e6),
    "T5-3B": (24, 1024, 16384, 32, 128, 3e9),
    "T5-11B": (24, 1024, 65536, 128, 128, 11e9),
}

