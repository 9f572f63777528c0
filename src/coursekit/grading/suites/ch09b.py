"""Chapter 9, notebook 09b — QLoRA: the NF4 code book from normal quantiles, block-wise absmax
quantisation to a code book, and double quantisation of the constants.

The authority is ``bitsandbytes``:

- ``nf4_code_book``: ``bitsandbytes.functional.create_normal_map(offset)``, the function that
  produced the published NF4 table, from which the 16 values are read (its 256-entry map holds 7
  negative values, zeros, then 8 positive values).
- ``quantize_blockwise``: bitsandbytes' own PyTorch kernel for its op
  ``bitsandbytes::quantize_blockwise`` (``backends/default/ops.py``, the implementation it
  registers for every device, reached here by dispatching to ``CompositeExplicitAutograd``): the
  same scaling by the reciprocal of each block's absmax and the same look-up through the
  midpoints as its 4-bit quantiser (``quantize_4bit(quant_type="nf4")`` on the CPU, which
  ``tests/test_ch09_lora.py`` holds equal to coursekit's, byte for byte), for any sorted code
  book. (Its native CPU kernel assumes a 256-entry code book and is not used.)
- ``double_quantize``: bitsandbytes' nested quantisation of the constants as
  ``quantize_4bit(..., compress_statistics=True)`` does it (``offset = absmax.mean()``, then
  ``quantize_blockwise(absmax - offset, blocksize=256)`` with its 8-bit dynamic map), through the
  same PyTorch kernel (the nearest code value). The cases pass the dynamic map
  (``create_dynamic_map()``, which ``coursekit.quant.dynamic_map`` equals) and, once, another
  code. bitsandbytes' CPU kernel rounds w / c to a 16-bit grid first and so differs on about
  0.2 % of the constants, by one level; the notebook shows it, and coursekit's
  ``double_quantize(..., grid_bits=16)`` reproduces it (``tests/test_quant_bnb.py``).

Quantisation is not trained through: no gradients are compared. Indices are compared exactly,
the constants to float32 rounding; where w / c lies on a midpoint only up to float32 rounding
(a division by c, or an argmin over float32 distances, may land on the other side of it), either
neighbour is accepted (``tie_judge``). At an exact tie the lower one is required.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coursekit import quant
from coursekit.grading.suite import Case, Mutant, Suite, compare, in_dtype


def bnb_nf4_code_book(offset=quant.NF4_OFFSET):
    """The authority: the 16 values of bitsandbytes' normal map, sorted."""
    import logging

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    from bitsandbytes.functional import create_normal_map

    values = create_normal_map(offset, use_extra_value=True)  # (256,), sorted
    return torch.cat([values[:7], torch.zeros(1), values[-8:]])


def _variant(kind):
    def nf4_code_book(offset=quant.NF4_OFFSET):
        ndtri = torch.special.ndtri
        if kind == "equal-mass, no zero":
            v = ndtri((torch.arange(16, dtype=torch.float64) + 0.5) / 16)
        elif kind == "symmetric":
            half = ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
            v = torch.cat([-half, half])
        elif kind == "uniform":
            v = torch.linspace(-1, 1, 16, dtype=torch.float64)
        else:
            pos = ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
            neg = -ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
            if kind == "mirrored":  # 8 negative values, 7 positive
                pos, neg = -neg, -pos
            v = torch.cat([neg, torch.zeros(1, dtype=torch.float64), pos])
        v = v.sort().values
        return (v if kind == "not normalised" else v / v.abs().max()).float()

    return nf4_code_book



# ----------------------------------------------------------------------------- 09.4 quantize_blockwise


def _bnb_kernel(A, code, blocksize):
    """bitsandbytes' PyTorch kernel for ``bitsandbytes::quantize_blockwise``: (indices in A's
    shape, uint8; one absmax per block, float32)."""
    import logging

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    import bitsandbytes  # noqa: F401  (defines and registers the op)

    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    return torch.ops.bitsandbytes.quantize_blockwise.default.redispatch(keys, A, code, blocksize)


def other_nearest(w, code, blocksize, indices):
    """For each value of ``w``, the index another exact reading of "the code value nearest to
    w / c" gives where it differs from ``indices`` (bitsandbytes': w·(1/c), then the midpoints):
    w / c instead of w·(1/c), an argmin over the float32 distances, or the nearest value in
    exact arithmetic (float64). They differ only for a value within float32 rounding of a
    midpoint, and then by one index; elsewhere the result is ``indices`` itself. At an exact
    tie (the int4 grid k/8, where every computation is exact) they all give the lower value."""
    blocks = w.detach().float().reshape(-1, blocksize)
    c = blocks.abs().amax(dim=1).clamp(min=1e-38)[:, None]
    code = code.float()
    mids = (code[:-1] + code[1:]) / 2
    ratio = (blocks / c).reshape(-1)
    product = (blocks * (1.0 / c)).clamp(-1, 1).reshape(-1)
    exact = (blocks.double() / c.double()).reshape(-1)
    code64 = code.double()
    readings = [torch.bucketize(ratio, mids),
                (product[:, None] - code).abs().argmin(dim=1),
                (ratio[:, None] - code).abs().argmin(dim=1),
                (exact[:, None] - code64).abs().argmin(dim=1),
                torch.bucketize(exact, (code64[:-1] + code64[1:]) / 2)]
    ref, other = indices.reshape(-1).long(), indices.reshape(-1).long().clone()
    for got in readings:
        other = torch.where((other == ref) & ((got - ref).abs() == 1), got, other)
    return other.to(torch.uint8)


def bnb_quantize_blockwise(w, code, blocksize=64):
    """The authority: bitsandbytes' kernel on ``w``, its indices flattened; then, for the
    judge, the other neighbour each value may take within float32 rounding of a midpoint."""
    indices, absmax = _bnb_kernel(w.detach().float(), code.float(), blocksize)
    indices = indices.reshape(-1)
    return indices, absmax, other_nearest(w, code, blocksize, indices)


def tie_judge(expected, got, atol, rtol):
    """The verdict on the indices (output 0) and the rest, where the reference also gives, as
    its last output, the other index each value may take (:func:`other_nearest`): an index
    equal to that one is read as bitsandbytes' own. Any other difference is wrong."""
    real = len(expected) - 1
    if len(got) == len(expected) or real < 1:  # the reference itself, or a mutant's outputs
        return compare(expected, got, atol, rtol)
    mine, other, theirs = got[0] if len(got) else None, expected[-1], expected[0]
    if type(mine) is torch.Tensor and mine.shape == theirs.shape and mine.dtype == theirs.dtype:
        got = [torch.where((mine == other) & (other != theirs), theirs, mine), *got[1:]]
    return compare(list(expected[:real]), got, atol, rtol)


NF4 = quant.NF4_PUBLISHED  # bitsandbytes' table: a case gets a fresh tensor each time
INT4 = [k / 8 for k in range(-8, 8)]  # dyadic: every midpoint and distance is exact in float32


def _codes(name):
    return {"nf4": lambda: torch.tensor(NF4), "int4": lambda: torch.tensor(INT4),
            "uniform": lambda: torch.linspace(-1, 1, 16),
            "linear8": lambda: torch.linspace(-1, 1, 255)}[name]()


def _q_case(shape, blocksize, code="nf4", std=0.5, edit=None):
    def make(g):
        w = std * torch.randn(shape, generator=g)
        if edit is not None:
            w = edit(w, g)
        return w, _codes(code), blocksize

    return make


def _outliers(w, g):
    flat = w.reshape(-1, 64)  # (blocks of 64)
    flat[1, 17] = 40.0
    flat[4, 3] = -75.0
    return w


def _zero_blocks(w, g):
    w[1] = 0.0
    w[6] = 0.0
    return w


def _ties(w, g):
    """Two blocks of 64 whose values all lie on a midpoint (2k + 1)/16 of the int4 grid, or on a
    code value, once divided by c (c = 2 and c = 1/2: powers of two, so w / c is exact)."""
    k = torch.randint(-8, 7, (2, 64), generator=g)
    on_code = torch.rand(2, 64, generator=g) < 0.2
    scaled = torch.where(on_code, k / 8, (2 * k + 1) / 16)
    scaled[:, 0] = torch.tensor([-1.0, -1.0])  # |w| / c = 1: the absmax itself
    return scaled * torch.tensor([[2.0], [0.5]])


def _magnitudes(w, g):
    return w * torch.tensor([1e4, 1e-7, 1.0, 300.0])[:, None]


def _tiny(w, g):
    """Blocks whose largest |w| is positive but under 1e-8 (about 3e-9, 3e-20, 3e-30), and one
    of std 1: thresholds a student might clamp c at."""
    return w * torch.tensor([1e-9, 1e-20, 1e-30, 1.0])[:, None]


def _nf4_midpoints(w, g):
    """Blocks of 64 whose values, times 1/c, land exactly on the float32 midpoints between
    neighbouring NF4 values (bitsandbytes' own ties: to the lower value), where a division by
    c or an argmin over float32 distances may pick the upper one."""
    code = torch.tensor(NF4)
    mids = (code[:-1] + code[1:]) / 2
    c = 0.5 + torch.rand(w.shape[0], 1, generator=g)
    inverse = 1.0 / c
    target = mids[torch.randint(0, 15, w.shape, generator=g)]
    target = target * torch.where(torch.rand(w.shape, generator=g) < 0.5, -1.0, 1.0)
    out = (target.double() / inverse.double()).float()
    for _ in range(3):  # step to the float32 neighbour whose product with 1/c is the midpoint
        product = out * inverse
        out = torch.where(product > target, torch.nextafter(out, torch.zeros_like(out) - 9), out)
        product = out * inverse
        out = torch.where(product < target, torch.nextafter(out, torch.zeros_like(out) + 9), out)
    out[:, 0] = c[:, 0]  # the absmax itself
    return out


def _q_variant(kind):
    def quantize_blockwise(w, code, blocksize=64):
        # in w's dtype, as students write it (not upcast: float16 weights stay float16)
        blocks = w.reshape(-1, blocksize)
        absmax = blocks.abs().amax(dim=1)
        if kind == "per tensor":
            absmax = blocks.abs().amax().expand(blocks.shape[0]).clone()
        if kind == "signed max":
            absmax = blocks.amax(dim=1)
        # w / c, as students write it (a division: w = -c gives exactly -1)
        scaled = blocks / (absmax if kind == "no guard" else absmax.clamp(min=1e-38))[:, None]
        scaled = scaled.reshape(-1)
        bounds = (code[:-1] + code[1:]) / 2
        if kind == "round up":
            indices = torch.searchsorted(code, scaled)
        else:
            indices = torch.bucketize(scaled, bounds, right=kind == "ties up")
        return indices.clamp(max=len(code) - 1).to(torch.uint8), absmax

    return quantize_blockwise


BLOCKS = ("Cut the flattened tensor into blocks of `blocksize` consecutive values, "
          "w.reshape(-1, blocksize), whatever the tensor's shape: a block may span rows, and "
          "a row may hold several blocks. One absmax per block.")

Q_CASES = [
    Case("NF4, blocks of 64: a (32, 64) weight matrix of std 0.5", _q_case((32, 64), 64)),
    Case("blocksize 128: each block spans two rows of a (16, 64) matrix",
         _q_case((16, 64), 128), hint=BLOCKS),
    Case("blocksize 16 on a (6, 40) matrix: blocks cross the rows", _q_case((6, 40), 16),
         hint=BLOCKS),
    Case("a (2, 4, 32) tensor, a uniform 4-bit grid, blocksize 32",
         _q_case((2, 4, 32), 32, code="uniform")),
    Case("two blocks with one large outlier each (40 and -75 among weights of std 0.1)",
         _q_case((8, 64), 64, std=0.1, edit=_outliers),
         hint="Each block has its own constant c = max |w| over that block: an outlier sets the "
              "constant of its own block, and the other blocks keep theirs."),
    Case("all-zero blocks (absmax 0)", _q_case((8, 64), 64, edit=_zero_blocks),
         hint="A block of zeros has c = 0, and w / c is 0 / 0 there. Its constant is 0, and "
              "every index is that of the code value nearest 0 (bitsandbytes divides by "
              "c clamped to a tiny positive value, so that w / c = 0): guard the division."),
    Case("ties: w / c exactly halfway between two code values (the int4 grid k / 8)",
         _q_case((2, 64), 64, code="int4", edit=_ties),
         hint="At an exact tie (w / c halfway between two code values) take the lower of the "
              "two, as bitsandbytes does: torch.bucketize on the midpoints (right=False), or "
              "the argmin of |w / c − q_j|, which returns the first of equal distances."),
    Case("blocks of std 1e4, 1e-7, 1 and 300", _q_case((4, 64), 64, std=1.0, edit=_magnitudes),
         hint="Absmax scaling makes each block's indices independent of its scale: a block of "
              "std 1e4 or 1e-7 is quantised like one of std 1. Divide by c itself (no epsilon "
              "added to it, no clamp above the smallest float)."),
    Case("an 8-bit linear code (255 values), blocks of 256",
         _q_case((4, 256), 256, code="linear8")),
    Case("blocks whose largest |w| is under 1e-8 (about 3e-9, 3e-20, 3e-30) and one of std 1",
         _q_case((4, 64), 64, std=1.0, edit=_tiny),
         hint="Divide by c itself, however small: only c = 0 needs the guard. A clamp or a "
              "threshold at 1e-8 (or at any value above float32's smallest, about 1e-38) "
              "changes the indices of a block whose largest |w| lies under it."),
    Case("a transposed weight: w.T of a (32, 64) matrix, so w is not contiguous",
         _q_case((32, 64), 64, edit=lambda w, g: w.T),
         hint="The flattened tensor is w's values in the order w.reshape(-1) reads them, "
              "whatever its layout in memory: w.view(-1, blocksize) fails on a transposed "
              "(non-contiguous) w; w.reshape(-1, blocksize) copies where it must."),
    Case("NF4 values w·(1/c) exactly on the float32 midpoints",
         _q_case((4, 64), 64, edit=_nf4_midpoints),
         hint="A value exactly on a midpoint goes to the lower code value, as bitsandbytes "
              "sends it (torch.bucketize on the midpoints, right=False). Where w / c lies on a "
              "midpoint only up to float32 rounding, either neighbour is accepted."),
]
# Weights in float16 and bfloat16: bitsandbytes computes in float32 (it upcasts w first), and
# the constants are float32 whatever the weights' dtype. Indices are compared exactly.
LOW_PRECISION_HINT = ("This case passes 16-bit weights (float16 or bfloat16): upcast them to "
                      "float32 first, w.float(), as bitsandbytes does, and compute w / c and the "
                      "constants in float32 (w / c rounded to 16 bits lands on the other side of "
                      "a midpoint for some values; the constants are float32 whatever w's dtype).")
Q_CASES += [in_dtype(Q_CASES[0], torch.bfloat16, only=(0,), atol=0.0, rtol=1e-6,
                     hint=LOW_PRECISION_HINT),
            in_dtype(Q_CASES[4], torch.float16, only=(0,), atol=0.0, rtol=1e-6,
                     hint=LOW_PRECISION_HINT)]

# ----------------------------------------------------------------------------- 09.5 double_quantize


def bnb_dynamic_map():
    """bitsandbytes' signed 8-bit dynamic map (256 values, sorted)."""
    import logging

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    from bitsandbytes.functional import create_dynamic_map

    return create_dynamic_map()


def bnb_double_quantize(absmax, code, blocksize=256):
    """The authority: bitsandbytes' nested quantisation (offset = the constants' mean, then
    block-wise quantisation of absmax − offset to ``code``), through its PyTorch kernel; then,
    for the judge, the other neighbour each index may take within float32 rounding of a
    midpoint (:func:`other_nearest`)."""
    offset = absmax.mean()
    centred = absmax - offset
    indices, absmax2 = _bnb_kernel(centred, code.float(), blocksize)
    padded = F.pad(centred, (0, (-centred.numel()) % blocksize))
    other = other_nearest(padded, code, blocksize, F.pad(indices, (0, padded.numel() - indices.numel())))
    return indices, absmax2, offset, other[:indices.numel()]


def solution_double_quantize(absmax, code, blocksize=256):
    """coursekit's, with the nearest code value (no 16-bit grid), as the exercise asks."""
    return quant.double_quantize(absmax, code, blocksize, grid_bits=None)


def _d_case(n, blocksize, std=0.02, edit=None, code=bnb_dynamic_map):
    def make(g):
        absmax = (std * torch.randn(n, 64, generator=g)).abs().amax(dim=1)
        if edit is not None:
            absmax = edit(absmax, g)
        return absmax, code(), blocksize

    return make


def _outlier_constant(absmax, g):
    absmax[300] = 100 * absmax.max()
    return absmax


def _decades(absmax, g):
    return 10 ** (3 * torch.rand(absmax.shape, generator=g) - 2)  # 0.01 to 10


def _near_the_mean(absmax, g):
    """The first half of the constants a few float32 steps from 0.01, the second half spread
    symmetrically about it: the first block's centred constants are all under 1e-8."""
    half = absmax.numel() // 2
    a = torch.tensor(0.01)
    step = torch.nextafter(a, torch.tensor(1.0)) - a  # 9.3e-10
    first = a + torch.randint(-4, 5, (half,), generator=g).float() * step
    spread = 0.005 * torch.rand(half // 2, generator=g)
    return torch.cat([first, a + spread, a - spread])


def _d_variant(kind):
    def double_quantize(absmax, code, blocksize=256):
        n = absmax.numel()
        mean = absmax.mean()
        centred = absmax if kind == "not centred" else absmax - mean
        pad = 0 if kind == "no padding" else (-n) % blocksize
        blocks = F.pad(centred, (0, pad)).reshape(-1, blocksize)
        absmax2 = blocks.abs().amax(dim=1)
        if kind == "one scale":
            absmax2 = blocks.abs().amax().expand(blocks.shape[0]).clone()
        scaled = (blocks / absmax2.clamp(min=1e-38)[:, None]).clamp(-1, 1).reshape(-1)
        if kind == "linear code":
            code = torch.linspace(-1, 1, 255)
        if kind == "round down":
            indices = (torch.searchsorted(code, scaled, right=True) - 1).clamp(min=0)
        else:
            indices = torch.bucketize(scaled, (code[:-1] + code[1:]) / 2)
        return indices[:n].to(torch.uint8), absmax2, mean

    return double_quantize


PARTIAL = ("The number of constants need not be a multiple of `blocksize`: the last block is "
           "partial. Pad the centred constants with zeros to whole blocks (F.pad), quantise, "
           "and keep the first n indices; absmax₂ has one value per block, the partial one "
           "included. (The mean is that of the n constants, before any padding.)")

def _observe_double(expected, got):
    """The returned mean, when it is not the constants' mean."""
    if len(got) != 3 or len(expected) != 3:
        return ""
    e, a = expected[2], got[2]
    if a.shape != e.shape or a.dtype != e.dtype or a.numel() != 1 or not torch.isfinite(a).all():
        return ""
    if torch.allclose(a, e, atol=0.0, rtol=1e-5):
        return ""
    return (f"Output 2, the mean, is {a.item():.6g}, but the mean of the {expected[0].numel()} "
            f"constants given (before any padding) is {e.item():.6g}")


D_CASES = [
    Case("1000 constants, blocks of 256: the last block partial", _d_case(1000, 256),
         hint=PARTIAL),
    Case("512 constants: exactly two blocks of 256", _d_case(512, 256)),
    Case("blocksize 64 on 512 constants: eight whole blocks", _d_case(512, 64),
         hint="Use the blocksize argument: blocks of `blocksize` centred constants (64 here), "
              "one absmax₂ each."),
    Case("blocksize 64 on 300 constants", _d_case(300, 64), hint=PARTIAL),
    Case("blocksize 128, 100 constants: less than one block", _d_case(100, 128), hint=PARTIAL),
    Case("768 constants of large magnitude (weights of std 300)", _d_case(768, 256, std=300.0)),
    Case("one constant 100 times the others, among 768", _d_case(768, 256, edit=_outlier_constant),
         hint="Each block of `blocksize` centred constants has its own absmax₂: the outlier "
              "sets the scale of its own block only."),
    Case("512 constants spread over three decades (0.01 to 10)",
         _d_case(512, 256, edit=_decades)),
    Case("another 8-bit code: 255 values evenly spaced from -1 to 1",
         _d_case(600, 256, code=lambda: torch.linspace(-1, 1, 255)),
         hint="Quantise to the code you are given (the argument `code`), whatever its values."),
    Case("512 constants, the first 256 within a few float32 steps of their mean",
         _d_case(512, 256, edit=_near_the_mean),
         hint="Each block is divided by its own absmax₂, however small: here the first block's "
              "centred constants are all under 1e-8. Only an absmax₂ of 0 needs a guard; a "
              "clamp or a threshold at 1e-8 changes their indices."),
]

# What an observation implies for double_quantize, where it implies one thing.
D_READINGS = (
    # the cases with blocksize 64 hold whole blocks (512) and a partial one (300)
    (r"fails exactly the cases where `blocksize` is 64;",
     "Your code is wrong only where blocksize is 64, with whole blocks and with a partial one: "
     "cut blocks of `blocksize` centred constants (the argument, not QLoRA's 256), one absmax₂ "
     "each."),
    (r"'512 constants: exactly two blocks of 256', output 1 has shape \(3,\), expected \(2,\)",
     "When n is a multiple of blocksize no padding is needed, and there are n / blocksize "
     "blocks: yours has one more, a whole block of zeros ((−n) % blocksize is 0 there, while "
     "blocksize − n % blocksize is blocksize)."),
)

SUITES = [
    Suite(
        exercise="09.3",
        name="nf4_code_book",
        points=3,
        reference=bnb_nf4_code_book,
        solution=quant.nf4_code_book,
        arg_names=("offset",),
        cases=[
            Case("the default offset 0.9677083: the published NF4 values",
                 lambda g: (quant.NF4_OFFSET,)),
            Case("offset 0.99 (wider tails)", lambda g: (0.99,),
                 hint="Use the offset argument: the outermost probability is `offset`, and the "
                      "values come from torch.special.ndtri (Φ⁻¹) at equally spaced "
                      "probabilities between offset and 1/2."),
            Case("offset 0.9", lambda g: (0.9,)),
        ],
        atol=1e-6,
        rtol=1e-5,
        hint="Positive side: Φ⁻¹ at 9 equally spaced probabilities from offset down to 1/2, without "
             "the last (which is 0); negative side: −Φ⁻¹ at 8 from offset to 1/2, without the last; "
             "add one 0, sort, divide by the largest value.",
        mutants=[
            Mutant("equal-mass quantiles without an exact zero", _variant("equal-mass, no zero"),
                   "The 16 quantiles (i + ½)/16 of the normal distribution have no exact zero, and "
                   "zero must be representable (a weight that is exactly 0, such as a padded row or a "
                   "pruned weight, should stay 0): NF4 builds 8 positive and 7 "
                   "negative values from `offset` and adds 0 once."),
            Mutant("symmetric, no zero", _variant("symmetric"),
                   "Your code book is symmetric (8 values each side) and has no zero. NF4 takes 8 "
                   "positive values (9 probabilities, the 1/2 dropped), 7 negative ones (8 "
                   "probabilities, the 1/2 dropped) and one 0."),
            Mutant("not normalised", _variant("not normalised"),
                   "Divide by the largest value, so that the code book runs from −1 to 1 (weights "
                   "are divided by their block's absmax before the look-up)."),
            Mutant("uniform grid", _variant("uniform"),
                   "That is a uniform 4-bit grid. NF4's values are normal quantiles: "
                   "torch.special.ndtri at equally spaced probabilities."),
            Mutant("the sides swapped", _variant("mirrored"),
                   "NF4 has 8 positive values and 7 negative ones (positive side: 9 probabilities "
                   "from offset to 1/2; negative side: 8); yours has it the other way round."),
        ],
    ),
    Suite(
        exercise="09.4",
        name="quantize_blockwise",
        points=3,
        reference=bnb_quantize_blockwise,
        solution=quant.quantize_blockwise,
        arg_names=("w", "code", "blocksize"),
        cases=Q_CASES,
        judge=tie_judge,
        atol=0.0,
        rtol=1e-6,
        hint="Flatten w and cut it into blocks of `blocksize` consecutive values; c = max |w| "
             "per block; i = the index of the code value nearest to w / c (through the "
             "midpoints between neighbouring code values, a tie to the lower one). Return the "
             "indices flat, as uint8, and the constants c as float32.",
        mutants=[
            Mutant("one absmax for the whole tensor", _q_variant("per tensor"),
                   "Each block of `blocksize` values has its own constant c = max |w| over "
                   "that block; yours uses one for the whole tensor, so one outlier flattens "
                   "the resolution of every block."),
            Mutant("signed maximum", _q_variant("signed max"),
                   "c is the largest absolute value, max |w| (blocks.abs().amax(dim=1)): the "
                   "signed maximum is wrong for a block whose largest magnitude is negative."),
            Mutant("rounded up, not to the nearest", _q_variant("round up"),
                   "Your indices pick the code value just above w / c, not the nearest one: "
                   "compare w / c with the midpoints between neighbouring code values "
                   "(torch.bucketize(x, (code[:-1] + code[1:]) / 2)), or take the argmin of "
                   "|w / c − q_j|."),
            Mutant("ties to the upper value", _q_variant("ties up"),
                   "Your code sends a value that lies exactly halfway between two code values "
                   "to the upper one; bitsandbytes sends it to the lower one (bucketize with "
                   "right=False, or argmin, which returns the first of equal distances)."),
            Mutant("0 / 0 in an all-zero block", _q_variant("no guard"),
                   "In an all-zero block c = 0, and w / c is NaN: guard the division (divide "
                   "by c clamped to a tiny positive value, as bitsandbytes does), so that w / c "
                   "= 0 and the index is that of the code value nearest 0."),
        ],
    ),
    Suite(
        exercise="09.5",
        name="double_quantize",
        points=3,
        reference=bnb_double_quantize,
        solution=solution_double_quantize,
        arg_names=("absmax", "code", "blocksize"),
        upstream=("quantize_blockwise",),
        cases=D_CASES,
        judge=tie_judge,
        observe=_observe_double,
        readings=D_READINGS,
        atol=0.0,
        rtol=1e-5,
        hint="mean = the constants' mean; subtract it; cut the centred constants into blocks of "
             "`blocksize` (the last one padded with zeros); quantise each block with its own "
             "absmax₂ to the nearest value of `code` (the 8-bit dynamic map); return the n "
             "indices (uint8), absmax₂ (one per block, float32) and the mean (a 0-d tensor).",
        mutants=[
            Mutant("mean not subtracted", _d_variant("not centred"),
                   "Subtract the constants' mean before quantising them: they are all positive, "
                   "so without centring half of the 8-bit code (the negative values) is never "
                   "used. Quantise absmax − mean and return the mean, to add back."),
            Mutant("one scale for all blocks", _d_variant("one scale"),
                   "Each block of `blocksize` centred constants gets its own absmax₂ (one float32 "
                   "per block); yours scales every block by one value."),
            Mutant("rounded down, not to the nearest", _d_variant("round down"),
                   "Round to the nearest value of the code; yours takes the code value just "
                   "below. Use the midpoints between neighbouring code values (torch.bucketize), "
                   "or the argmin of the distance."),
            Mutant("a linear code in place of `code`", _d_variant("linear code"),
                   "Quantise to the code you are given (the dynamic map: 256 values, dense near "
                   "0 and spread over seven decades), not to a linear code of your own."),
            Mutant("the last block not padded", _d_variant("no padding"), PARTIAL),
        ],
    ),
]
