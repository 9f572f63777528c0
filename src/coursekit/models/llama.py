"""Llama: the decoder of today's open models, weight-compatible with ``LlamaForCausalLM``.

Llama (Touvron et al. 2023) is GPT-2's pre-norm decoder (:mod:`coursekit.models.gpt`) with four
parts swapped and the biases dropped::

    h⁰ = E_tok[ids]                                   # no position table: RoPE rotates q and k
    h = h^ℓ-1 + GQA(RMSNorm(h^ℓ-1));  h^ℓ = h + SwiGLU(RMSNorm(h))      ℓ = 1..L
    P(x_i+1 | x_≤i) = softmax(RMSNorm(h^L_i) W_out)   # W_out = E_tokᵀ when the embeddings are tied

- RMSNorm (Zhang & Sennrich 2019) for LayerNorm: no mean subtracted, no shift δ
  (:class:`coursekit.transformer.RMSNorm`);
- SwiGLU (Shazeer 2020) for the GELU MLP: W_down (SiLU(x W_gate) ⊙ x W_up), three matrices of
  d_model × d_ff with d_ff ≈ 2/3 · 4 d_model (:func:`llama_hidden_width`), so that the block keeps
  the 8 d_model² weights of a GELU MLP of width 4 d_model;
- rotary positions (Su et al. 2021) for the learned table: Chapter 5's :class:`RoPE`, applied to
  every layer's per-head queries and keys before the cache;
- grouped-query attention (Ainslie et al. 2023) for multi-head attention: H query heads share
  H_kv key/value heads, H / H_kv query heads per group, so the KV cache holds 2·H_kv·d_head
  numbers per token and layer instead of 2·d_model.

Parameter names follow Hugging Face's (``q_proj``, ``gate_proj``, ``input_layernorm``, ...), so
the port (:func:`hf_state_dict`) only renames the outer keys. With ``qkv_bias=True`` the same
model is Qwen2's (biases on W^Q, W^K, W^V only): :func:`to_hf` builds ``Qwen2ForCausalLM`` then.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit import decoding
from coursekit.attention import (
    KVCache,
    causal_mask,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from coursekit.positional import RoPE
from coursekit.transformer import RMSNorm

# ----------------------------------------------------------------------------- SwiGLU


def llama_hidden_width(d_model: int, multiple_of: int = 256, multiplier: float | None = None) -> int:
    """Llama's SwiGLU width: 2/3 · 4 d_model (times ``multiplier``), rounded *up* to a multiple of
    ``multiple_of``. Llama-7B: d_model = 4096 -> int(2/3 · 16384) = 10922 -> 11008."""
    hidden = int(2 * (4 * d_model) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * -(-hidden // multiple_of)


class SwiGLU(nn.Module):
    """FFN(x) = W_down (SiLU(x W_gate) ⊙ (x W_up)), no biases (Shazeer 2020, Eq. 6).

    SiLU(z) = z · σ(z) (Swish with β = 1). The gate branch decides, feature by feature, how much
    of the linear ``up`` branch passes. gate_proj, up_proj: (d_ff, d_model) as ``nn.Linear``
    stores them; down_proj: (d_model, d_ff). x: (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)  # W_gate
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)  # W_up
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)  # W_down

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))  # (..., d_model)


# ----------------------------------------------------------------------------- grouped-query attention


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, H_kv, N, d_head) -> (B, H_kv · n_rep, N, d_head): each key/value head repeated for the
    n_rep consecutive query heads of its group (heads k·n_rep .. (k+1)·n_rep − 1 read head k)."""
    return x.repeat_interleave(n_rep, dim=-3)


def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor,
                            mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Attention with H query heads and H_kv key/value heads, H_kv dividing H.

    q: (B, H, N_q, d_head), k, v: (B, H_kv, N_k, d_head); mask: bool broadcastable to
    (B, H, N_q, N_k), True = may attend -> output (B, H, N_q, d_head), weights (B, H, N_q, N_k).
    Query head h reads key/value head h // (H / H_kv): the same result as
    ``F.scaled_dot_product_attention(..., enable_gqa=True)``, through the book's explicit path.
    """
    group = q.shape[-3] // k.shape[-3]
    return scaled_dot_product_attention(q, repeat_kv(k, group), repeat_kv(v, group), mask)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``n_heads`` query heads and ``n_kv_heads`` key/value heads.

    q_proj: (H·d_head, d_model), k_proj and v_proj: (H_kv·d_head, d_model), o_proj: (d_model,
    H·d_head); ``n_kv_heads == n_heads`` is multi-head attention, 1 multi-query. ``qkv_bias``
    adds biases to q_proj, k_proj, v_proj (Qwen2); Llama has none.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, qkv_bias: bool = False) -> None:
        super().__init__()
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"need n_heads | d_model and n_kv_heads | n_heads: got d_model={d_model}, "
                             f"n_heads={n_heads}, n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=qkv_bias)  # W^Q
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=qkv_bias)  # W^K: H_kv heads
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=qkv_bias)  # W^V: H_kv heads
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=False)  # W^O

    def forward(self, x: Tensor, rope: RoPE, cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (B, N, d_model), the new positions; ``cache`` holds the earlier ones' keys and values
        (H_kv heads, rotated) -> output (B, N, d_model), weights (B, H, N, N_k) or None."""
        start = len(cache) if cache is not None else 0
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, N, d_head)
        k = split_heads(self.k_proj(x), self.n_kv_heads)  # (B, H_kv, N, d_head)
        v = split_heads(self.v_proj(x), self.n_kv_heads)  # (B, H_kv, N, d_head)
        q, k = rope.rotate(q, k, start)  # positions start .. start + N − 1
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, N_k, d_head): the cache stores H_kv heads only
        n_q, n_k = q.shape[-2], k.shape[-2]
        if need_weights:  # the teaching path: heads repeated, attention written out
            out, weights = grouped_query_attention(q, k, v, causal_mask(n_q, n_k, device=x.device))
        else:  # the production path: the fused kernel groups the heads itself
            mask = None if n_q == n_k else causal_mask(n_q, n_k, device=x.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=n_q == n_k,
                                                 enable_gqa=True)
            weights = None
        return self.o_proj(merge_heads(out)), weights


# ----------------------------------------------------------------------------- the model


class LlamaBlock(nn.Module):
    """h = x + GQA(RMSNorm(x)); y = h + SwiGLU(RMSNorm(h)). x: (B, N, d_model)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, eps: float,
                 qkv_bias: bool = False) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(d_model, eps)
        self.self_attn = GroupedQueryAttention(d_model, n_heads, n_kv_heads, qkv_bias)
        self.post_attention_layernorm = RMSNorm(d_model, eps)
        self.mlp = SwiGLU(d_model, d_ff)

    def forward(self, x: Tensor, rope: RoPE, cache: KVCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        a, weights = self.self_attn(self.input_layernorm(x), rope, cache, need_weights)
        h = x + a
        return h + self.mlp(self.post_attention_layernorm(h)), weights


class Llama(nn.Module):
    """``Llama(vocab_size, d_model, n_heads, n_kv_heads, n_layers, d_ff)``: token table, L blocks,
    final RMSNorm, output layer (tied to the token table with ``tie_embeddings=True``).

    ``d_ff=None`` takes :func:`llama_hidden_width` with ``multiple_of``; ``n_kv_heads=None`` is
    multi-head attention. forward(ids, caches=...) -> logits (B, N, vocab_size) and, with
    ``need_weights=True``, every layer's attention weights (B, H, N, N_k); ``caches`` (one
    :class:`KVCache` per block) hold earlier positions during generation, as in
    :mod:`coursekit.decoding`.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4,
                 n_kv_heads: int | None = None, n_layers: int = 2, d_ff: int | None = None,
                 multiple_of: int = 256, rope_base: float = 10000.0, eps: float = 1e-6,
                 tie_embeddings: bool = False, qkv_bias: bool = False) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        d_ff = llama_hidden_width(d_model, multiple_of) if d_ff is None else d_ff
        self.tok = nn.Embedding(vocab_size, d_model)  # E_tok
        self.rope = RoPE(rope_base)  # no parameters, no largest position
        self.blocks = nn.ModuleList(LlamaBlock(d_model, n_heads, n_kv_heads, d_ff, eps, qkv_bias)
                                    for _ in range(n_layers))
        self.norm = RMSNorm(d_model, eps)
        self.head = nn.Linear(d_model, vocab_size, bias=False)  # W_out
        if tie_embeddings:
            self.head.weight = self.tok.weight
        self.tie_embeddings, self.qkv_bias = tie_embeddings, qkv_bias
        for module in self.modules():  # Hugging Face's initialisation: N(0, 0.02), zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None,
                need_weights: bool = False) -> tuple[Tensor, list[Tensor] | None]:
        """ids: (B, N) -> logits (B, N, vocab_size), attention weights or None."""
        x = self.tok(ids)  # (B, N, d_model)
        attentions = []
        for i, block in enumerate(self.blocks):
            x, weights = block(x, self.rope, caches[i] if caches else None, need_weights)
            attentions.append(weights)
        return self.head(self.norm(x)), attentions if need_weights else None

    @torch.no_grad()
    def generate(self, ids: Tensor, max_new_tokens: int, use_cache: bool = True,
                 eos_id: int | None = None) -> Tensor:
        """Greedy continuation of ids (B, N) -> (B, N + new), with or without the KV cache
        (:func:`coursekit.decoding.greedy`; ``decoding.sample`` and ``beam_search`` work too)."""
        return decoding.greedy(self, ids, max_new_tokens, use_cache=use_cache, eos_id=eos_id)

    @property
    def config(self) -> dict[str, int | float | bool]:
        attn, block = self.blocks[0].self_attn, self.blocks[0]
        return {"vocab_size": self.tok.num_embeddings, "d_model": self.tok.embedding_dim,
                "n_heads": attn.n_heads, "n_kv_heads": attn.n_kv_heads,
                "n_layers": len(self.blocks), "d_ff": block.mlp.gate_proj.out_features,
                "rope_base": self.rope.base, "eps": self.norm.eps,
                "tie_embeddings": self.tie_embeddings, "qkv_bias": self.qkv_bias}


def llama_parameters(vocab_size: int, d_model: int, n_heads: int, n_kv_heads: int, n_layers: int,
                     d_ff: int, tie_embeddings: bool = False, qkv_bias: bool = False) -> int:
    """The exact parameter count. Per block, with d = d_model, d_kv = H_kv · d/H: attention
    2d² + 2·d·d_kv (+ d + 2 d_kv with Qwen2's biases), SwiGLU 3·d·d_ff, two RMSNorms 2d; then
    the token table |V|·d, an untied output layer |V|·d more, and the final RMSNorm d."""
    d, d_kv = d_model, n_kv_heads * (d_model // n_heads)
    attention = 2 * d * d + 2 * d * d_kv + ((d + 2 * d_kv) if qkv_bias else 0)
    block = attention + 3 * d * d_ff + 2 * d
    return n_layers * block + vocab_size * d * (1 if tie_embeddings else 2) + d


def kv_cache_numbers(d_model: int, n_heads: int, n_kv_heads: int) -> int:
    """Numbers the KV cache holds per token and layer: a key and a value per K/V head, 2·H_kv·d_head."""
    return 2 * n_kv_heads * (d_model // n_heads)


# ----------------------------------------------------------------------------- Hugging Face


def hf_config(model: Llama, max_len: int = 2048):
    """The ``transformers`` config of the same architecture: ``LlamaConfig``, or ``Qwen2Config``
    for a model with ``qkv_bias``. ``max_len`` only sizes Hugging Face's rotary cache."""
    from transformers import LlamaConfig, Qwen2Config

    c = model.config
    common = dict(vocab_size=c["vocab_size"], hidden_size=c["d_model"], intermediate_size=c["d_ff"],
                  num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
                  num_key_value_heads=c["n_kv_heads"], hidden_act="silu", rms_norm_eps=c["eps"],
                  max_position_embeddings=max_len, tie_word_embeddings=c["tie_embeddings"],
                  rope_theta=c["rope_base"],  # Transformers 4 and 5 (5 files it in rope_parameters)
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if c["qkv_bias"]:
        return Qwen2Config(**common, use_sliding_window=False)
    return LlamaConfig(**common, attention_bias=False, mlp_bias=False)


def hf_state_dict(model: Llama) -> dict[str, torch.Tensor]:
    """coursekit's parameters under ``LlamaForCausalLM``'s (and ``Qwen2ForCausalLM``'s) names."""
    out = {}
    for name, value in model.state_dict().items():
        if name.startswith("blocks."):
            name = "model.layers." + name.removeprefix("blocks.")
        elif name == "tok.weight":
            name = "model.embed_tokens.weight"
        elif name == "norm.weight":
            name = "model.norm.weight"
        elif name == "head.weight":
            name = "lm_head.weight"
        out[name] = value
    return out


def to_hf(model: Llama, max_len: int = 2048):
    """A ``LlamaForCausalLM`` (``Qwen2ForCausalLM`` with ``qkv_bias``) holding ``model``'s weights,
    in eval mode, in ``model``'s dtype."""
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    config = hf_config(model, max_len)
    family = Qwen2ForCausalLM if model.qkv_bias else LlamaForCausalLM
    hf = family(config).to(model.tok.weight.dtype)
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.tie_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"weight port: missing {missing}, unexpected {unexpected}")
    return hf.eval()
