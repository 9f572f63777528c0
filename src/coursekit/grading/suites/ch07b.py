"""Chapter 7, notebook 07b (decoding) — ``top_p_filter``, the nucleus filter.

The authority is Hugging Face's ``TopPLogitsWarper``, the filter ``generate(top_p=...)`` applies.
"""

from __future__ import annotations

import math

import torch

from coursekit import decoding
from coursekit.grading.suite import Case, Mutant, Suite, compare, in_dtype
from coursekit.grading.suites.ch07_readings import DTYPE_READING, capitalised

# ----------------------------------------------------------------------------- 07.3 top_p_filter


def hf_top_p(logits, p):
    """The authority: Hugging Face's ``TopPLogitsWarper`` (which takes (B, V) scores)."""
    from transformers.generation.logits_process import TopPLogitsWarper

    flat = logits.reshape(-1, logits.shape[-1])
    return TopPLogitsWarper(top_p=p)(None, flat).reshape(logits.shape)


def _top_p_case(shape=None, p=0.8, probs=None, scale=1.0):
    def make(g):
        if probs is not None:
            return torch.tensor(probs).log()[None], p
        while True:  # no cumulative sum within 1e-3 of p: the nucleus is well defined
            logits = scale * torch.randn(shape, generator=g)
            sums = logits.softmax(-1).sort(-1, descending=True).values.cumsum(-1)
            if ((sums[..., :-1] - p).abs() > 1e-3).all():
                return logits, p

    return make


TOP_P_CASES = [
    Case("by hand: probabilities (0.5, 0.3, 0.15, 0.05), p = 0.9",
         _top_p_case(probs=[0.5, 0.3, 0.15, 0.05], p=0.9)),
    Case("the token that crosses p is kept: (0.4, 0.35, 0.25), p = 0.5",
         _top_p_case(probs=[0.4, 0.35, 0.25], p=0.5),
         hint="Keep the smallest set whose probabilities sum to at least p: the token that makes "
              "the sum reach p is in the nucleus (0.4 < 0.5, so 0.35 is kept too)."),
    Case("tokens in vocabulary order, B=4, V=10, p = 0.8", _top_p_case((4, 10), 0.8),
         hint="Sort to find the nucleus, then put the mask back in vocabulary order "
              "(scatter with the sort's indices): return logits in the input's order."),
    Case("p smaller than the top probability: one token", _top_p_case((3, 12), 0.05),
         hint="The most probable token is always kept, even when its probability alone exceeds p."),
    Case("p = 1 keeps every token", _top_p_case((2, 7), 1.0)),
    Case("(B, N, V) logits, p = 0.6", _top_p_case((2, 3, 9), 0.6),
         hint="Filter along the last axis (the vocabulary), whatever the leading axes."),
    Case("large logits (×30)", _top_p_case((2, 16), 0.9, scale=30.0),
         hint="Compute the probabilities with softmax (stable for large logits)."),
    Case("very large logits (×100)", _top_p_case((3, 12), 0.9, scale=100.0),
         hint="Compute the probabilities with softmax, which subtracts the row's maximum first: "
              "exp of a logit near 300 overflows float32 to inf."),
    Case("ties at the cut-off: probabilities (0.4, 0.2, 0.2, 0.2), p = 0.5",
         _top_p_case(probs=[0.4, 0.2, 0.2, 0.2], p=0.5),
         hint="Keep the smallest set whose probabilities reach p: 0.4 + 0.2 = 0.6 ≥ 0.5, so the "
              "nucleus holds two tokens, the 0.4 and one of the three tied 0.2s (any one of "
              "them is accepted). A threshold on the probability, keep every token with "
              "probability ≥ the last one kept, keeps all three ties."),
]
# logits come in the model's dtype: the filter returns them in it (Hugging Face's does)
TOP_P_CASES.append(in_dtype(TOP_P_CASES[0], torch.float64))


def tie_judge(expected, got, atol, rtol):
    """The verdict, where tokens whose logits tie at the nucleus's edge may be kept in any
    order: in a row, a kept token with the edge logit t that the reference drops counts as one
    of the reference's kept ties at t, when the row keeps as many tokens at t as the reference
    does (which of equal tokens a sort puts first is not fixed)."""
    e = expected[0] if expected else None
    a = got[0] if len(got) else None
    if (type(a) is torch.Tensor and type(e) is torch.Tensor and a.shape == e.shape
            and a.dtype == e.dtype and a.is_floating_point() and e.dim() >= 1):
        e2, a2 = e.reshape(-1, e.shape[-1]), a.reshape(-1, a.shape[-1]).clone()
        for row in range(e2.shape[0]):
            kept = torch.isfinite(e2[row])
            if not kept.any():
                continue
            edge = e2[row][kept].min()
            mine, theirs = a2[row] == edge, e2[row] == edge
            if int(mine.sum()) == int(theirs.sum()) and (mine != theirs).any():
                a2[row] = torch.where(mine | theirs, e2[row], a2[row])
        got = [a2.reshape(a.shape), *got[1:]]
    return compare(expected, got, atol, rtol)


def _kept_ties(e, a) -> int:
    """How many tokens ``a`` keeps beyond ``e``'s nucleus, where every one of them ties with the
    nucleus's edge logit and ``a`` keeps the whole nucleus unchanged; 0 otherwise."""
    e2, a2 = e.reshape(-1, e.shape[-1]), a.reshape(-1, a.shape[-1])
    extra = 0
    for row_e, row_a in zip(e2, a2, strict=True):
        kept = torch.isfinite(row_e)
        if not kept.any() or not torch.equal(row_a[kept], row_e[kept]):
            return 0
        edge = row_e[kept].min()
        more = torch.isfinite(row_a) & ~kept
        if not (row_a[more] == edge).all():
            return 0
        extra += int(more.sum())
    return extra


def observe(expected, got) -> str:
    """What is observably wrong with a filtered row: finite values where the reference has
    -inf; kept values that are not the input's logits; every row keeping as many tokens; a row
    with nothing kept; the right number kept, but other tokens. "" otherwise (the cases' hints
    speak)."""
    e, a = expected[0], got[0]
    if a.shape != e.shape or a.dtype != e.dtype or not a.is_floating_point():
        return ""
    e, a = e.detach().double(), a.detach().double()
    keep_e = torch.isfinite(e)
    if keep_e.all():
        return ""
    extra = _kept_ties(e, a)
    if extra:
        return (f"your output keeps {extra} more token(s) whose logit ties with the last one "
                "the nucleus keeps (the reference keeps only as many of the tied tokens as the "
                "smallest set needs)")
    if not (a == -math.inf).any():
        dropped = a[~keep_e]
        if torch.isfinite(dropped).all() and (dropped == dropped.flatten()[0]).all():
            return (f"your output holds {float(dropped.flatten()[0]):g} where the reference's "
                    "holds −inf (the tokens outside the nucleus), and no −inf anywhere")
        return ""
    keep_a = a != -math.inf
    rows_e, rows_a = keep_e.reshape(-1, e.shape[-1]), keep_a.reshape(-1, a.shape[-1])
    both = keep_e & keep_a
    if both.any() and not torch.allclose(a[both], e[both], atol=1e-5, rtol=1e-4):
        shift = (a - e).masked_fill(~both, math.nan).reshape(-1, e.shape[-1])
        rows = [r[~torch.isnan(r)] for r in shift]
        if all(len(r) == 0 or torch.allclose(r, r[0].expand_as(r), atol=1e-4) for r in rows):
            return ("inside the nucleus your values are the input's logits shifted by a constant "
                    "per row (log-probabilities), not the logits unchanged")
        return ""
    empty = ~rows_a.any(-1)
    if empty.any():
        row = int(empty.nonzero()[0, 0])
        return (f"row {row} of your output (flattened over the leading axes) has no token left, "
                "every logit −inf, where the reference keeps at least its most probable token")
    count_e, count_a = rows_e.sum(-1), rows_a.sum(-1)
    if len(count_e) > 1 and (count_a == count_a[0]).all() and not (count_e == count_e[0]).all():
        shown = ", ".join(map(str, count_e.tolist()[:6]))
        return (f"your output keeps {int(count_a[0])} tokens in every row, where each row's "
                f"nucleus has a size of its own ({shown}{', ...' if len(count_e) > 6 else ''})")
    if (count_a == count_e).all() and (rows_a != rows_e).any():
        row = int((rows_a != rows_e).any(-1).nonzero()[0, 0])
        return (f"in each row your output keeps as many tokens as the nucleus holds, but not the "
                f"same ones (row {row}: yours keeps {rows_a[row].nonzero()[:, 0].tolist()}, the "
                f"reference {rows_e[row].nonzero()[:, 0].tolist()})")
    return ""


READINGS = (
    DTYPE_READING,
    (r"whose logit ties with the last one",
     "Tokens that tie at the nucleus's edge count one by one: the nucleus is the smallest set "
     "that reaches p, so keep a tied token only while the tokens before it (in the sorted "
     "order) sum to less than p. A threshold on the probability, every token at least as "
     "probable as the last one kept, keeps all the ties."),
    (r"where the reference's holds −inf",
     "The tokens outside the nucleus get −inf, float('-inf'), not a finite stand-in such as 0, "
     "−1e4 or −1e9: the check compares the filtered logits themselves, and a finite value is "
     "another logit."),
    (r"shifted by a constant per row",
     "Return the logits themselves, unchanged inside the nucleus and −inf outside: no softmax, "
     "log or renormalisation on the way out (the sampler applies the softmax, which "
     "renormalises the nucleus by itself)."),
    (r"has no token left",
     "Filter each row on its own, along the last axis (the vocabulary), whatever the leading "
     "axes: its most probable token is always kept, so no row comes out all −inf (a nucleus "
     "taken over the whole batch, or over another axis, empties rows)."),
    (r"tokens in every row, where each row's nucleus has a size of its own",
     "Each row has a nucleus of its own size: sort, accumulate and compare with p row by row "
     "(along the last axis), and drop token by token; one count or one threshold for the whole "
     "batch keeps too many tokens in some rows and too few in others."),
    (r"keeps as many tokens as the nucleus holds, but not the same ones",
     "You find the nucleus's size but keep other tokens: put the sorted mask back in vocabulary "
     "order with mask.scatter(-1, order, mask) (or gather with the inverse permutation, "
     "order.argsort(-1); gathering with order itself applies the permutation a second time)."),
)


def _top_p_variant(*, strict=False, sorted_out=False, fill=-math.inf, probs_out=False,
                   ascending=False, complement=False, fixed_p=None):
    def top_p_filter(logits, p):
        p = p if fixed_p is None else fixed_p
        sorted_logits, order = logits.sort(dim=-1, descending=not ascending)
        probs = sorted_logits.softmax(dim=-1)
        cum = probs.cumsum(dim=-1)
        drop = cum > p if strict else (cum - probs) >= (1 - p if complement else p)
        if not strict:
            drop[..., 0] = False
        if sorted_out:
            return sorted_logits.masked_fill(drop, fill)
        drop = drop.scatter(-1, order, drop)
        if probs_out:
            return logits.softmax(dim=-1).masked_fill(drop, 0.0)
        return logits.masked_fill(drop, fill)

    return top_p_filter


SUITES = [
    Suite(
        exercise="07.3",
        name="top_p_filter",
        points=3,
        reference=hf_top_p,
        solution=decoding.top_p_filter,
        arg_names=("logits", "p"),
        cases=TOP_P_CASES,
        judge=tie_judge,
        hint="Sort the probabilities in descending order, accumulate them, drop a token when the "
             "tokens before it already sum to p, always keep the first, and set the dropped "
             "tokens' logits to -inf in vocabulary order.",
        mutants=[
            Mutant("drops the token that crosses p", _top_p_variant(strict=True),
                   "You drop the token whose probability makes the sum pass p, so the kept mass "
                   "is below p (and nothing is kept when the top token alone exceeds p). Drop a "
                   "token only when the tokens before it already reach p: cumsum − prob ≥ p."),
            Mutant("returns the sorted logits", _top_p_variant(sorted_out=True),
                   "You return the logits in sorted order. Scatter the mask back to vocabulary "
                   "order (mask.scatter(-1, order, mask)) and fill the original logits."),
            Mutant("zero instead of -inf", _top_p_variant(fill=0.0),
                   "A dropped token's logit must be -inf (probability 0 after softmax); a logit "
                   "of 0 keeps it in play."),
            Mutant("returns probabilities", _top_p_variant(probs_out=True),
                   "Return logits with -inf outside the nucleus, not probabilities: the sampler "
                   "applies the softmax."),
            Mutant("ascending sort", _top_p_variant(ascending=True),
                   "Sort in descending order: the nucleus is made of the *most* probable tokens."),
            Mutant("1 − p where p belongs", _top_p_variant(complement=True),
                   "You compare the cumulative probability with 1 − p: the nucleus is the "
                   "smallest set of most probable tokens whose probabilities reach p itself "
                   "(Hugging Face's 1 − p goes with its ascending sort, where it removes the "
                   "least probable tail)."),
            Mutant("p fixed at 0.9", _top_p_variant(fixed_p=0.9),
                   "Your filter passes exactly the cases where p is 0.9: use the `p` argument, "
                   "not a fixed 0.9."),
        ],
        observe=capitalised(observe),
        readings=READINGS,
    ),
]
