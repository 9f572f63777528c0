"""Attention, from Bahdanau's additive score to multi-head attention.

Conventions used throughout the book:
- a boolean mask is True where attention is *allowed* (the convention of
  ``F.scaled_dot_product_attention``'s boolean ``attn_mask``); it broadcasts to the scores;
- a row in which every position is masked gets all-zero weights, never NaN and never uniform;
- masked scores are filled with -inf, not a large negative number that still leaks weight.
"""

from __future__ import annotations

import math

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

    s: (B, d_s) decoder state, h: (B, T, d_h) encoder states, W: (d_a, d_s), U: (d_a, d_h),
    v: (d_a,) -> e: (B, T).
    """
    return torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v


def dot_score(s: Tensor, h: Tensor) -> Tensor:
    """Luong's dot score e_j = h_jᵀ s. s: (B, d), h: (B, T, d) -> (B, T)."""
    return (h @ s[:, :, None]).squeeze(-1)


def general_score(s: Tensor, h: Tensor, W: Tensor) -> Tensor:
    """Luong's general score e_j = h_jᵀ W s. s: (B, d_s), h: (B, T, d_h), W: (d_h, d_s) -> (B, T)."""
    return dot_score(s @ W.T, h)


def context_vector(weights: Tensor, h: Tensor) -> Tensor:
    """c = Σ_j α_j h_j. weights: (B, T), h: (B, T, d) -> (B, d)."""
    return (weights[:, None, :] @ h).squeeze(1)


class AdditiveAttention(nn.Module):
    """Bahdanau attention as a layer: scores, masked softmax, context."""

    def __init__(self, d_query: int, d_key: int, d_attn: int) -> None:
        super().__init__()
        self.W = nn.Linear(d_query, d_attn, bias=False)
        self.U = nn.Linear(d_key, d_attn, bias=False)
        self.v = nn.Linear(d_attn, 1, bias=False)

    def forward(self, s: Tensor, h: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """s: (B, d_q), h: (B, T, d_k), mask: (B, T) -> context (B, d_k), weights (B, T)."""
        scores = additive_score(s, h, self.W.weight, self.U.weight, self.v.weight[0])
        weights = masked_softmax(scores, mask)
        return context_vector(weights, h), weights


# ----------------------------------------------------------------------------- Chapter 3


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """softmax(QKᵀ/√d_k) V, returning the weights too (the explicit, teaching path).

    q: (..., N_q, d_k), k: (..., N_k, d_k), v: (..., N_k, d_v), mask: bool broadcastable to
    (..., N_q, N_k) -> output (..., N_q, d_v), weights (..., N_q, N_k).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., N_q, N_k)
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


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    Parameters are laid out as in ``nn.MultiheadAttention`` (one packed ``in_proj`` of shape
    (3·d_model, d_model) for W^Q, W^K, W^V, then ``out_proj`` for W^O), so weights port directly.
    With ``need_weights=False`` the heads run through the fused
    ``F.scaled_dot_product_attention`` (the production path); with ``need_weights=True`` through
    :func:`scaled_dot_product_attention`, which also returns the attention weights.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
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
    ) -> tuple[Tensor, Tensor | None]:
        """x_q: (B, N_q, d_model); x_kv: (B, N_k, d_model), or None for self-attention.

        attn_mask: bool (N_q, N_k) or (B, H|1, N_q, N_k), True = may attend; key_mask: bool
        (B, N_k), True = a real token (False = padding); is_causal adds the causal mask.
        -> output (B, N_q, d_model), weights (B, H, N_q, N_k) or None.
        """
        q, k, v = (split_heads(t, self.n_heads) for t in self.project(x_q, x_kv))
        mask = attn_mask
        if key_mask is not None:
            mask = key_mask[:, None, None, :] if mask is None else mask & key_mask[:, None, None, :]
        if is_causal:
            causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
            mask = causal if mask is None else mask & causal
        if need_weights:
            out, weights = scaled_dot_product_attention(q, k, v, mask)
            if self.training and self.dropout:
                raise ValueError("need_weights=True is for inspection: call it in eval mode")
        else:
            dropout = self.dropout if self.training else 0.0
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
        return self.out_proj(merge_heads(out)), weights
