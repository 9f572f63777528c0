"""Telling attention where a token is: six ways, one interface.

Self-attention treats its input as a set (Chapter 3): permute the tokens and the outputs come out
permuted, nothing else changes. A positional scheme breaks that symmetry in one of three places:

- **the embeddings** (absolute): add a vector p_pos to token pos before the first layer,
  sinusoidal (Vaswani et al., 2017) or a learned table (BERT, GPT-2);
- **the scores** (relative): add a bias that depends on the offset j − i between key j and
  query i, learned per bucket of offsets (T5, Raffel et al., 2020) or a fixed line per head
  (ALiBi, Press et al., 2022);
- **the queries and keys** (relative): rotate q_m and k_n by angles proportional to m and n, so
  that q_m · k_n depends on m − n only (RoPE, Su et al., 2021; Llama and most recent LLMs).

NoPE, no positional information at all, is the sixth: in a causal model the mask itself breaks
the symmetry (Kazemnejad et al., 2023).

Every scheme is a :class:`PositionalEncoding` with the same three hooks, each a no-op unless the
scheme uses it: ``embed`` (absolute schemes), ``score_bias`` (T5, ALiBi; an additive bias that
``coursekit.attention`` adds to QKᵀ/√d_k) and ``rotate`` (RoPE; applied to each head's queries and
keys before attention). ``positional_encoding("rope", ...)`` builds one by name.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

KINDS = ("none", "sinusoidal", "learned", "t5", "rope", "alibi")

# ----------------------------------------------------------------------------- sinusoidal


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0) -> Tensor:
    """The fixed encoding of Vaswani et al. (2017), one row per position.

    PE(pos, 2f) = sin(pos / base^(2f/d_model)),  PE(pos, 2f+1) = cos(pos / base^(2f/d_model)):
    feature pair f is a point on a circle turning at angular frequency ω_f = base^(−2f/d_model),
    from one radian per position (f = 0) down to about 1/base. -> (n_positions, d_model).
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even (sin/cos pairs), got {d_model}")
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]  # (N, 1)
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (d/2,)
    angles = pos * omega  # (N, d/2)
    pe = torch.empty(n_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe


# ----------------------------------------------------------------------------- T5 buckets


def relative_position_bucket(relative_position: Tensor, bidirectional: bool = True,
                             num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's bucket of each offset r = j − i (key position minus query position). Long -> long.

    Bidirectional: half the buckets for r ≤ 0, half for r > 0. Causal: every r > 0 (the future,
    masked anyway) shares the bucket of r = 0. Within a half of n buckets, the first n/2 are exact
    (|r| = 0, 1, ..., n/2 − 1); the rest cover n/2 ≤ |r| < max_distance on a log scale, and every
    |r| ≥ max_distance lands in the last bucket. Far offsets share buckets: that is what lets a
    model trained on short inputs run on long ones.
    """
    bucket = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)  # the future counts as distance 0
    max_exact = num_buckets // 2
    # log-spaced buckets for max_exact <= distance < max_distance (float32, as T5 computes it)
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < max_exact, distance, large)


def position_bias(table: Tensor, n_q: int, n_k: int, bidirectional: bool = True,
                  max_distance: int = 128) -> Tensor:
    """T5's relative bias b_h(bucket(j − i)) for every query i and key j, from one table.

    table: (num_buckets, H), one learned scalar per bucket and head -> (H, N_q, N_k). The queries
    are the last N_q of the N_k positions (i = N_k − N_q, ..., N_k − 1), as when a decoder with a
    KV cache adds N_q new tokens; with N_q = N_k they are all of them.
    """
    query = torch.arange(n_k - n_q, n_k, device=table.device)[:, None]  # (N_q, 1)
    key = torch.arange(n_k, device=table.device)[None, :]                # (1, N_k)
    buckets = relative_position_bucket(key - query, bidirectional, table.shape[0],
                                       max_distance)                     # (N_q, N_k)
    return table[buckets].permute(2, 0, 1)                               # (H, N_q, N_k)


# ----------------------------------------------------------------------------- RoPE


def rope_frequencies(d: int, base: float = 10000.0) -> Tensor:
    """θ_f = base^(−2f/d), f = 0 .. d/2 − 1: the rotation per position of feature pair f. -> (d/2,)."""
    if d % 2:
        raise ValueError(f"RoPE rotates pairs of features: d must be even, got {d}")
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))


def rotate_half(x: Tensor) -> Tensor:
    """(x_1, x_2) -> (−x_2, x_1) on the two halves of the last axis: a 90° turn of each pair
    (x[i], x[i + d/2]) in the half-split convention (Hugging Face Llama, GPT-NeoX)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x: Tensor) -> Tensor:
    """The same 90° turn for adjacent pairs (x[2f], x[2f+1]): the interleaved convention of the
    RoPE paper (RoFormer, GPT-J)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0, interleaved: bool = False) -> Tensor:
    """Rotate each feature pair of the token at position m by the angle m·θ_f.

    R_m x = x ⊙ cos(mθ) + rotate(x) ⊙ sin(mθ), so that ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩ depends on
    the offset only. Pair f is (x[f], x[f + d/2]) by default (half-split, Hugging Face Llama) and
    (x[2f], x[2f+1]) with ``interleaved=True`` (the RoPE paper). The two are the same rotation
    up to a fixed permutation of the features.

    x: (..., N, d), positions: (N,) integer positions -> (..., N, d).
    """
    cos, sin = rope_cos_sin(positions, x.shape[-1], base, interleaved)
    turn = rotate_every_two if interleaved else rotate_half
    return x * cos.to(x.dtype) + turn(x) * sin.to(x.dtype)


def rope_cos_sin(positions: Tensor, d: int, base: float = 10000.0,
                 interleaved: bool = False) -> tuple[Tensor, Tensor]:
    """cos(m·θ_f) and sin(m·θ_f) laid out as :func:`apply_rope` multiplies them, each feature
    pair's angle on both of its features. positions: (N,) -> two (N, d) float32 tensors."""
    angles = positions.to(torch.float32)[:, None] * rope_frequencies(d, base).to(positions.device)
    angles = angles.repeat_interleave(2, dim=-1) if interleaved else torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


# ----------------------------------------------------------------------------- ALiBi


def alibi_slopes(n_heads: int) -> Tensor:
    """The head slopes s_h of ALiBi (Press et al., 2022, who write m). -> (H,).

    For H a power of two, the geometric sequence 2^(−8/H), 2^(−16/H), ..., 2^(−8); otherwise the
    slopes of the nearest lower power of two, then every other slope of the next power of two.
    """

    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(n_heads).is_integer():
        slopes = power_of_2(n_heads)
    else:
        lower = 2 ** math.floor(math.log2(n_heads))
        slopes = power_of_2(lower) + power_of_2(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(slopes)


def alibi_bias(slopes: Tensor, n_q: int, n_k: int) -> Tensor:
    """−s_h · |i − j|, a penalty growing linearly with the distance from query i to key j.

    Queries are the last n_q of n_k positions (as in ``attention.causal_mask``). In a causal model
    only j ≤ i is ever used, where this is the paper's −m (i − j) with m = s_h. slopes: (H,) -> (H, N_q, N_k).
    """
    i = torch.arange(n_k - n_q, n_k, device=slopes.device)[:, None]
    j = torch.arange(n_k, device=slopes.device)[None, :]
    return slopes[:, None, None] * -(i - j).abs()


# ----------------------------------------------------------------------------- one interface


class PositionalEncoding(nn.Module):
    """Base class: three hooks, each a no-op here (which makes this class NoPE).

    embed(x, start)        x: (B, N, d_model) token embeddings of positions start..start+N−1
    rotate(q, k, start)    q, k: (B, H, N, d_head) per-head queries and keys of those positions
    score_bias(n_q, n_k)   None, or a float (H, N_q, N_k) added to the scaled scores QKᵀ/√d_k
    """

    kind = "none"

    def embed(self, x: Tensor, start: int = 0) -> Tensor:
        return x

    def rotate(self, q: Tensor, k: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        return q, k

    def score_bias(self, n_q: int, n_k: int) -> Tensor | None:
        return None

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


class NoPE(PositionalEncoding):
    """No positional information: attention sees a set (a causal mask still breaks the symmetry)."""


class SinusoidalPE(PositionalEncoding):
    """x_pos + PE(pos), the fixed :func:`sinusoidal_encoding`; defined for any position."""

    kind = "sinusoidal"

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model, self.base = d_model, base

    def embed(self, x: Tensor, start: int = 0) -> Tensor:
        pe = sinusoidal_encoding(start + x.shape[1], self.d_model, self.base)[start:]
        return x + pe.to(device=x.device, dtype=x.dtype)


class LearnedPE(PositionalEncoding):
    """x_pos + P[pos], a learned (max_len, d_model) table (BERT, GPT-2): no row past max_len.

    ``weight`` is initialised like ``nn.Embedding``'s (standard normal).
    """

    kind = "learned"

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight)

    def embed(self, x: Tensor, start: int = 0) -> Tensor:
        stop = start + x.shape[1]
        if stop > self.max_len:
            raise ValueError(f"sequence of {stop} tokens is longer than max_len={self.max_len}: "
                             "a learned table has no row for a position it never had")
        return x + self.weight[start:stop]


class T5RelativeBias(PositionalEncoding):
    """b_h(bucket(j − i)): one learned scalar per head and offset bucket, added to the scores.

    T5 computes it once, in the first layer, and every layer reuses it. The table is named as in
    Hugging Face's ``T5Attention`` (``relative_attention_bias``: (num_buckets, H)).
    """

    kind = "t5"

    def __init__(self, n_heads: int, bidirectional: bool = True, num_buckets: int = 32,
                 max_distance: int = 128) -> None:
        super().__init__()
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def score_bias(self, n_q: int, n_k: int) -> Tensor:
        return position_bias(self.relative_attention_bias.weight, n_q, n_k, self.bidirectional,
                             self.max_distance)  # (H, N_q, N_k)


class RoPE(PositionalEncoding):
    """Rotary position embedding: queries and keys rotated by :func:`apply_rope` in every layer."""

    kind = "rope"

    def __init__(self, base: float = 10000.0, interleaved: bool = False) -> None:
        super().__init__()
        self.base, self.interleaved = base, interleaved
        self._last: tuple | None = None

    def rotate(self, q: Tensor, k: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """q: (..., N, d), k: (..., N, d) -> both rotated for positions start .. start + N − 1,
        as :func:`apply_rope` rotates them."""
        cos, sin = self._cos_sin(start, q.shape[-2], q.shape[-1], q.device, q.dtype)
        turn = rotate_every_two if self.interleaved else rotate_half
        return q * cos + turn(q) * sin, k * cos + turn(k) * sin

    def _cos_sin(self, start: int, n: int, d: int, device, dtype) -> tuple[Tensor, Tensor]:
        # the angles depend on the positions only: computed once, then reused by q and k and by
        # every layer of the same forward pass (only the last set is kept)
        key = (start, n, d, device, dtype, torch.is_inference_mode_enabled())
        if self._last is None or self._last[0] != key:
            positions = torch.arange(start, start + n, device=device)
            cos, sin = rope_cos_sin(positions, d, self.base, self.interleaved)
            self._last = (key, cos.to(dtype), sin.to(dtype))
        return self._last[1], self._last[2]


class ALiBi(PositionalEncoding):
    """Attention with linear biases: −s_h · distance added to head h's scores; no parameters."""

    kind = "alibi"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def score_bias(self, n_q: int, n_k: int) -> Tensor:
        return alibi_bias(self.slopes, n_q, n_k)


def positional_encoding(kind: str, d_model: int, n_heads: int, max_len: int,
                        causal: bool = True) -> PositionalEncoding:
    """One of :data:`KINDS` by name: "none" (NoPE), "sinusoidal", "learned", "t5", "rope", "alibi".

    ``max_len`` sizes the learned table only; ``causal`` picks T5's causal buckets.
    """
    if kind == "none":
        return NoPE()
    if kind == "sinusoidal":
        return SinusoidalPE(d_model)
    if kind == "learned":
        return LearnedPE(max_len, d_model)
    if kind == "t5":
        return T5RelativeBias(n_heads, bidirectional=not causal)
    if kind == "rope":
        return RoPE()
    if kind == "alibi":
        return ALiBi(n_heads)
    raise ValueError(f"unknown positional encoding {kind!r}: choose one of {KINDS}")
