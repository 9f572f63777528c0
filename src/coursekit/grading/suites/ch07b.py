"""Chapter 7, notebook 07b (decoding) — ``top_p_filter``, the nucleus filter.

The authority is Hugging Face's ``TopPLogitsWarper``, the filter ``generate(top_p=...)`` applies.
"""

from __future__ import annotations

import math

import torch

from coursekit import decoding
from coursekit.grading.suite import Case, Mutant, Suite

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
]


def _top_p_variant(*, strict=False, sorted_out=False, fill=-math.inf, probs_out=False,
                   ascending=False):
    def top_p_filter(logits, p):
        sorted_logits, order = logits.sort(dim=-1, descending=not ascending)
        probs = sorted_logits.softmax(dim=-1)
        cum = probs.cumsum(dim=-1)
        drop = cum > p if strict else (cum - probs) >= p
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
        ],
    ),
]
