"""Chapter 7, notebook 07a (GPT) — ``merge_pair`` (the BPE merge step) and ``top_p_filter``.

Authorities: the merge step is checked against a written-out reading of Sennrich et al.'s
algorithm (merge non-overlapping occurrences, left to right, as GPT-2's ``bpe()`` does with its
``word.index(first, i)`` scan), which ``tests/test_ch07a_gpt.py`` proves equal to the BPE
model of Hugging Face ``tokenizers`` on every case; top-p filtering against Hugging Face's
``TopPLogitsWarper``, the filter ``generate(top_p=...)`` applies.
"""

from __future__ import annotations

import math

import torch

from coursekit import decoding
from coursekit.data import bpe
from coursekit.grading.suite import Case, Mutant, OutputError, Suite

# ----------------------------------------------------------------------------- 07.1 merge_pair


def gpt2_merge(ids, pair, new_id):
    """The authority: GPT-2's merge loop (``encoder.py``'s ``bpe()``), on ids instead of strings."""
    first, second = pair
    word, new_word, i = list(ids), [], 0
    while i < len(word):
        try:
            j = word.index(first, i)
        except ValueError:
            new_word.extend(word[i:])
            break
        new_word.extend(word[i:j])
        i = j
        if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
            new_word.append(new_id)
            i += 2
        else:
            new_word.append(word[i])
            i += 1
    return new_word


def run_merge(fn, args):
    out = fn(*args)
    if not isinstance(out, (list, tuple)) or not all(type(i) is int for i in out):
        raise OutputError(f"merge_pair returned a {type(out).__name__}: expected a list of ints")
    return torch.tensor(list(out), dtype=torch.long)


def _merge_case(ids=None, pair=None, n=0, alphabet=4, plant=()):
    def make(g):
        if ids is not None:
            return list(ids), tuple(pair), 99
        seq = torch.randint(alphabet, (n,), generator=g).tolist()
        for at in plant:  # make sure the pair occurs where the case needs it
            seq[at:at + 2] = [0, 1]
        return seq, (0, 1), alphabet

    return make


MERGE_CASES = [
    Case("by hand: h e l l o with pair (l, l)", _merge_case([7, 4, 11, 11, 14], (11, 11))),
    Case("random ids, several occurrences of (0, 1)", _merge_case(n=30, plant=(3, 10, 20))),
    Case("a run a a a a a with pair (a, a)", _merge_case([3, 3, 3, 3, 3], (3, 3)),
         hint="Occurrences do not overlap: scan left to right, and after a merge skip both "
              "tokens, so (a, a, a, a, a) becomes (new, new, a)."),
    Case("the pair is the last two tokens", _merge_case([5, 2, 8, 2, 8], (2, 8)),
         hint="Check the last two tokens too, and keep the last token when it is not merged."),
    Case("the pair in the other order is not merged", _merge_case([8, 2, 2, 8, 8, 2], (2, 8)),
         hint="A pair is ordered: (a, b) is merged, (b, a) is not."),
    Case("no occurrence: the same ids come back", _merge_case([1, 2, 3, 1], (3, 2))),
    Case("ids of several digits: pair (1, 1) in 1 11 1 1 11 1 1", _merge_case(
        [1, 11, 1, 1, 11, 1, 1], (1, 1)), hint="Compare ids as whole numbers, token by token: "
         "joined into a string, '1 11 1 1 11 1 1' holds '1 1' where a 1 meets the digits of 11."),
    Case("one token", _merge_case([6], (6, 6)),
         hint="A single token has no pair: return it unchanged."),
]


def _merge_only_first(ids, pair, new_id):
    ids = list(ids)
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return ids[:i] + [new_id] + ids[i + 2:]
    return ids


def _merge_step_one(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
        else:
            out.append(ids[i])
        i += 1
    return out


def _merge_drop_last(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_right_to_left(ids, pair, new_id):
    out, i = [], len(ids) - 1
    while i >= 0:
        if i >= 1 and (ids[i - 1], ids[i]) == tuple(pair):
            out.append(new_id)
            i -= 2
        else:
            out.append(ids[i])
            i -= 1
    return out[::-1]


def _merge_unordered(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and {ids[i], ids[i + 1]} == set(pair) and (
                ids[i] != ids[i + 1] or pair[0] == pair[1]):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ----------------------------------------------------------------------------- 07.2 top_p_filter


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
        exercise="07.1",
        name="merge_pair",
        points=2,
        reference=gpt2_merge,
        solution=bpe.merge_pair,
        call=run_merge,
        arg_names=("ids", "pair", "new_id"),
        cases=MERGE_CASES,
        hint="Walk through ids with an index i: where ids[i], ids[i + 1] is the pair, append "
             "new_id and step by 2; otherwise append ids[i] and step by 1.",
        mutants=[
            Mutant("only the first occurrence", _merge_only_first,
                   "Merge every occurrence of the pair, not only the first one."),
            Mutant("steps by one after a merge", _merge_step_one,
                   "After merging ids[i], ids[i + 1], continue at i + 2: the second token of the "
                   "pair is part of the new symbol and must not be emitted again."),
            Mutant("drops the last token", _merge_drop_last,
                   "Your loop stops one token early: when the last token is not part of a merge "
                   "it must still be in the output."),
            Mutant("scans right to left", _merge_right_to_left,
                   "Scan left to right: in a run (a, a, a) the first two tokens merge, giving "
                   "(new, a), not (a, new)."),
            Mutant("unordered pair", _merge_unordered,
                   "The pair is ordered: merge (a, b), leave (b, a) alone."),
        ],
    ),
    Suite(
        exercise="07.2",
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
