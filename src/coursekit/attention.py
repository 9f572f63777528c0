"""Attention, from Bahdanau's additive score to multi-head attention.

Conventions used throughout the book:
- a boolean mask is True where attention is *allowed* (the convention of
  ``F.scaled_dot_product_attention``'s boolean ``attn_mask``); it broadcasts to the scores;
- a row in which every position is masked gets all-zero weights, never NaN and never uniform;
- masked scores are filled with -inf, not a large negative number that still leaks weight;
- a positional scheme (Chapter 5, ``coursekit.positional``) enters through two optional hooks of
  the same attention: a float ``bias`` added to the scaled scores (T5, ALiBi) and a transform of
  the per-head queries and keys (RoPE).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# ----------------------------------------------------------------------------- masks


def masked_softmax(scores: Tensor, mask: Tensor | None = None, dim: int = -1) -> Tensor:
    """Softmax over ``dim`` restricted to positions where ``mask`` is True.

    scores: (..., N), mask: bool, broadcastable to scores -> weights (..., N) that sum to 1 over
    the allowed positions, and to 0 in a row with none allowed.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    mask = mask.expand_as(scores)
    any_allowed = mask.any(dim=dim, keepdim=True)
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~any_allowed, 0.0)
    return torch.softmax(scores, dim=dim).masked_fill(~any_allowed, 0.0)


def padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """lengths: (B,) -> (B, max_len) bool, True at the real (non-padding) positions."""
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]


def causal_mask(n_q: int, n_k: int | None = None, device: torch.device | None = None) -> Tensor:
    """(N_q, N_k) bool, True where query i may see key j, i.e. j <= i.

    With N_k > N_q (queries are the last N_q positions, as with a KV cache) query i sits at
    position i + N_k - N_q.
    """
    n_k = n_q if n_k is None else n_k
    return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril(diagonal=n_k - n_q)


# ----------------------------------------------------------------------------- scores (Chapter 2)


def additive_score(s: Tensor, h: Tensor, W: Tensor, U: Tensor, v: Tensor) -> Tensor:
    """Bahdanau's score e_j = vᵀ tanh(W s + U h_j).

    s: (B, d_s) decoder state, h: (B, N, d_enc) encoder annotations, W: (d_a, d_s),
    U: (d_a, d_enc), v: (d_a,) -> e: (B, N).
    """
    return additive_score_from_keys(s, h @ U.T, W, v)


def additive_score_from_keys(s: Tensor, keys: Tensor, W: Tensor, v: Tensor) -> Tensor:
    """:func:`additive_score` with the keys U h_j already computed. keys: (B, N, d_a).

    U h_j does not depend on the decoder's step, so a decoder computes the keys once per
    sentence and only W s_{i-1} at every step (for Chapter 2b's attention model on one CPU
    thread, 45 -> 36 ms per training step)."""
    return torch.tanh((s @ W.T)[:, None, :] + keys) @ v


def dot_score(s: Tensor, h: Tensor) -> Tensor:
    """Luong's dot score e_j = h_jᵀ s. s: (B, d), h: (B, N, d) -> (B, N)."""
    return (h @ s[:, :, None]).squeeze(-1)


def general_score(s: Tensor, h: Tensor, W: Tensor) -> Tensor:
    """Luong's general score e_j = h_jᵀ W s. s: (B, d_s), h: (B, N, d_enc), W: (d_enc, d_s) -> (B, N)."""
    return dot_score(s @ W.T, h)


def context_vector(weights: Tensor, h: Tensor) -> Tensor:
    """c = Σ_j α_j h_j. weights: (B, N), h: (B, N, d) -> (B, d)."""
    return (weights[:, None, :] @ h).squeeze(1)


class AdditiveAttention(nn.Module):
    """Bahdanau attention as a layer: scores, masked softmax, context."""

    def __init__(self, d_query: int, d_key: int, d_attn: int) -> None:
        super().__init__()
        self.W = nn.Linear(d_query, d_attn, bias=False)
        self.U = nn.Linear(d_key, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)

    def keys(self, h: Tensor) -> Tensor:
        """U h_j for every annotation: h (B, N, d_k) -> keys (B, N, d_attn), the same at every
        decoder step (compute them once and pass them to ``forward``)."""
        return h @ self.U.weight.T

    def forward(self, s: Tensor, h: Tensor, mask: Tensor | None = None,
                keys: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """s: (B, d_q), h: (B, N, d_k), mask: (B, N), keys: ``self.keys(h)`` or None (computed
        here) -> context (B, d_k), weights (B, N)."""
        keys = self.keys(h) if keys is None else keys
        scores = additive_score_from_keys(s, keys, self.W.weight, self.v.weight[0])
        weights = masked_softmax(scores, mask)
        return context_vector(weights, h), weights


# ----------------------------------------------------------------------------- Chapter 3


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, bias: Tensor | None = None,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(QKᵀ/√d_k + B) V, returning the weights too (the explicit, teaching path).

    q: (..., N_q, d_k), k: (..., N_k, d_k), v: (..., N_k, d_v), mask: bool broadcastable to
    (..., N_q, N_k); bias B: float broadcastable to (..., N_q, N_k), a positional score bias
    (T5, ALiBi), the same as a float ``attn_mask`` of ``F.scaled_dot_product_attention``;
    ``scale`` replaces 1/√d_k, as ``F.scaled_dot_product_attention``'s does (T5 uses 1: its
    initialisation folds the scale into W^Q) -> output (..., N_q, d_v), weights (..., N_q, N_k).
    """
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., N_q, N_k)
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, mask)
    return weights @ v, weights


# ----------------------------------------------------------------------------- Chapter 4


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, N, d_model) -> (B, H, N, d_head) with d_head = d_model / H."""
    B, N, d_model = x.shape
    return x.view(B, N, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, N, d_head) -> (B, N, H * d_head): the concatenation of the heads."""
    B, H, N, d_head = x.shape
    return x.transpose(1, 2).reshape(B, N, H * d_head)


@dataclass
class KVCache:
    """The keys and values one attention layer has computed so far, for generation.

    k, v: (B, H, N_past, d_head). Each decoding step appends its new position's key and value, so
    the step costs O(N) instead of recomputing every earlier position: O(N²) over a sequence.
    """

    k: Tensor | None = None
    v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, N_new, d_head) keys and values; return all of them so far."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    Parameters are laid out as in ``nn.MultiheadAttention`` (one packed ``in_proj`` of shape
    (3·d_model, d_model) for W^Q, W^K, W^V, then ``out_proj`` for W^O), so weights port directly.
    With ``need_weights=False`` the heads run through the fused
    ``F.scaled_dot_product_attention`` (the production path); with ``need_weights=True`` through
    :func:`scaled_dot_product_attention`, which also returns the attention weights (in training
    mode, the weights after dropout, the ones applied to V, as ``nn.MultiheadAttention`` returns).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 scale: float | None = None) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
        self.scale = scale  # None: 1/√d_head; T5 uses 1.0
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def project(self, x_q: Tensor, x_kv: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V, each (B, N, d_model); one matmul when the attention is self-attention."""
        if x_kv is None:
            return self.in_proj(x_q).chunk(3, dim=-1)
        W, b = self.in_proj.weight, self.in_proj.bias
        d = self.d_model
        q = F.linear(x_q, W[:d], None if b is None else b[:d])
        k, v = F.linear(x_kv, W[d:], None if b is None else b[d:]).chunk(2, dim=-1)
        return q, k, v

    def forward(
        self,
        x_q: Tensor,
        x_kv: Tensor | None = None,
        attn_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        attn_bias: Tensor | None = None,
        qk_transform: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x_q: (B, N_q, d_model); x_kv: (B, N_k, d_model), or None for self-attention.

        attn_mask: bool (N_q, N_k) or (B, H|1, N_q, N_k), True = may attend; key_mask: bool
        (B, N_k), True = a real token (False = padding); is_causal adds the causal mask (aligned
        to the last keys when a ``cache`` holds earlier positions). attn_bias: float, broadcastable
        to (B, H, N_q, N_k), added to the scaled scores; qk_transform(q, k) -> (q, k) acts on the
        per-head (B, H, N, d_head) queries and keys before the cache (Chapter 5's positions).
        In cross-attention (``x_kv`` given) a ``cache`` holds the projected memory instead: the
        first call fills it, later calls reuse it and project only the queries.
        -> output (B, N_q, d_model), weights (B, H, N_q, N_k) or None.
        """
        if x_kv is not None and cache is not None and len(cache):  # memory projected already
            W, b = self.in_proj.weight, self.in_proj.bias
            q = F.linear(x_q, W[:self.d_model], None if b is None else b[:self.d_model])
            q, k, v = split_heads(q, self.n_heads), cache.k, cache.v
        else:
            q, k, v = (split_heads(t, self.n_heads) for t in self.project(x_q, x_kv))
            if qk_transform is not None:  # e.g. RoPE: keys are cached already rotated
                q, k = qk_transform(q, k)
            if cache is not None:  # generation: the new queries see every key so far
                k, v = cache.append(k, v)
        mask = attn_mask
        if key_mask is not None:
            mask = key_mask[:, None, None, :] if mask is None else mask & key_mask[:, None, None, :]
        # causal self-attention over a whole sequence: SDPA's own is_causal (top-left, which is
        # ours when N_q = N_k) lets it use its fused causal kernel instead of a mask
        fused_causal = (is_causal and not need_weights and mask is None and attn_bias is None
                        and q.shape[-2] == k.shape[-2])
        if is_causal and q.shape[-2] > 1 and not fused_causal:  # one (newest) query sees every key
            causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
            mask = causal if mask is None else mask & causal
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask, bias=attn_bias,
                                                        scale=self.scale)
            if self.training and self.dropout:  # as nn.MultiheadAttention: the weights dropped
                weights = F.dropout(weights, self.dropout)  # out, and returned, are those used
                out = weights @ v
        else:
            dropout = self.dropout if self.training else 0.0
            if attn_bias is not None:  # one float mask: the bias, and -inf where not allowed
                mask = attn_bias if mask is None else torch.where(mask, attn_bias, float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                 scale=self.scale, is_causal=fused_causal)
            weights = None
        return self.out_proj(merge_heads(out)), weights


# ---- Chapter 3: self-attention layer and chunked attention


class SelfAttention(nn.Module):
    """One head of self-attention: queries, keys and values all come from the same inputs X.

    Q = X W_Q, K = X W_K, V = X W_V, Y = softmax(QKᵀ/√d_k) V (row-major: one token per row).
    ``W_Q``, ``W_K``, ``W_V`` are ``nn.Linear`` layers, so ``W_Q.weight`` is W_Qᵀ: (d_k, d_model).
    d_k defaults to d_model and d_v to d_k.
    """

    def __init__(self, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 bias: bool = False) -> None:
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_k if d_v is None else d_v
        self.W_Q = nn.Linear(d_model, d_k, bias=bias)
        self.W_K = nn.Linear(d_model, d_k, bias=bias)
        self.W_V = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x: (B, N, d_model), mask: bool broadcastable to (B, N, N), True = may attend
        -> output (B, N, d_v), weights (B, N, N)."""
        return scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)


def chunked_attention(q: Tensor, k: Tensor, v: Tensor, chunk_size: int,
                      causal: bool = False) -> Tensor:
    """softmax(QKᵀ/√d_k) V, computed over blocks of ``chunk_size`` keys with an online softmax.

    The (N_q, N_k) weight matrix is never built: each block's scores are (N_q, C), so in the
    forward pass without gradients (inference) the working memory grows like N_q·C instead of
    N_q·N_k. Per query row it keeps a running max m, a running denominator ℓ = Σ_j exp(s_j − m)
    (Milakov & Gimelshein's online softmax) and a running numerator acc = Σ_j exp(s_j − m) v_j
    (Rabe & Staats; Dao et al.'s FlashAttention); when a block raises the max to m', both sums are
    rescaled by exp(m − m'). The answer is acc / ℓ, the same as the two-pass softmax.

    With gradients, autograd saves every block's tensors for the backward pass: N_q·N_k numbers
    again, spread over N_k / C blocks (more than the explicit path keeps). A memory-efficient
    training kernel (FlashAttention, ``F.scaled_dot_product_attention``) saves only the output
    and one log-sum-exp per query row, and its backward recomputes each block from them.

    ``causal`` uses :func:`causal_mask`'s alignment (query i sits at position i + N_k − N_q); a
    row with no allowed key gets zeros. q: (..., N_q, d_k), k: (..., N_k, d_k),
    v: (..., N_k, d_v) -> (..., N_q, d_v).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    n_q, n_k = q.shape[-2], k.shape[-2]
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q = q / math.sqrt(q.shape[-1])
    m = q.new_full((*batch, n_q, 1), float("-inf"))  # running max of the scores
    l = q.new_zeros((*batch, n_q, 1))  # running Σ exp(s − m)
    acc = q.new_zeros((*batch, n_q, v.shape[-1]))  # running Σ exp(s − m) v
    query_pos = torch.arange(n_q, device=q.device)[:, None] + (n_k - n_q)
    for start in range(0, n_k, chunk_size):
        stop = min(start + chunk_size, n_k)
        s = q @ k[..., start:stop, :].transpose(-2, -1)  # (..., N_q, C)
        if causal:
            allowed = torch.arange(start, stop, device=q.device) <= query_pos  # (N_q, C)
            s = s.masked_fill(~allowed, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # rows with nothing allowed yet
        p = torch.exp(s - m_safe)  # unnormalised weights of this block
        rescale = torch.exp(m - m_safe)  # what the old sums are worth under the new max
        l = l * rescale + p.sum(dim=-1, keepdim=True)
        acc = acc * rescale + p @ v[..., start:stop, :]
        m = m_new
    return acc / l.masked_fill(l == 0, 1.0)
