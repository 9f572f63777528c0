"""Chapter 5 — positional encoding: ``sinusoidal_encoding``, T5's ``relative_position_bucket`` and
RoPE's ``apply_rope``.

Each reference is a line-by-line transcription of the authority's code, kept free of the
``transformers`` import so that a check stays instant; ``tests/test_ch05_positional.py`` proves
every reference equal to the original on every case of its suite:

- 05.1: Hugging Face GPT-J's ``create_sinusoidal_positions`` (the frequencies of Vaswani et al.,
  laid out sin | cos), re-interleaved into the paper's layout (sin on even, cos on odd features);
- 05.2: Hugging Face ``T5Attention._relative_position_bucket``;
- 05.3: Hugging Face Llama's ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` (half-split pairs).
"""

from __future__ import annotations

import math

import torch

from coursekit import positional
from coursekit.grading.suite import Case, Mutant, Suite

# ----------------------------------------------------------------------------- 05.1


def gptj_sinusoidal_positions(num_pos, dim):
    """GPT-J's table: (N, dim), sin(pos·ω_i) in the first half and cos(pos·ω_i) in the second."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.arange(num_pos, dtype=torch.int64).float()[:, None] * inv_freq
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def reference_sinusoidal(n_positions, d_model):
    """The paper's layout: feature 2i = sin, feature 2i+1 = cos of the same angle."""
    table = gptj_sinusoidal_positions(n_positions, d_model)
    order = torch.stack([torch.arange(d_model // 2), torch.arange(d_model // 2) + d_model // 2], -1)
    return table[:, order.flatten()]


def _sinusoidal_variant(*, swap=False, concat=False, exponent="2i", first=0, multiply=False):
    def variant(n_positions, d_model):
        pos = torch.arange(first, first + n_positions, dtype=torch.float32)[:, None]
        i = torch.arange(d_model // 2, dtype=torch.float32)
        power = {"2i": 2 * i, "i": i}[exponent] / d_model
        angles = pos * 10000.0 ** power if multiply else pos / 10000.0 ** power
        a, b = (torch.cos(angles), torch.sin(angles)) if swap else (torch.sin(angles), torch.cos(angles))
        if concat:
            return torch.cat([a, b], dim=-1)
        return torch.stack([a, b], dim=-1).flatten(-2)

    return variant


def _sinusoidal_feature_index(n_positions, d_model):
    """Every feature j uses 10000^(j/d): right for the sines (j = 2i), wrong for the cosines."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]
    j = torch.arange(d_model, dtype=torch.float32)
    angles = pos / 10000.0 ** (j / d_model)
    return torch.where(j % 2 == 0, torch.sin(angles), torch.cos(angles))


def _sinusoidal_case(n, d):
    return lambda g: (n, d)


# ----------------------------------------------------------------------------- 05.2


def t5_relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """Hugging Face ``T5Attention._relative_position_bucket``, transcribed."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def _bucket_variant(*, future="zero", halve=True, sign=">", exact_end=0, log_start=0,
                    rounding="trunc", top=1):
    """A wrong bucket function, one bug switched on by the arguments."""

    def variant(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        r = relative_position
        bucket = torch.zeros_like(r)
        if bidirectional:
            if halve:
                num_buckets //= 2
            upper = (r > 0) if sign == ">" else (r < 0)
            bucket = bucket + upper.long() * num_buckets
            distance = r.abs()
        else:
            distance = (-r).clamp(min=0) if future == "zero" else r.abs()
        max_exact = num_buckets // 2
        scaled = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) \
            * (num_buckets - max_exact)
        scaled = scaled.round() if rounding == "round" else scaled
        large = (max_exact + log_start + scaled.long()).clamp(max=num_buckets - top)
        return bucket + torch.where(distance < max_exact + exact_end, distance, large)

    return variant


def _bucket_case(bidirectional, num_buckets, max_distance):
    return lambda g: (torch.arange(-300, 301), bidirectional, num_buckets, max_distance)


# ----------------------------------------------------------------------------- 05.3


def llama_apply_rope(x, positions, base=10000.0):
    """Hugging Face Llama: ``LlamaRotaryEmbedding.forward`` (default rope type) then
    ``apply_rotary_pos_emb`` on one tensor, transcribed."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return (x * cos) + (torch.cat((-x2, x1), dim=-1) * sin)


def _rope_variant(*, pairs="half", freqs="cat", sign=1.0, exponent="2i", own_positions=False):
    """A wrong RoPE: ``pairs`` is how features are paired for the turn, ``freqs`` how the d/2
    angles are spread over the d features ("cat": half-split, "interleave": adjacent pairs)."""

    def variant(x, positions, base=10000.0):
        d = x.shape[-1]
        i = torch.arange(d // 2, dtype=torch.float32)
        theta = base ** (-({"2i": 2 * i, "i": i}[exponent]) / d)
        pos = torch.arange(x.shape[-2]) if own_positions else positions
        angles = pos.float()[:, None] * theta
        angles = torch.cat([angles, angles], -1) if freqs == "cat" else angles.repeat_interleave(2, -1)
        turned = positional.rotate_half(x) if pairs == "half" else positional.rotate_every_two(x)
        return x * angles.cos() + sign * turned * angles.sin()

    return variant


def _rope_case(shape, positions, base=None):
    def make(g):
        x = torch.randn(*shape, generator=g)
        pos = torch.tensor(positions)
        return (x, pos) if base is None else (x, pos, base)

    return make


# ----------------------------------------------------------------------------- suites

SINUSOIDAL_CASES = [
    Case("by hand: 3 positions, d_model=4", _sinusoidal_case(3, 4)),
    Case("50 positions, d_model=16", _sinusoidal_case(50, 16)),
    Case("128 positions, d_model=64", _sinusoidal_case(128, 64),
         hint="Check the slowest pair too: the last frequency is 10000^(-(d-2)/d)."),
]

BUCKET_CASES = [
    Case(f"{'bidirectional' if bi else 'causal'}, {nb} buckets, max_distance {md}, offsets -300..300",
         _bucket_case(bi, nb, md),
         hint="" if bi else "Causal: a key after the query (offset > 0) gets bucket 0, like offset 0.")
    for bi in (True, False) for nb, md in [(32, 128), (16, 64), (8, 20)]
]

ROPE_CASES = [
    Case("by hand: one vector of d=4 at positions 0, 1, 2", _rope_case((1, 1, 3, 4), [0, 1, 2])),
    Case("(B, H, N, d) = (2, 3, 5, 8), positions 0..4", _rope_case((2, 3, 5, 8), [0, 1, 2, 3, 4])),
    Case("positions 100..105 (a continued sequence)", _rope_case((2, 2, 6, 16), list(range(100, 106))),
         hint="Rotate by the positions you are given, not by 0..N-1."),
    Case("uneven positions 0, 3, 10, 64, 250, d=32", _rope_case((1, 2, 5, 32), [0, 3, 10, 64, 250]),
         hint="Each vector is rotated by its own position, positions[n], whatever the gaps "
              "between them."),
    Case("base=500, positions 0..4, d=32", _rope_case((1, 2, 5, 32), [0, 1, 2, 3, 4], 500.0),
         hint="θ_i = base^(-2i/d) with the base argument (this case passes base=500)."),
]

SUITES = [
    Suite(
        exercise="05.1",
        name="sinusoidal_encoding",
        points=3,
        reference=reference_sinusoidal,
        solution=positional.sinusoidal_encoding,
        cases=SINUSOIDAL_CASES,
        atol=1e-4,
        hint="PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)), "
             "pos = 0..N-1.",
        mutants=[
            Mutant("sin and cos swapped", _sinusoidal_variant(swap=True),
                   "Your sines and cosines are swapped: the even features 2i hold "
                   "sin(pos·ω_i), the odd features 2i+1 hold cos(pos·ω_i)."),
            Mutant("sin | cos concatenated, not interleaved", _sinusoidal_variant(concat=True),
                   "Your table puts all the sines first and all the cosines after (sin | cos). "
                   "The paper interleaves them: feature 2i = sin, feature 2i+1 = cos of the same "
                   "angle, e.g. pe[:, 0::2] = sin, pe[:, 1::2] = cos."),
            Mutant("exponent i/d instead of 2i/d", _sinusoidal_variant(exponent="i"),
                   "Your frequencies decay too slowly: the exponent is 2i/d_model, where i counts "
                   "the sin/cos pairs (i = 0..d/2-1), not i/d_model."),
            Mutant("exponent from the feature index", _sinusoidal_feature_index,
                   "Your cosine features use their own index 2i+1 in the exponent. A sin/cos pair "
                   "shares one frequency: both features 2i and 2i+1 use 10000^(2i/d_model)."),
            Mutant("positions start at 1", _sinusoidal_variant(first=1),
                   "Positions start at 0: the first row is sin(0) = 0 and cos(0) = 1."),
            Mutant("multiplied by the power", _sinusoidal_variant(multiply=True),
                   "You multiply pos by 10000^(2i/d); divide by it: the angular frequency "
                   "ω_i = 1/10000^(2i/d) falls from 1 to about 1/10000."),
        ],
    ),
    Suite(
        exercise="05.2",
        name="relative_position_bucket",
        points=3,
        reference=t5_relative_position_bucket,
        solution=positional.relative_position_bucket,
        cases=BUCKET_CASES,
        hint="Bidirectional: halve num_buckets and give r > 0 the upper half; take |r|. Causal: "
             "distance = max(−r, 0). Exact buckets below num_buckets//2, then log-spaced ones, "
             "truncated toward zero, capped at the last bucket.",
        mutants=[
            Mutant("causal variant keeps future offsets", _bucket_variant(future="abs"),
                   "In the causal variant a key after the query (r > 0) must not get a bucket of "
                   "its own: distance = max(−r, 0), so every future offset shares bucket 0."),
            Mutant("log buckets start one late", _bucket_variant(log_start=1),
                   "Off by one at the exact/log boundary: the first log-spaced bucket is "
                   "max_exact itself (distance max_exact -> bucket max_exact), not max_exact + 1."),
            Mutant("exact region one short", _bucket_variant(exact_end=-1),
                   "Off by one at the exact/log boundary: distances 0..max_exact-1 are exact "
                   "(is_small = distance < max_exact), so distance max_exact-1 keeps its own bucket."),
            Mutant("log bucket rounded", _bucket_variant(rounding="round"),
                   "Your log-spaced buckets are rounded to the nearest integer; T5 truncates "
                   "toward zero (.long()), so each log bucket starts where its value reaches an "
                   "integer."),
            Mutant("last bucket overflows", _bucket_variant(top=0),
                   "Far offsets must be capped at the last bucket, num_buckets - 1 (of the half, "
                   "when bidirectional); yours reach num_buckets."),
            Mutant("direction flipped", _bucket_variant(sign="<"),
                   "The upper half of the buckets is for keys after the query (r = j − i > 0); "
                   "yours gives it to keys before the query."),
            Mutant("buckets not halved", _bucket_variant(halve=False),
                   "Bidirectional buckets split num_buckets in two halves, one per direction: "
                   "halve num_buckets before computing max_exact and the log buckets."),
        ],
    ),
    Suite(
        exercise="05.3",
        name="apply_rope",
        grad=("x",),
        points=3,
        reference=llama_apply_rope,
        solution=positional.apply_rope,
        cases=ROPE_CASES,
        atol=1e-4,
        rtol=1e-4,
        hint="θ_i = base^(−2i/d); angles = positions[:, None] · θ, repeated as cat(angles, angles); "
             "return x·cos + rotate_half(x)·sin with rotate_half(x) = cat(−x2, x1).",
        mutants=[
            Mutant("interleaved pairs (the other convention)", _rope_variant(pairs="every_two",
                                                                             freqs="interleave"),
                   "You rotate adjacent pairs (x[2i], x[2i+1]), the RoPE paper's convention. This "
                   "exercise, like Hugging Face Llama, pairs feature i with feature i + d/2: "
                   "rotate_half and angles cat(θ, θ)."),
            Mutant("pairs mixed: rotate_half with interleaved angles", _rope_variant(freqs="interleave"),
                   "You mix the two conventions: rotate_half pairs x[i] with x[i + d/2], so both "
                   "halves need the same angles, cat(θ, θ), not repeat_interleave(θ, 2)."),
            Mutant("pairs mixed: adjacent pairs with half-split angles",
                   _rope_variant(pairs="every_two"),
                   "You mix the two conventions: adjacent pairs (x[2i], x[2i+1]) with half-split "
                   "angles cat(θ, θ). Pair feature i with i + d/2 (rotate_half)."),
            Mutant("rotation by −θ", _rope_variant(sign=-1.0),
                   "You rotate by −mθ: the result is x·cos − rotate_half(x)·sin. With rotate_half(x) "
                   "= cat(−x2, x1) it is x·cos + rotate_half(x)·sin."),
            Mutant("exponent i/d instead of 2i/d", _rope_variant(exponent="i"),
                   "Your frequencies are base^(−i/d); RoPE's are θ_i = base^(−2i/d), i = 0..d/2−1."),
            Mutant("positions ignored", _rope_variant(own_positions=True),
                   "You rotate by 0..N−1 instead of the positions passed in (a continued sequence "
                   "starts at its offset)."),
        ],
    ),
]
