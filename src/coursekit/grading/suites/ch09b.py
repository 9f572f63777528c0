"""Chapter 9, notebook 09b — QLoRA: the NF4 code book from normal quantiles.

The authority is ``bitsandbytes``: ``bitsandbytes.functional.create_normal_map(offset)``, the
function that produced the published NF4 table, from which the 16 values are read (its 256-entry
map holds 7 negative values, zeros, then 8 positive values).
"""

from __future__ import annotations

import torch

from coursekit import quant
from coursekit.grading.suite import Case, Mutant, Suite


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
                   "zero must be representable (padding, ReLU outputs): NF4 builds 8 positive and 7 "
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
]
