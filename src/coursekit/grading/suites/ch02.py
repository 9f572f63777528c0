"""Chapter 2 — Bahdanau attention: ``additive_score``, ``masked_softmax``, ``context_vector``.

The references are independent of coursekit's code: the additive score is computed with
``nn.Linear`` layers loaded with the case's W, U and v; the masked softmax is ``torch.softmax``
applied, row by row, to the allowed entries only; the context vector is the weighted sum written
out with broadcasting.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit import attention
from coursekit.grading.suite import Case, Mutant, Suite, in_dtype, scaled_batch
from coursekit.grading.suites.attention_readings import (
    DTYPE_READING,
    NAN_GRADIENT_READING,
    dtype_observation,
    first_of,
    nan_gradient_observation,
    weights_observation,
    weights_readings,
)

# ----------------------------------------------------------------------------- 02.1 additive score


def torch_additive_score(s, h, W, U, v):
    """e_j = vᵀ tanh(W s + U h_j) with torch.nn.Linear layers holding W, U and v."""
    (d_a, d_s), d_h = W.shape, U.shape[1]
    W_s = nn.Linear(d_s, d_a, bias=False)
    U_h = nn.Linear(d_h, d_a, bias=False)
    v_a = nn.Linear(d_a, 1, bias=False)
    # functional_call: each layer's own forward, with the case's tensors as its weight, so
    # that the gradients with respect to W, U and v are the authority's too.
    def layer(module, weight, x):
        return torch.func.functional_call(module, {"weight": weight}, (x,))

    return layer(v_a, v[None, :], torch.tanh(layer(W_s, W, s)[:, None, :]
                                             + layer(U_h, U, h))).squeeze(-1)


def _score_case(B, N, d_s, d_h, d_a):
    def make(g):
        s = torch.randn(B, d_s, generator=g)
        h = torch.randn(B, N, d_h, generator=g)
        W = torch.randn(d_a, d_s, generator=g) * 0.5
        U = torch.randn(d_a, d_h, generator=g) * 0.5
        v = torch.randn(d_a, generator=g)
        return s, h, W, U, v

    return make


def _score_no_tanh(s, h, W, U, v):
    return ((s @ W.T)[:, None, :] + h @ U.T) @ v


def _score_swapped(s, h, W, U, v):
    return torch.tanh((s @ U.T)[:, None, :] + h @ W.T) @ v


def _score_not_broadcast(s, h, W, U, v):
    return torch.tanh(s @ W.T + h @ U.T) @ v  # (B, d_a) meets (B, N, d_a): aligns B with N


def _score_no_v(s, h, W, U, v):
    return torch.tanh((s @ W.T)[:, None, :] + h @ U.T).sum(-1)


def _score_softmaxed(s, h, W, U, v):
    return torch.softmax(attention.additive_score(s, h, W, U, v), dim=-1)


def _score_relu(s, h, W, U, v):
    return torch.relu((s @ W.T)[:, None, :] + h @ U.T) @ v


def _score_two_tanh(s, h, W, U, v):
    return (torch.tanh(s @ W.T)[:, None, :] + torch.tanh(h @ U.T)) @ v


def _score_v_inside(s, h, W, U, v):
    return torch.tanh(((s @ W.T)[:, None, :] + h @ U.T) @ v)


def _shifted_rows(expected, got) -> str:
    """'your scores are the expected ones plus a constant in each row' (a shift the softmax
    would not see), when that is what they are."""
    e, a = expected[0].detach().double(), got[0].detach().double()
    if a.shape != e.shape or a.dim() != 2 or a.shape[-1] < 2 or not torch.isfinite(a).all():
        return ""
    d = a - e
    if torch.allclose(d, torch.zeros_like(d), atol=1e-5, rtol=0):
        return ""
    if bool(((d.amax(-1) - d.amin(-1)).abs() < 1e-4).all()):
        return ("Your scores are the expected ones shifted by a constant in each row (the same "
                "shift at every position of an example)")
    return ""


# ----------------------------------------------------------------------------- 02.2 masked softmax


def torch_masked_softmax(scores, mask=None):
    """torch.softmax over the allowed entries of each row, by definition; 0 where none is allowed."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    mask = mask.expand_as(scores)
    rows, allowed = scores.reshape(-1, scores.shape[-1]), mask.reshape(-1, scores.shape[-1])
    out = torch.zeros_like(rows)
    for r in range(rows.shape[0]):
        if allowed[r].any():
            out[r, allowed[r]] = torch.softmax(rows[r, allowed[r]], dim=0)
    return out.view_as(scores)


def _lengths_mask(lengths, N):
    return torch.arange(N) < torch.tensor(lengths)[:, None]


def _softmax_case(shape, lengths, scale=2.0, offset=0.0, broadcast=False, masked_shift=0.0):
    """Scores of ``shape`` (B, ..., N); the mask lets each example see its first lengths[b] keys.
    ``masked_shift`` is added to the masked scores (to put them above or below the others)."""

    def make(g):
        scores = torch.randn(*shape, generator=g) * scale + offset
        if lengths is None:
            return scores, None
        mask = _lengths_mask(lengths, shape[-1])  # (B, N)
        scores = torch.where(mask.view(len(lengths), *[1] * (len(shape) - 2), shape[-1]),
                             scores, scores + masked_shift)
        if broadcast:
            return scores, mask[:, None, :]  # (B, 1, N): the same keys for every query
        return scores, mask

    return make


def _full_mask_case(g):
    scores = torch.randn(2, 4, 5, generator=g) * 2
    mask = torch.rand(2, 4, 5, generator=g) < 0.6
    mask[..., 1] = True  # every row keeps one allowed position
    return scores, mask


def _sm_batch_axis(scores, mask=None):
    scores = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=0)


def _sm_mask_after(scores, mask=None):
    weights = torch.softmax(scores, dim=-1)
    return weights if mask is None else weights * mask


def _sm_ignore_mask(scores, mask=None):
    return torch.softmax(scores, dim=-1)


def _sm_nan_rows(scores, mask=None):
    scores = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _sm_uniform_rows(scores, mask=None):
    scores = scores if mask is None else scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def _sm_big_negative(scores, mask=None):
    scores = scores if mask is None else scores.masked_fill(~mask, -1e6)
    return torch.softmax(scores, dim=-1)


def _sm_manual_exp(scores, mask=None):
    e = torch.exp(scores) if mask is None else torch.exp(scores) * mask
    return e / e.sum(dim=-1, keepdim=True)


def _sm_inverted(scores, mask=None):
    return torch_masked_softmax(scores, None if mask is None else ~mask)


# ----------------------------------------------------------------------------- 02.3 context vector


def torch_context_vector(weights, h):
    """c = Σ_j α_j h_j, written out: scale each h_j by its weight and add over j."""
    return (weights[:, :, None] * h).sum(dim=1)


def _context_case(B, N, d, zero_row=False):
    def make(g):
        weights = torch.softmax(torch.randn(B, N, generator=g) * 2, dim=-1)
        if zero_row:
            weights[-1] = 0.0  # a fully masked row: masked_softmax gives all zeros
        return weights, torch.randn(B, N, d, generator=g)

    return make


def _ctx_feature_axis(weights, h):
    return (weights[:, :, None] * h).sum(dim=-1)


def _ctx_batch_axis(weights, h):
    return (weights[:, :, None] * h).sum(dim=0)


def _ctx_plain_average(weights, h):
    return h.mean(dim=1)


def _ctx_mean(weights, h):
    return (weights[:, :, None] * h).mean(dim=1)


def _ctx_matmul_broadcast(weights, h):
    return weights @ h  # (B, N) @ (B, N, d) -> (B, B, d): every example's weights on every h


def _ctx_softmaxed(weights, h):
    return (torch.softmax(weights, dim=-1)[:, :, None] * h).sum(dim=1)


def _extra_axis(expected, got) -> str:
    """'Your output has shape X, expected Y: one axis more' (something broadcast against the
    scores had an axis of its own)."""
    e, a = expected[0], got[0]
    if a.dim() == e.dim() + 1:
        return (f"Your output has shape {tuple(a.shape)}, expected {tuple(e.shape)}: one axis "
                "more than the scores")
    return ""


def _axes_of_scores(ndim: int) -> dict[int, str]:
    return {0: "the batch", **({1: "the queries"} if ndim == 3 else {})}


SCORE_CASES = [
    Case("B=1, N=3, all sizes 2", _score_case(1, 3, 2, 2, 2)),
    Case("B=4, N=6, d_s=5 ≠ d_h=7, d_a=3", _score_case(4, 6, 5, 7, 3),
         hint="W is (d_a, d_s) and U is (d_a, d_h): the terms are s @ W.T, (B, d_a), and "
              "h @ U.T, (B, N, d_a)."),
    Case("B = N = 5, d_s = d_h = 4, d_a = 6", _score_case(5, 5, 4, 4, 6),
         hint="Each example's decoder state must be added to every position of its own "
              "encoder states."),
    Case("B=8, N=12, d_s=16, d_h=24, d_a=10", _score_case(8, 12, 16, 24, 10)),
]
SCORE_CASES.append(in_dtype(SCORE_CASES[1], torch.float64))

SOFTMAX_CASES = [
    Case("padding mask, lengths 5, 3, 1", _softmax_case((3, 5), [5, 3, 1])),
    Case("no mask (mask=None)", _softmax_case((4, 6), None),
         hint="With mask=None this is a plain softmax over the last axis."),
    Case("a fully masked row", _softmax_case((3, 4), [4, 0, 2]),
         hint="A row with no allowed position must come out as all zeros: not NaN, not "
              "uniform."),
    Case("mask (B, 1, N) broadcast over queries", _softmax_case((2, 3, 5), [4, 2],
                                                               broadcast=True),
         hint="The mask broadcasts: a (B, 1, N) mask applies to every query row."),
    # the masked scores lie below the allowed ones here: this case probes overflow alone
    Case("large scores (numerical stability)", _softmax_case((3, 6), [6, 5, 3], scale=30.0,
                                                             offset=200.0, masked_shift=-400.0),
         hint="exp(200) overflows float32: subtract the row maximum first (torch.softmax "
              "does)."),
    Case("scores far below -10⁶", _softmax_case((3, 6), [6, 4, 2], scale=1e6, offset=-5e6),
         hint="Any finite fill value can be beaten by real scores: fill with -inf.",
         grad=False),
    Case("scores far below -10⁹", _softmax_case((3, 6), [6, 4, 2], scale=1e9,
                                                offset=-5e9),
         hint="Real scores can be below any finite fill (here they are near -5·10⁹, "
              "below -1e9 too): fill the masked scores with float('-inf') and zero the "
              "rows with no allowed position.", grad=False),
    Case("a full (B, N_q, N) mask", _full_mask_case,
         hint="The mask may have the full shape of the scores: each query row has its "
              "own allowed positions. Use it elementwise (masked_fill), do not assume "
              "it is (B, N)."),
    # the masked scores are the largest: a maximum taken over them underflows the others
    Case("masked positions hold the largest scores",
         _softmax_case((3, 6), [6, 3, 1], masked_shift=300.0), grad=False,
         hint="Here the masked positions hold the largest scores (300 above the others): "
              "subtract the maximum over the allowed positions only (torch.softmax on "
              "-inf-filled scores does); a maximum that includes the masked scores makes "
              "exp underflow to 0 at every allowed position."),
]
SOFTMAX_CASES += [
    in_dtype(SOFTMAX_CASES[0], torch.float64),
    scaled_batch(SOFTMAX_CASES[0], 0, (1.0, 1e4, 1e-4)),
]

CONTEXT_CASES = [
    Case("B=1, N=3, d=2", _context_case(1, 3, 2)),
    Case("B=4, N=6, d=5", _context_case(4, 6, 5),
         hint="weights: (B, N), h: (B, N, d) -> c: (B, d)."),
    Case("N = d = 4 (B=3)", _context_case(3, 4, 4),
         hint="Sum over the positions j (dim 1), not over the features."),
    Case("a row of zero weights", _context_case(3, 5, 4, zero_row=True),
         hint="All-zero weights (a fully masked row) give a zero context vector."),
]
CONTEXT_CASES.append(in_dtype(CONTEXT_CASES[1], torch.float64))


SUITES = [
    Suite(
        exercise="02.1",
        name="additive_score",
        grad=("s", "h", "W", "U", "v"),
        points=2,
        reference=torch_additive_score,
        solution=attention.additive_score,
        cases=SCORE_CASES,
        hint="e_j = vᵀ tanh(W s + U h_j): (s @ W.T)[:, None, :] + h @ U.T, then tanh, then @ v.",
        observe=first_of(dtype_observation, _shifted_rows),
        readings=(
            DTYPE_READING,
            (r"is the expected one times [-0-9.e]+ \(1 / √\d+\)",
             "Your scores are divided by a square root: the additive score has no scale "
             "factor (the 1/√d_k belongs to Chapter 3's dot-product score). "
             "e_j = vᵀ tanh(W s + U h_j), as it is."),
            (r"shifted by a constant in each row",
             "additive_score returns the raw scores e_j = vᵀ tanh(W s + U h_j): a shift such as "
             "subtracting the row's (or the batch's) maximum is the softmax's stability trick, "
             "done inside the softmax, not part of the score."),
        ),
        mutants=[
            Mutant("missing tanh", _score_no_tanh,
                   "Your scores match vᵀ(W s + U h_j) without the tanh: the non-linearity is what "
                   "makes the score a small neural network rather than a linear function."),
            Mutant("W and U swapped", _score_swapped,
                   "You applied W to the encoder states and U to the decoder state: W goes with "
                   "s (the query), U with h_j (the keys)."),
            Mutant("state not broadcast over positions", _score_not_broadcast,
                   "s @ W.T is (B, d_a) and h @ U.T is (B, N, d_a): adding them directly lines up "
                   "the batch axis with the positions. Insert the positions axis: "
                   "(s @ W.T)[:, None, :]."),
            Mutant("no v", _score_no_v,
                   "Your scores sum the d_a features of tanh(...) instead of projecting them with "
                   "v: finish with @ v."),
            Mutant("softmax applied", _score_softmaxed,
                   "You returned softmax weights: additive_score returns the raw scores e_j; the "
                   "(masked) softmax is the next step."),
            Mutant("relu instead of tanh", _score_relu,
                   "Your alignment model uses ReLU: Bahdanau's score is vᵀ tanh(W s + U h_j), "
                   "with tanh as the hidden layer's non-linearity."),
            Mutant("tanh on each term", _score_two_tanh,
                   "You apply tanh to W s and to U h_j separately and add the results: the "
                   "alignment model takes one tanh of their sum, vᵀ tanh(W s + U h_j)."),
            Mutant("v inside the tanh", _score_v_inside,
                   "You apply v before the tanh, tanh(vᵀ(W s + U h_j)): v reads out the hidden "
                   "layer after the tanh, e_j = vᵀ tanh(W s + U h_j)."),
        ],
    ),
    Suite(
        exercise="02.2",
        name="masked_softmax",
        grad=("scores",),
        points=3,
        reference=torch_masked_softmax,
        solution=attention.masked_softmax,
        cases=SOFTMAX_CASES,
        hint="Fill the masked scores with -inf, take torch.softmax over the last axis, and set "
             "rows with no allowed position to 0.",
        observe=first_of(dtype_observation, _extra_axis, nan_gradient_observation,
                         weights_observation(0, _axes_of_scores, "the positions")),
        readings=(DTYPE_READING, NAN_GRADIENT_READING, *weights_readings("the positions"),
                  (r"one axis more than the scores",
                   "Something broadcast against the scores has an axis of its own: most likely "
                   "the mask, given an extra axis (mask[:, None, :]) although it already "
                   "broadcasts to the scores, whatever its shape ((B, N), (B, 1, N) or the "
                   "scores' full shape). Use the mask as given: masked_fill(~mask, ...).")),
        mutants=[
            Mutant("softmax over the batch axis", _sm_batch_axis,
                   "Your weights sum to 1 down the batch axis (dim=0): each row — one query's "
                   "scores over the N positions — must sum to 1, so the softmax runs over the "
                   "last axis."),
            Mutant("mask applied after the softmax", _sm_mask_after,
                   "You zeroed the masked weights after the softmax, so the padding still took "
                   "its share of the normaliser and the rows no longer sum to 1: mask the scores "
                   "(with -inf) before the softmax."),
            Mutant("mask ignored", _sm_ignore_mask,
                   "Your weights ignore the mask: padding positions get weight. Fill the masked "
                   "scores with -inf before the softmax."),
            Mutant("inverted mask", _sm_inverted,
                   "Your mask is inverted: in this book True means 'may attend' (as in "
                   "F.scaled_dot_product_attention), so fill where the mask is False (~mask)."),
            Mutant("NaN on a fully masked row", _sm_nan_rows,
                   "A row with every position masked becomes softmax(-inf, ..., -inf) = NaN: "
                   "detect rows with no allowed position (mask.any) and return zeros there."),
            Mutant("uniform weights on a fully masked row", _sm_uniform_rows,
                   "A fully masked row came out uniform: with a finite fill every entry of that "
                   "row is equal, so the softmax spreads the weight over padding. That row must be "
                   "all zeros."),
            Mutant("-1e6 fill", _sm_big_negative,
                   "A fill of -1e6 is not -inf: it leaks weight to padding when real scores are "
                   "lower, and spreads a fully masked row uniformly. Fill with float('-inf') and "
                   "zero the rows with no allowed position."),
            Mutant("exp without the max subtracted", _sm_manual_exp,
                   "exp(scores) overflows for large scores and gives 0/0 on a fully masked row: "
                   "use torch.softmax (it subtracts the row maximum) on -inf-filled scores."),
        ],
    ),
    Suite(
        exercise="02.3",
        name="context_vector",
        grad=("weights", "h"),
        points=2,
        reference=torch_context_vector,
        solution=attention.context_vector,
        cases=CONTEXT_CASES,
        hint="c = Σ_j α_j h_j: weight each encoder state by its α_j and add over j.",
        observe=dtype_observation,
        readings=(
            DTYPE_READING,
            (r"is right, but the gradient with respect to `weights` is not",
             "c = Σ_j α_j h_j must be linear in the weights as given. Renormalising them "
             "(dividing by a sum of the weights, their row's or the batch's) agrees while they "
             "sum to 1, but not in the gradient, and turns a row of zero weights into 0/0."),
        ),
        mutants=[
            Mutant("summed over the feature axis", _ctx_feature_axis,
                   "You summed over the features: c = Σ_j α_j h_j sums over the positions j "
                   "(dim 1) and keeps the d features of each h_j."),
            Mutant("summed over the batch axis", _ctx_batch_axis,
                   "You summed over the batch (dim 0), mixing different examples: sum over the "
                   "positions j (dim 1)."),
            Mutant("plain average of encoder states", _ctx_plain_average,
                   "Your context ignores the weights: it is the plain average of the encoder "
                   "states, the idea attention improves on. Weight each h_j by α_j."),
            Mutant("weighted mean instead of sum", _ctx_mean,
                   "You divided by N: the weights already sum to 1, so the context is the "
                   "weighted sum Σ_j α_j h_j, not its mean."),
            Mutant("softmax applied to the weights", _ctx_softmaxed,
                   "You apply a softmax to the weights: they are attention weights already "
                   "(masked_softmax's output), so use them as they are, c = Σ_j α_j h_j."),
            Mutant("weights @ h broadcast over the batch", _ctx_matmul_broadcast,
                   "weights @ h with weights (B, N) and h (B, N, d) multiplies every example's "
                   "weights with every example's states, giving (B, B, d). Give the weights a "
                   "query axis: (weights[:, None, :] @ h).squeeze(1)."),
        ],
    ),
]
