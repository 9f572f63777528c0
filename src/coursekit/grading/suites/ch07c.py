"""Chapter 7, T5 notebook (07c) — exercise 07.4, ``span_corruption``.

The authority is the span-corruption code of Hugging Face's T5 pre-training example
(``examples/flax/language-modeling/run_t5_mlm_flax.py``: ``create_sentinel_ids`` and
``filter_input_ids``), transcribed to torch for one sequence. There, sentinel k is the id
``len(tokenizer) − 1 − k``; here it is ``sentinels[k]``, and no ``<eos>`` is appended. The targets
are the same two functions applied to the inverted mask, which is why they end with one more
sentinel exactly when the sequence ends with a kept token. ``tests/test_ch07c_t5.py`` checks it on
the published examples (the T5 paper's Figure 2, the Hugging Face T5 page).
"""

from __future__ import annotations

import torch

from coursekit.data import instructions
from coursekit.grading.suite import Case, Mutant, Suite


def t5_span_corruption(ids, noise_mask, sentinels):
    """run_t5_mlm_flax.py's ``create_sentinel_ids`` + ``filter_input_ids``, for one sequence."""

    def create_sentinel_ids(mask):
        mask = mask.long()
        start_indices = mask - torch.roll(mask, 1) * mask  # 1 where a span starts
        start_indices[0] = mask[0]
        sentinel_ids = torch.where(start_indices != 0, torch.cumsum(start_indices, 0),
                                   start_indices)  # span number, from 1, at each start
        sentinel_ids -= mask - start_indices  # -1 inside a span: dropped below
        return sentinel_ids

    def filter_input_ids(sentinel_ids):
        full = torch.where(sentinel_ids > 0, sentinels[(sentinel_ids - 1).clamp(min=0)], ids)
        return full[sentinel_ids >= 0]

    return (filter_input_ids(create_sentinel_ids(noise_mask)),
            filter_input_ids(create_sentinel_ids(~noise_mask)))


def _variant(*, reuse=False, per_token=False, final="auto", after=False, keep_noise=False,
             first=0, arithmetic=False):
    """A wrong span corruption, one bug switched on by the arguments."""

    def variant(ids, noise_mask, sentinels):
        def sentinel(k):
            k = 0 if reuse else k + first
            return int(sentinels[0]) + k if arithmetic else int(sentinels[k])

        runs: list[tuple[bool, list[int]]] = []  # (dropped, tokens), maximal runs
        for token, noise in zip(ids.tolist(), noise_mask.tolist(), strict=True):
            if runs and runs[-1][0] == noise and not (per_token and noise):
                runs[-1][1].append(token)
            else:
                runs.append((noise, [token]))
        inputs, targets, k = [], [], 0
        for noise, tokens in runs:
            if not noise:
                inputs += tokens
                continue
            s = sentinel(k)
            k += 1
            inputs += [s] + (tokens if keep_noise else [])
            targets += tokens + [s] if after else [s] + tokens
        ends_kept = len(ids) > 0 and not bool(noise_mask[-1])
        if final == "always" or (final == "auto" and ends_kept):
            targets.append(sentinel(k))
        return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)

    return variant


def _case(ids, noise, sentinels=None):
    """Fixed ids and mask (lists); sentinels default to 100, 101, ..."""

    def make(g):
        s = torch.arange(100, 100 + instructions.N_SENTINELS) if sentinels is None \
            else torch.tensor(sentinels)
        return torch.tensor(ids, dtype=torch.long), torch.tensor(noise, dtype=torch.bool), s

    return make


def _random_case(length, density, mean_span):
    def make(g):
        ids = torch.randint(3, 90, (length,), generator=g)
        mask = instructions.random_spans_noise_mask(length, density, mean_span, generator=g)
        sentinels = 127 - torch.arange(instructions.N_SENTINELS)  # counting down, as in T5
        return ids, mask, sentinels

    return make


# "thank you for inviting me to your party last week ." (Raffel et al., 2020, Figure 2)
PAPER = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
PAPER_NOISE = [0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0]

CASES = [
    Case("by hand: the paper's example, 'for inviting' and 'last' dropped",
         _case(PAPER, PAPER_NOISE)),
    Case("the sequence ends with a dropped span: no final sentinel",
         _case([5, 6, 7, 8, 9, 10], [0, 0, 1, 0, 1, 1]),
         hint="The target's last sentinel marks the kept tokens after the last span; when the "
              "sequence ends inside a span there are none, and no sentinel follows it."),
    Case("spans of one token, one kept token apart", _case([5, 6, 7, 8, 9, 10, 11],
                                                         [0, 1, 0, 1, 0, 1, 0]),
         hint="Each span gets the next sentinel: <extra_id_0>, <extra_id_1>, ... in order."),
    Case("nothing dropped", _case([5, 6, 7, 8], [0, 0, 0, 0]),
         hint="With no noise the input is the sequence itself and the target a lone "
              "<extra_id_0> (the one gap of the input: the end)."),
    Case("one long span", _case([5, 6, 7, 8, 9, 10, 11, 12], [0, 0, 1, 1, 1, 1, 1, 0]),
         hint="A run of dropped tokens is one span: one sentinel in the input, however long."),
    Case("sentinel ids counting down from the end of the vocabulary (T5's layout)",
         _case(PAPER, PAPER_NOISE, sentinels=[127 - k for k in range(instructions.N_SENTINELS)]),
         hint="Take the k-th sentinel's id from sentinels[k]; T5's ids count down from the end "
              "of the vocabulary, so sentinels[0] + k is not <extra_id_k>."),
    Case("repeated tokens: 5 5 5 6 6 7 7 7, a span inside each run",
         _case([5, 5, 5, 6, 6, 7, 7, 7], [0, 1, 1, 0, 1, 1, 0, 0]),
         hint="Equal neighbouring ids are still separate tokens: spans come from the noise mask "
              "alone, never from the ids (torch.unique_consecutive on the ids merges real "
              "repeats)."),
    Case("40 tokens, 30 % noise in spans of mean length 3", _random_case(40, 0.3, 3.0)),
    Case("25 tokens, 15 % noise in spans of mean length 2", _random_case(25, 0.15, 2.0)),
]

SUITES = [
    Suite(
        exercise="07.4",
        name="span_corruption",
        points=3,
        reference=t5_span_corruption,
        solution=instructions.span_corruption,
        cases=CASES,
        hint="Input: kept tokens, each run of dropped tokens replaced by one new sentinel. "
             "Target: each run behind its own sentinel, then a last sentinel when the sequence "
             "ends with a kept token.",
        mutants=[
            Mutant("the same sentinel for every span", _variant(reuse=True),
                   "Every span gets <extra_id_0>: number them, sentinels[0] for the first span, "
                   "sentinels[1] for the second, ..., so the target says which gap each span "
                   "fills."),
            Mutant("one sentinel per dropped token", _variant(per_token=True),
                   "You give every dropped token its own sentinel. Consecutive dropped tokens "
                   "form one span and share one sentinel: that is what makes the input shorter."),
            Mutant("no final sentinel in the target", _variant(final="never"),
                   "Your target stops after the last span. When kept tokens follow it, T5's "
                   "target ends with one more sentinel (the paper's '<X> for inviting <Y> last "
                   "<Z>')."),
            Mutant("a final sentinel even after a trailing span", _variant(final="always"),
                   "Your target always ends with an extra sentinel. It marks the kept tokens "
                   "after the last span, so it is there only when the sequence ends with a kept "
                   "token."),
            Mutant("sentinel after its span in the target", _variant(after=True),
                   "In the target each sentinel comes before its span ('<X> for inviting'), "
                   "not after it."),
            Mutant("dropped tokens left in the input", _variant(keep_noise=True),
                   "Your input still holds the dropped tokens next to the sentinel: the encoder "
                   "must not see them, replace the whole span with its sentinel."),
            Mutant("sentinels numbered from 1", _variant(first=1),
                   "The first span's sentinel is <extra_id_0> = sentinels[0], not sentinels[1]."),
            Mutant("sentinel ids as sentinels[0] + k", _variant(arithmetic=True),
                   "You compute the k-th sentinel as sentinels[0] + k; look it up as "
                   "sentinels[k] (T5's sentinel ids count down from the end of the vocabulary)."),
        ],
    ),
]
