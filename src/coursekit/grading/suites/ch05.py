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
from coursekit.grading.suite import Case, Mutant, Suite, in_dtype

# ----------------------------------------------------------------------------- observations
#
# Each returns "" unless it sees its pattern, so that every other failure keeps the general path
# of ``diagnose`` (mutants, case observations, probe hints); the suites' ``readings`` turn what
# they see into the diagnosis it implies for the exercise (issue 48, classes 3 and 4).


def _wrong_columns(e: torch.Tensor, a: torch.Tensor) -> set[int] | None:
    """The features (last axis) where ``a`` differs from ``e`` at some position; None when the
    two cannot be compared feature by feature."""
    if type(a) is not torch.Tensor or a.shape != e.shape or a.dtype != e.dtype or a.dim() < 2 \
            or not a.is_floating_point() or not torch.isfinite(a).all():
        return None
    close = torch.isclose(a.detach().double(), e.detach().double(), atol=1e-3, rtol=1e-3)
    return set(torch.nonzero(~close.reshape(-1, e.shape[-1]).all(0))[:, 0].tolist())


def _pair_observation(pair_of, pair_0: str, what: str):
    """'pair 0 ... is right at every position and the later pairs are not' (or 'only the last
    pair is wrong') for a table whose feature j belongs to pair ``pair_of(j, d)``: pair 0 turns
    by 1 radian per position whatever the exponent and the base, so it alone being right says
    the positions and the layout are right and the later frequencies are not. Nothing with two
    pairs (d = 4), where the later pairs are the last one."""

    def observe(expected, got) -> str:
        wrong = _wrong_columns(expected[0], got[0])
        if not wrong:
            return ""
        d = expected[0].shape[-1]
        pairs = sorted({pair_of(j, d) for j in wrong})
        if 0 in pairs or d <= 4:  # with two pairs the later ones are the last one: no telling
            return ""
        shown = ", ".join(map(str, sorted(wrong)[:8])) + (", ..." if len(wrong) > 8 else "")
        if pairs == [d // 2 - 1]:
            return (f"Only the last, slowest pair f = {d // 2 - 1} of your {what} is wrong "
                    f"(features {shown}); the faster pairs are right at every position")
        return (f"Pair 0 of your {what} ({pair_0}), which turns by 1 radian per position "
                f"whatever the exponent and the base, is right at every position, and the later "
                f"pairs are not (wrong in features {shown})")

    return observe


# ----------------------------------------------------------------------------- 05.1


def gptj_sinusoidal_positions(num_pos, dim):
    """GPT-J's table: (N, dim), sin(pos·ω_f) in the first half and cos(pos·ω_f) in the second."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.arange(num_pos, dtype=torch.int64).float()[:, None] * inv_freq
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def reference_sinusoidal(n_positions, d_model):
    """The paper's layout: feature 2f = sin, feature 2f+1 = cos of the same angle."""
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
    """Every feature j uses 10000^(j/d): right for the sines (j = 2f), wrong for the cosines."""
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


def _rope_cos_sin_swapped(x, positions, base=10000.0):
    """x·sin + rotate_half(x)·cos: right pairs and angles, the two factors exchanged."""
    d = x.shape[-1]
    angles = positions.float()[:, None] * base ** (-torch.arange(0, d, 2).float() / d)
    angles = torch.cat([angles, angles], -1)
    return x * angles.sin() + positional.rotate_half(x) * angles.cos()


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
    # longer than the fixed tables students slice (BERT's 512, the Annotated Transformer's
    # 5000); float32 angles near 6000 round at 5e-4 (ulp 4.9e-4), so the tolerance is wider
    Case("6000 positions, d_model=8", _sinusoidal_case(6000, 8), atol=2e-3, rtol=1e-3,
         hint="The table has n_positions rows, however many that is: compute it for the "
              "positions asked for (a fixed table of 512 or 5000 rows, sliced, is too short "
              "here)."),
]

BUCKET_CASES = [
    Case(f"{'bidirectional' if bi else 'causal'}, {nb} buckets, max_distance {md}, offsets -300..300",
         _bucket_case(bi, nb, md),
         hint="" if bi else "Causal: all num_buckets buckets are for keys at or before the query "
                            "(they are halved only when bidirectional), distance = max(−r, 0), "
                            "and every key after the query (offset > 0) shares bucket 0.")
    for bi in (True, False) for nb, md in [(32, 128), (16, 64), (8, 20)]
] + [
    # here ln(|r| / max_exact) / ln(max_distance / max_exact) · (n − max_exact) is an integer at
    # |r| = 10, 20, 80 in exact arithmetic; float32 lands just below it (the same in torch's
    # vectorised and scalar log and in numpy), float64 or log2 on it: T5's bucket is the lower
    Case("bidirectional, 20 buckets, max_distance 160, offsets -300..300",
         _bucket_case(True, 20, 160),
         hint="At |r| = 10, 20 and 80 here the log ratio is an integer in exact arithmetic and "
              "T5's float32 lands just below it: compute it in float32 as T5 writes it, "
              "torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) "
              "· (n − max_exact), then .long() (float64, or another base such as log2, gives "
              "the next bucket)."),
    # T5 passes the (N_q, N_k) matrix of offsets j − i
    Case("a (12, 20) matrix of offsets j − i, causal, 32 buckets, max_distance 128",
         lambda g: (9 * torch.arange(20)[None, :] - 15 * torch.arange(12)[:, None], False, 32, 128),
         hint="The offsets may come as a matrix, as T5 builds them ((N_q, N_k), r = j − i): "
              "return one bucket per offset, in the offsets' shape."),
]


def _bucket_observation(expected, got) -> str:
    """Where a 1-D table of buckets over the offsets −300..300 is wrong, when that place has a
    name: the opposite offsets, only after or before the query, only offset 0, only the far
    offsets of the last bucket, only the log-spaced buckets, or beyond the last bucket."""
    e, a = expected[0], got[0]
    if type(a) is not torch.Tensor or a.shape != e.shape or a.dtype != e.dtype or e.dim() != 1 \
            or e.numel() != 601:
        return ""
    r = torch.arange(-300, 301)
    wrong = a != e
    if not wrong.any():
        return ""
    causal = bool((e[r > 0] == 0).all())
    if torch.equal(a, e.flip(0)):
        return "Your buckets are, at every offset r, the expected ones of the opposite offset −r"
    if causal and not wrong[r <= 0].any():
        return ("Causal: your buckets are wrong only for keys after the query (r > 0), and right "
                "for every key at or before it")
    if causal and not wrong[r == 0].any() and a[r < 0].max() < e.max():
        return (f"Causal: for keys before the query your buckets stop at {int(a[r < 0].max())}, "
                f"while the expected ones reach {int(e.max())} = num_buckets − 1"
                + (", and keys after the query get buckets other than 0" if wrong[r > 0].any()
                   else ""))
    if not wrong[r != 0].any():
        return (f"Only offset 0 (the key at the query's own position) is wrong: your bucket "
                f"{int(a[300])}, expected 0")
    exact = (int(e[r <= 0].max()) + 1) // 2  # max_exact: half the buckets of one direction
    # the last bucket of each direction, which every offset beyond max_distance shares
    far = ((e == e[0]) & (r < 0)) | (((e == e[-1]) & (r > 0)) if not causal else False)
    if not wrong[~far].any():
        return (f"Your buckets are wrong only at the far offsets, which share the last bucket of "
                f"their direction ({int(e[0])}{'' if causal else f' and {int(e[-1])}'}); yours "
                f"there go up to {int(a[wrong].max())}")
    if not wrong[r.abs() < exact].any():
        bad = r[wrong].abs()
        return (f"The exact buckets (|r| < max_exact = {exact}) are right, and the log-spaced "
                f"ones wrong at |r| from {int(bad.min())} to {int(bad.max())}")
    if a.max() > e.max():
        return (f"Your largest bucket is {int(a.max())}; the largest expected is {int(e.max())} "
                "= num_buckets − 1")
    return ""


def _rope_pair(j: int, d: int) -> int:
    return j % (d // 2)


def _sinusoidal_pair(j: int, d: int) -> int:
    return j // 2


OWN_POSITION = ("Each vector is rotated by its own position, positions[n], whatever the gaps "
                "between them, and for a large position too: compute the angles from positions "
                "(a cos/sin table of fixed length, such as 512 or 2048 rows, is too short).")

ROPE_CASES = [
    Case("by hand: one vector of d=4 at positions 0, 1, 2", _rope_case((1, 1, 3, 4), [0, 1, 2])),
    Case("(B, H, N, d) = (2, 3, 5, 8), positions 0..4", _rope_case((2, 3, 5, 8), [0, 1, 2, 3, 4])),
    Case("positions 100..105 (a continued sequence)", _rope_case((2, 2, 6, 16), list(range(100, 106))),
         hint="Rotate by the positions you are given, not by 0..N-1."),
    Case("uneven positions 0, 3, 10, 64, 250, d=32", _rope_case((1, 2, 5, 32), [0, 3, 10, 64, 250]),
         hint=OWN_POSITION),
    Case("base=500, positions 0..4, d=32", _rope_case((1, 2, 5, 32), [0, 1, 2, 3, 4], 500.0),
         hint="θ_f = base^(−2f/d) with the base argument (this case passes base=500)."),
    # far positions: a cos/sin cache of fixed length, indexed, is too short; the angles reach
    # 9000 rad, whose float32 rounding (and a θ_f one ulp apart) moves cos and sin by ~1e-3
    Case("positions up to 9000 (a long context), d=16",
         _rope_case((1, 2, 6, 16), [0, 511, 512, 2048, 4097, 9000]), atol=5e-3, rtol=5e-3,
         hint=OWN_POSITION),
]
# float64: Llama computes the angles in float32 and casts cos and sin to x's dtype
ROPE_CASES.append(in_dtype(ROPE_CASES[1], torch.float64))

SUITES = [
    Suite(
        exercise="05.1",
        name="sinusoidal_encoding",
        points=3,
        reference=reference_sinusoidal,
        solution=positional.sinusoidal_encoding,
        cases=SINUSOIDAL_CASES,
        atol=1e-4,
        hint="PE[pos, 2f] = sin(pos / 10000^(2f/d)), PE[pos, 2f+1] = cos(pos / 10000^(2f/d)), "
             "pos = 0..N-1.",
        observe=_pair_observation(_sinusoidal_pair, "features 0 and 1", "table"),
        readings=(
            (r"^Pair 0 .* the later pairs are not",
             "So your positions and the sin/cos layout are right, and the frequencies "
             "ω_f = 10000^(−2f/d_model) of the pairs f ≥ 1 are not: look for an exponent other "
             "than 2f/d_model (f counts the pairs), a base other than 10000, a d_model other "
             "than the argument, an integer division (//) in the exponent, or pairs left out "
             "(a range or loop that stops short)."),
            (r"^Only the last, slowest pair",
             "Its frequency is ω = 10000^(−(d_model − 2)/d_model): check that your pairs run to "
             "f = d_model/2 − 1 (a range or loop one short leaves it out) and its exponent."),
        ),
        mutants=[
            Mutant("sin and cos swapped", _sinusoidal_variant(swap=True),
                   "Your sines and cosines are swapped: the even features 2f hold "
                   "sin(pos·ω_f), the odd features 2f+1 hold cos(pos·ω_f)."),
            Mutant("sin | cos concatenated, not interleaved", _sinusoidal_variant(concat=True),
                   "Your table puts all the sines first and all the cosines after (sin | cos). "
                   "The paper interleaves them: feature 2f = sin, feature 2f+1 = cos of the same "
                   "angle, e.g. pe[:, 0::2] = sin, pe[:, 1::2] = cos."),
            Mutant("exponent i/d instead of 2i/d", _sinusoidal_variant(exponent="i"),
                   "Your frequencies decay too slowly: the exponent is 2f/d_model, where f counts "
                   "the sin/cos pairs (i = 0..d/2-1), not i/d_model."),
            Mutant("exponent from the feature index", _sinusoidal_feature_index,
                   "Your cosine features use their own index 2f+1 in the exponent. A sin/cos pair "
                   "shares one frequency: both features 2f and 2f+1 use 10000^(2f/d_model)."),
            Mutant("positions start at 1", _sinusoidal_variant(first=1),
                   "Positions start at 0: the first row is sin(0) = 0 and cos(0) = 1."),
            Mutant("multiplied by the power", _sinusoidal_variant(multiply=True),
                   "You multiply pos by 10000^(2f/d); divide by it: the angular frequency "
                   "ω_f = 1/10000^(2f/d) falls from 1 to about 1/10000."),
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
        observe=_bucket_observation,
        readings=(
            (r"expected ones of the opposite offset",
             "The offset is r = j − i, the key position minus the query position: a key after "
             "the query has r > 0 (the upper half when bidirectional, bucket 0 when causal)."),
            (r"^Causal: your buckets are wrong only for keys after the query",
             "In the causal variant every key after the query (r > 0) shares bucket 0: "
             "distance = max(−r, 0)."),
            (r"^Causal: for keys before the query your buckets stop",
             "In the causal variant all num_buckets buckets are for keys at or before the "
             "query (num_buckets is halved only when bidirectional), and every key after the "
             "query shares bucket 0."),
            (r"^Only offset 0",
             "Offset 0 is bucket 0 in both variants: only r > 0 (strictly) goes to the upper "
             "half."),
            (r"wrong only at the far offsets",
             "Offsets beyond max_distance all share the last bucket: cap the log-spaced buckets "
             "at n − 1, where n is num_buckets, halved when bidirectional (the half's own last "
             "bucket, not num_buckets − 1 of the whole table)."),
            (r"^The exact buckets .* are right, and the log-spaced",
             "Check the log-spaced buckets: max_exact + (ln(|r| / max_exact) / "
             "ln(max_distance / max_exact) · (n − max_exact)).long(), computed in float32, with "
             "n = num_buckets (halved when bidirectional), max_exact = n // 2 of that n, and the "
             "max_distance argument."),
            (r"^Your largest bucket is",
             "Buckets run from 0 to num_buckets − 1 for the num_buckets argument: check the halving "
             "when bidirectional, the upper half's offset (the halved n) and the cap at the last "
             "bucket; nothing in the exercise is a fixed number."),
        ),
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
        hint="θ_f = base^(−2f/d); angles = positions[:, None] · θ, repeated as cat(angles, angles); "
             "return x·cos + rotate_half(x)·sin with rotate_half(x) = cat(−x2, x1).",
        observe=_pair_observation(_rope_pair, "features 0 and d/2", "output"),
        readings=(
            (r"^Pair 0 .* the later pairs are not",
             "So your positions and the half-split pairing are right, and the frequencies "
             "θ_f = base^(−2f/d) of the pairs f ≥ 1 are not: look for an exponent other than "
             "−2f/d (f counts the pairs; with its minus sign: divide by base^(2f/d), never "
             "multiply), the base argument not used, an integer division (//) in the "
             "exponent, or pairs left out."),
            (r"^Only the last, slowest pair",
             "Its frequency is θ = base^(−(d − 2)/d): check that your pairs run to f = d/2 − 1 "
             "and its exponent."),
        ),
        mutants=[
            Mutant("interleaved pairs (the other convention)", _rope_variant(pairs="every_two",
                                                                             freqs="interleave"),
                   "You rotate adjacent pairs (x[2f], x[2f+1]), the RoPE paper's convention. This "
                   "exercise, like Hugging Face Llama, pairs feature f with feature f + d/2: "
                   "rotate_half and angles cat(θ, θ)."),
            Mutant("pairs mixed: rotate_half with interleaved angles", _rope_variant(freqs="interleave"),
                   "You mix the two conventions: rotate_half pairs x[f] with x[f + d/2], so both "
                   "halves need the same angles, cat(θ, θ), not repeat_interleave(θ, 2)."),
            Mutant("pairs mixed: adjacent pairs with half-split angles",
                   _rope_variant(pairs="every_two"),
                   "You mix the two conventions: adjacent pairs (x[2f], x[2f+1]) with half-split "
                   "angles cat(θ, θ). Pair feature i with i + d/2 (rotate_half)."),
            Mutant("rotation by −θ", _rope_variant(sign=-1.0),
                   "You rotate by −mθ: the result is x·cos − rotate_half(x)·sin. With rotate_half(x) "
                   "= cat(−x2, x1) it is x·cos + rotate_half(x)·sin."),
            Mutant("exponent i/d instead of 2i/d", _rope_variant(exponent="i"),
                   "Your frequencies are base^(−f/d); RoPE's are θ_f = base^(−2f/d), f = 0..d/2−1."),
            Mutant("cos and sin swapped", _rope_cos_sin_swapped,
                   "Your cos and sin are swapped: RoPE is x·cos(mθ) + rotate_half(x)·sin(mθ), "
                   "which leaves x unchanged at position 0 (cos 0 = 1, sin 0 = 0)."),
            Mutant("positions ignored", _rope_variant(own_positions=True),
                   "You rotate by 0..N−1 instead of the positions passed in (a continued sequence "
                   "starts at its offset)."),
        ],
    ),
]
