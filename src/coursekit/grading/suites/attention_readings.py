"""Observations and readings shared by the suites of Chapters 1–4 (issue 48, classes 3 and 4).

An observation says what is observably wrong in a failing case's outputs (``Suite.observe``);
a reading turns an observation into the diagnosis it implies where, for these exercises, it
implies one thing (``Suite.readings``). Each observation here returns "" unless it sees exactly
its pattern, so that every other failure keeps the general path of ``diagnose`` (mutants,
case observations, probe hints).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Observe = Callable[[list, list], str]


def _size(outputs) -> int:
    """How many of ``outputs`` the call returned (the rest are gradients)."""
    return getattr(outputs, "size", len(outputs))


def _label(outputs, k: int) -> str:
    return "Your output" if _size(outputs) == 1 else f"Output {k}"


def dtype_observation(expected, got) -> str:
    """'your output has dtype X, expected Y' for the first returned tensor in another dtype."""
    for k, (e, a) in enumerate(zip(expected[:_size(expected)], got[:_size(got)], strict=False)):
        if type(a) is torch.Tensor and a.dtype != e.dtype:
            return f"{_label(expected, k)} has dtype {a.dtype}, expected {e.dtype}"
    return ""


def nan_gradient_observation(expected, got) -> str:
    """'your outputs are right, but <gradient> is NaN at ...' when every returned tensor is
    right and a gradient is not finite where the expected one is."""
    size, labels = _size(expected), getattr(expected, "labels", ())
    if not labels or getattr(got, "labels", ()) != labels or len(got) != len(expected):
        return ""
    for e, a in zip(expected[:size], got[:size], strict=True):
        if a.shape != e.shape or a.dtype != e.dtype or not torch.allclose(
                a.detach().double(), e.detach().double(), atol=1e-5, rtol=1e-4, equal_nan=True):
            return ""
    for k in range(size, len(expected)):
        e, a = expected[k].detach(), got[k].detach()
        if a.shape == e.shape and a.is_floating_point():
            bad = ~torch.isfinite(a) & torch.isfinite(e)
            if bad.any():
                where = tuple(bad.nonzero()[0].tolist())
                what = "NaN" if torch.isnan(a[where]) else "infinite"
                said = "outputs are" if size > 1 else "output is"
                return (f"Your {said} right, but {labels[k]} is {what} at index {where}, where "
                        "it should be finite")
    return ""


NAN_GRADIENT_READING = (
    r"right, but the gradient .* is (NaN|infinite)",
    "A NaN or an infinity computed on the way and then discarded by a guard still reaches the "
    "backward pass (the NaN-through-where trap): softmax over a row of -inf is NaN, and "
    "torch.where or nan_to_num after it fixes the values, not the gradient; the same goes for "
    "0/0 or an overflowing exp in a branch that torch.where drops. Keep the NaN from arising: "
    "put -inf into the scores with masked_fill(~mask, float('-inf')) or torch.where(mask, "
    "scores, -inf) (their backward sends nothing to the masked positions) rather than by "
    "adding a 0/-inf mask, or give a row with no allowed position finite scores (zeros) before "
    "the softmax.")

DTYPE_READING = (
    r"dtype torch\.(float32|float16|bfloat16), expected torch\.float64",
    "Your result is not in the inputs' dtype (float64 here): compute in the inputs' dtype. A "
    ".float(), a dtype=torch.float32, or a constant made by torch.zeros(...) or "
    "torch.tensor(...) without dtype= forces float32.")


def weights_observation(index: int, axes: Callable[[int], dict[int, str]], last: str) -> Observe:
    """What is observably wrong with attention weights, output ``index`` (a distribution over
    the last axis, ``last``: "the positions", "the keys"): normalised over another axis, rows
    with an allowed position that came out all zero, or weight where the expected weight is
    exactly 0. ``axes(ndim)`` names the other axes for a tensor of ``ndim`` dimensions."""

    def observe(expected, got) -> str:
        if len(got) <= index or len(expected) <= index:
            return ""
        e, a = expected[index].detach().double(), got[index].detach().double()
        if a.shape != e.shape or a.dim() < 2 or not torch.isfinite(a).all() \
                or torch.allclose(a, e, atol=1e-5, rtol=1e-4):
            return ""
        what = "Your weights" if _size(expected) == 1 else f"The weights (output {index})"
        sums = e.sum(-1)
        rows = a.sum(-1)
        # normalised over another axis: not rows that each sum to 1 or 0 (a row of zeros and a
        # one-hot row also sum to 1 or 0 down a column)
        if (a >= 0).all() and not bool((((rows - 1).abs() < 1e-4) | (rows.abs() < 1e-6)).all()):
            for axis in range(a.dim() - 1):
                s = a.sum(axis)
                ones = (s - 1).abs() < 1e-4
                if a.shape[axis] > 1 and bool((ones | (s.abs() < 1e-6)).all()) and ones.any():
                    name = axes(a.dim()).get(axis, f"axis {axis}")
                    return (f"{what} sum to 1 along axis {axis} ({name}), not along the last "
                            f"axis ({last})")
        empty = (a.abs() < 1e-12).all(-1) & ((sums - 1).abs() < 1e-4)
        if empty.any():
            first = tuple(empty.nonzero()[0].tolist())
            return (f"{what} are all zero in {int(empty.sum())} row(s) that have an allowed "
                    f"position (the first at index {first}); those rows should sum to 1")
        leak = (e == 0) & (a.abs() > 1e-6)
        if leak.any():
            first = tuple(leak.nonzero()[0].tolist())
            return (f"{what} are nonzero where the expected weight is exactly 0 (at masked "
                    f"positions), the first at index {first}")
        return ""

    return observe


def first_of(*observers: Observe) -> Observe:
    """The first non-empty observation of ``observers``."""

    def observe(expected, got) -> str:
        for fn in observers:
            seen = fn(expected, got)
            if seen:
                return seen
        return ""

    return observe


WEIGHTS_READINGS = (
    (r"sum to 1 along axis \d+ \(",
     "Take the softmax over the last axis (dim=-1): each row, one query's scores over {last}, "
     "must sum to 1. A fixed dim=1 (or dim=0, dim=-2) normalises over another axis, which one "
     "depending on the number of leading axes."),
    (r"are all zero in \d+ row\(s\) that have an allowed position",
     "In such a row exp either overflows to inf (exp(s) / Σ exp(s) without the row's maximum "
     "subtracted gives inf/inf = NaN, which a guard then zeroes) or underflows to 0 everywhere "
     "(the maximum subtracted is not the row's own over its allowed positions: the whole "
     "batch's, or one that includes masked scores); or the row was taken for one with no "
     "allowed position (mask.any over the wrong axis). torch.softmax on -inf-filled scores, "
     "then zeros for the rows with none, does it right."),
    (r"nonzero where the expected weight is exactly 0",
     "Masked positions must get exactly zero weight, whatever the scores: real scores can be "
     "below any finite fill (-1e6, -1e9, the smallest score), so fill the masked scores with "
     "float('-inf'), not with a finite number and not by multiplying them by the mask, before "
     "the softmax; then zero the rows with no allowed position."),
)


def weights_readings(last: str) -> tuple[tuple[str, str], ...]:
    return tuple((pattern, said.replace("{last}", last)) for pattern, said in WEIGHTS_READINGS)
