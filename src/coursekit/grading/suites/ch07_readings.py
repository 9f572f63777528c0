"""Observations and readings shared by Chapter 7's suites (issue 48, classes 3 and 4).

An observation says what is observably wrong in a failing case's outputs (``Suite.observe``),
without guessing a cause; a reading (``Suite.readings``) turns it into the diagnosis it implies
where, for that exercise, it implies one thing. Each observation returns "" unless it sees its
pattern exactly, so that every other failure keeps ``diagnose``'s general path (mutants, case
observations, probe hints).

:func:`cross_entropy_targets` reads a mean cross-entropy's gradient with respect to its logits
(B, N, V): at a position the loss scores, the gradient is w · (softmax(z) − one-hot(target)), a
row that sums to 0 with exactly one negative entry, at the target; at a position it does not
score, the row is 0. So the gradient says which positions a submission scored, against which
ids, and how much each weighs (w, compared with the reference's at the same position), which is
what ``next_token_loss`` and ``mlm_loss`` get wrong in their different ways.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

Observe = Callable[[list, list], str]

# A dtype that is not the expected one is a fact about the output, whatever the exercise.
DTYPE_READING = (
    r"has dtype torch\.\w+, expected torch\.\w+",
    "Return the result in the inputs' dtype: no .float(), .double() or .to(...) on the result, "
    "and no constant made by torch.tensor(...), torch.zeros(...) or torch.full(...) without "
    "dtype= (such a tensor is float32 or int64 and promotes what it meets; a result rebuilt as "
    "torch.tensor(x.item()) is float32, and no gradient flows through it either).")


def capitalised(observe: Observe) -> Observe:
    """``observe`` whose observation starts a sentence (the hint begins with it)."""
    def said(expected, got) -> str:
        text = observe(expected, got)
        return text[:1].upper() + text[1:]

    said.__name__ = said.__qualname__ = getattr(observe, "__name__", "observe")
    return said


def _size(outputs) -> int:
    """How many of ``outputs`` the call returned (the rest are gradients)."""
    return getattr(outputs, "size", len(outputs))


def _where(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, index)) + ")"


def _shown(positions: list[tuple[int, ...]], limit: int = 3) -> str:
    said = ", ".join(_where(p) for p in positions[:limit])
    return said + (", ..." if len(positions) > limit else "")


def dtype_observation(expected, got) -> str:
    """'your output has dtype X, expected Y' for the first returned tensor in another dtype."""
    size = _size(expected)
    for k, (e, a) in enumerate(zip(expected[:size], got[:_size(got)], strict=False)):
        if type(a) is torch.Tensor and a.dtype != e.dtype:
            label = "your output" if size == 1 else f"output {k}"
            return f"{label} has dtype {a.dtype}, expected {e.dtype}"
    return ""


@dataclass
class Targets:
    """What a cross-entropy gradient (B, N, V) says, position by position."""

    scored: torch.Tensor  # (B, N) bool: a nonzero row
    target: torch.Tensor  # (B, N) long: the id of the one negative entry, -1 where none
    clean: torch.Tensor  # (B, N) bool: a zero row, or one negative entry and a zero sum


def cross_entropy_targets(grad: torch.Tensor) -> Targets | None:
    """Read ``grad`` (B, N, V) as the gradient of a cross-entropy; None when it is not one."""
    if grad.dim() != 3 or not grad.is_floating_point() or not torch.isfinite(grad).all():
        return None
    g = grad.detach().double()
    scale = float(g.abs().max())
    if scale == 0.0:
        return None
    row = g.abs().amax(-1)
    scored = row > 1e-9 * scale
    negative = g < -1e-9 * row[..., None].clamp_min(1e-300)
    count = negative.sum(-1)
    sums = g.sum(-1).abs() <= 1e-6 * row.clamp_min(1e-300)
    target = torch.where(scored & (count == 1), negative.long().argmax(-1), -1)
    clean = ~scored | ((count == 1) & sums)
    return Targets(scored, target, clean)


def _got_gradient(expected, got) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The expected and the submitted gradient with respect to the logits, when the call
    returned one tensor and the gradient has the logits' shape."""
    labels = getattr(expected, "labels", ())
    if _size(expected) != 1 or len(expected) < 2 or getattr(got, "labels", ()) != labels \
            or len(got) != len(expected):
        return None
    e, a = expected[1], got[1]
    if a.shape != e.shape or a.dtype != e.dtype or e.dim() != 3:
        return None
    if not a.detach().abs().amax() > 0:  # no gradient at all: relation() says so
        return None
    return e, a


def _weights(e: torch.Tensor, a: torch.Tensor, te: Targets) -> torch.Tensor:
    """Per scored position, the submitted gradient's weight over the expected one's, read at
    the target entry (the same logits give the same softmax there)."""
    idx = te.target.clamp_min(0)[..., None]
    ge = e.detach().double().gather(-1, idx)[..., 0]
    ga = a.detach().double().gather(-1, idx)[..., 0]
    return torch.where(te.scored, ga / torch.where(te.scored, ge, 1.0), 0.0)


def _weighting(ratio: torch.Tensor, scored: torch.Tensor, unit: str) -> str:
    """What the weights of the scored positions are, compared with the reference's: one factor
    for all, one per row (sentence), or otherwise different; "" when they are the same."""
    r = ratio[scored]
    if r.numel() == 0 or torch.allclose(r, torch.ones_like(r), rtol=1e-3, atol=0):
        return ""
    if torch.allclose(r, r[0].expand_as(r), rtol=1e-3, atol=0):
        return (f"every scored position weighs {float(r[0]):.4g} times what it weighs in the "
                "reference's loss (so does the loss itself)")
    rows = []
    for b in range(ratio.shape[0]):
        rb = ratio[b][scored[b]]
        if rb.numel() and not torch.allclose(rb, rb[0].expand_as(rb), rtol=1e-3, atol=0):
            return ("the scored positions weigh differently from the reference's loss, "
                    f"even within one {unit}")
        rows.append(float(rb[0]) if rb.numel() else None)
    shown = ", ".join(f"{w:.3g}" for w in rows if w is not None)
    return (f"each {unit}'s scored positions weigh one factor of their own times what they weigh "
            f"in the reference's loss ({shown}, {unit} by {unit}): the weights differ from "
            f"{unit} to {unit}")


def next_token_observation(expected, got) -> str:
    """What the gradient of a next-token loss says about which targets it scores (see the
    module docstring); the ids are known from the reference: position i's target is x_{i+1}."""
    pair = _got_gradient(expected, got)
    if pair is None:
        return ""
    e, a = pair
    te, ta = cross_entropy_targets(e), cross_entropy_targets(a)
    if te is None or ta is None or not te.clean.all():
        return ""
    if not ta.clean.all():
        where = [tuple(p) for p in (~ta.clean).nonzero().tolist()]
        return (f"at position {_where(where[0])} your loss's gradient with respect to the logits "
                "has more than one negative entry, or does not sum to 0 over the vocabulary (the "
                "gradient of −log softmax(z)[target] is softmax(z) minus the one-hot target: "
                "one negative entry, at the target, and a zero sum)")
    B, N = te.scored.shape
    # the ids the reference shows: x[b, i + 1] is position i's target wherever it is scored
    ids = torch.full((B, N), -1, dtype=torch.long)
    ids[:, 1:] = torch.where(te.scored[:, :-1], te.target[:, :-1], -1)
    extra = ta.scored & ~te.scored
    missing = te.scored & ~ta.scored
    both = ta.scored & te.scored
    # against which id the submission scores each position: the one it has read (x_i), the
    # one before (x_{i-1}), where the reference shows them and they differ from x_{i+1}
    nxt = torch.where(te.scored, te.target, -2)
    here = ta.scored & (ids >= 0)
    tells = here & (ids != nxt)
    if tells.any() and bool((ta.target == ids)[here].all()):
        return ("your loss scores the logits of each position i against ids[:, i], the id "
                "that position has just read, not against the next id ids[:, i + 1]")
    prev = torch.full_like(ids, -1)
    prev[:, 1:] = ids[:, :-1]
    back = ta.scored & (prev >= 0)
    if (back & (prev != nxt)).any() and bool((ta.target == prev)[back].all()):
        return ("your loss scores the logits of each position i against ids[:, i - 1], the "
                "id before the one it has read, not against the next id ids[:, i + 1]")
    wrong = both & (ta.target != te.target)
    if wrong.any():
        return ""
    if extra.any() or missing.any():
        said = []
        last = extra[:, -1]
        pads = extra.clone()
        pads[:, -1] = False
        if last.any():
            said.append("scores the last position, which has no next id to predict")
        if pads.any():
            # the last real token of each padded row: its own id is real, its target padding
            real_before = torch.zeros_like(pads)
            real_before[:, 0] = True
            real_before[:, 1:] = te.scored[:, :-1]
            first_pads = ~te.scored & real_before
            first_pads[:, -1] = False
            where = [tuple(p) for p in pads.nonzero().tolist()]
            if bool((pads == first_pads).all()) and not missing.any():
                said.append(
                    f"scores the positions {_shown(where)}: exactly the last real token of each "
                    "padded row, whose target ids[:, i + 1] is the first padding (the positions "
                    "whose *input* ids[:, i] is padding are the ones left out)")
            else:
                said.append(f"scores targets that are padding (at {_shown(where)})")
        if missing.any():
            where = [tuple(p) for p in missing.nonzero().tolist()]
            skipped = te.target[missing].unique().tolist()
            what = (f"all of them id {skipped[0]}" if len(skipped) == 1 else "ids "
                    + ", ".join(map(str, skipped[:4])))
            said.append(f"leaves out real targets ({what}, at {_shown(where)})")
        return "your loss " + "; it ".join(said)
    weighting = _weighting(_weights(e, a, te), te.scored, "sentence")
    if weighting:
        return ("your loss scores the same positions against the same ids as the reference's, "
                f"but {weighting}")
    return ""


NEXT_TOKEN_READINGS = (
    # relation() on the gradient, when the loss is right: contributions one position off can
    # only come from targets or logits that are not paired position i with id i + 1
    (r"one position (earlier|later) along axis 1",
     "Your targets are not paired as the exercise asks: position i's logits are scored against "
     "the next id, logits[:, :-1] against ids[:, 1:]."),
    (r"against ids\[:, i\], the id that position has just read",
     "Your targets are not shifted: position i has read ids[:, :i + 1] and predicts the next "
     "id, so score logits[:, :-1] against ids[:, 1:] (the last position's logits predict "
     "nothing, and the first id is never a target)."),
    (r"against ids\[:, i - 1\]",
     "Your targets are shifted the wrong way: score logits[:, :-1] against ids[:, 1:]."),
    (r"exactly the last real token of each padded row",
     "Your padding mask is taken from the inputs: a target is skipped when the target itself, "
     "ids[:, 1:], is pad_id (ignore_index=pad_id on the shifted ids), not when the input "
     "ids[:, :-1] is."),
    (r"leaves out real targets \(all of them id \d+.*scores targets that are padding|scores "
     r"targets that are padding.*leaves out real targets \(all of them id \d+",
     "You skip the targets equal to a fixed id instead of those equal to the pad_id argument: "
     "use ignore_index=pad_id (here pad_id is not 0, and 0 is a real token)."),
    (r"scores the last position",
     "Drop the last position's logits: there is no next id for it to predict (logits[:, :-1])."),
    (r"weighs [\d.e+-]+ times what it weighs",
     "Your loss has the right terms but divides their sum by another number: it is the mean "
     "over the non-padding targets of the whole batch, so padding targets stay out of the sum "
     "and out of the count (not a sum, not a mean over every position)."),
    (r"each sentence's scored positions weigh one factor of their own",
     "You weigh each sentence's targets by a factor of its own (a mean per sentence, or a "
     "count per sentence): take one mean over every non-padding target of the batch at once."),
    (r"more than one negative entry",
     "At a scored position the loss is −log softmax(z)[target] for the one target id: the "
     "log-softmax runs over the vocabulary (the last axis), and there is no label smoothing "
     "(F.cross_entropy's label_smoothing=0)."),
)


def masked_lm_observation(expected, got) -> str:
    """What the gradient of a masked-LM loss says about which positions it scores and how much
    each weighs (the targets are the labels themselves)."""
    pair = _got_gradient(expected, got)
    if pair is None:
        return ""
    e, a = pair
    te, ta = cross_entropy_targets(e), cross_entropy_targets(a)
    if te is None or ta is None or not te.clean.all():
        return ""
    if not ta.clean.all():
        where = [tuple(p) for p in (~ta.clean).nonzero().tolist()]
        return (f"at position {_where(where[0])} your loss's gradient with respect to the logits "
                "has more than one negative entry, or does not sum to 0 over the vocabulary (the "
                "gradient of −log softmax(z)[label] is softmax(z) minus the one-hot label: "
                "one negative entry, at the label, and a zero sum)")
    extra, missing = ta.scored & ~te.scored, te.scored & ~ta.scored
    if extra.any() or missing.any() or (ta.target != te.target).any():
        return ""  # the mutants and the cases' hints say more
    weighting = _weighting(_weights(e, a, te), te.scored, "sentence")
    if weighting:
        return ("your loss scores the picked positions against their labels, as the reference's "
                f"does, but {weighting}")
    return ""


MASKED_LM_READINGS = (
    (r"weighs [\d.e+-]+ times what it weighs",
     "Your loss has the right terms but divides their sum by another number: it is the mean "
     "over the picked positions of the whole batch, the sum divided by how many there are (not "
     "by the batch size, nor by every position), as F.cross_entropy(..., ignore_index=-100) "
     "gives it."),
    (r"each sentence's scored positions weigh one factor of their own",
     "You weigh each sentence's picked positions by a factor of its own (a mean per sentence, "
     "summed or averaged): take one mean over every picked position of the batch at once."),
    (r"more than one negative entry",
     "At a picked position the loss is −log softmax(z)[label] for its one label: the "
     "log-softmax runs over the vocabulary (the last axis), and there is no label smoothing "
     "(F.cross_entropy's label_smoothing=0)."),
)
