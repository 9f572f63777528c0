"""Chapter 7, notebook 07a (GPT) — ``merge_pair`` (the BPE merge step) and ``next_token_loss``
(the causal language-model loss).

Authorities: the merge step is checked against a written-out reading of Sennrich et al.'s
algorithm (merge non-overlapping occurrences, left to right, as GPT-2's ``bpe()`` does with its
``word.index(first, i)`` scan), which ``tests/test_ch07a_gpt.py`` proves equal to the BPE
model of Hugging Face ``tokenizers`` on every case; the next-token loss against
Hugging Face's ``ForCausalLMLoss``, the loss ``GPT2LMHeadModel(..., labels=ids)`` computes (it
shifts the labels itself, and ignores the label -100, to which the padding targets are mapped).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coursekit.data import bpe
from coursekit.grading.suite import Case, Mutant, OutputError, Suite, as_container
from coursekit.grading.suites.ch07_readings import (
    NEXT_TOKEN_READINGS,
    capitalised,
    next_token_observation,
)
from coursekit.models import tiny_transformer

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
    if type(out) is not list or not all(type(i) is int for i in out):
        raise OutputError(f"merge_pair returned a {type(out).__name__}: expected a new list of "
                          "ints")
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
# ids may be a tuple (the docstring says so): code that needs a list's methods shows
MERGE_CASES += [as_container(MERGE_CASES[0], 0, tuple), as_container(MERGE_CASES[1], 0, tuple),
                as_container(Case("neither id of the pair occurs", _merge_case([1, 2, 1, 4], (3, 5))),
                             0, tuple, hint=(
                    "Return a new list even when nothing merges: here ids is a tuple with no "
                    "occurrence of the pair, and returning ids itself (or a copy of it) gives "
                    "back a tuple. Build the output with list(...) or a fresh list."))]


def _merge_only_first(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return ids[:i] + [new_id] + ids[i + 2:]  # (a tuple + a list raises, as a student's)
    return list(ids)


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


def _merge_no_bounds_check(ids, pair, new_id):
    """ids[i + 1] read without checking i + 1 < len(ids): an IndexError when the last token is
    pair[0]."""
    out, i = [], 0
    while i < len(ids):
        if ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_slice_equals_pair(ids, pair, new_id):
    """ids[i:i + 2] == pair: a list slice never equals a tuple, so a list merges nothing."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i:i + 2] == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_first_id_only(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_neighbours(ids, pair, new_id):
    """One output per neighbouring pair, zip(ids, ids[1:]): nothing skipped, the last lost."""
    neighbours = zip(ids, list(ids)[1:], strict=False)
    return [new_id if (a, b) == tuple(pair) else a for a, b in neighbours]


def _merge_keeps_first(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out += [ids[i], new_id]
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_own_new_id(ids, pair, new_id):
    """The merged token's id made up, max(ids) + 1, instead of the argument."""
    return gpt2_merge(ids, pair, max(ids) + 1)


def _merge_collapses_repeats(ids, pair, new_id):
    """Both tokens of each occurrence set to new_id, then torch.unique_consecutive: it merges
    the pair, and every run of equal tokens with it."""
    t = torch.tensor(list(ids))
    hit = torch.zeros(len(t), dtype=torch.bool)
    if len(t) > 1:
        hit[:-1] = (t[:-1] == pair[0]) & (t[1:] == pair[1])
    t = torch.where(hit | hit.roll(1), torch.tensor(new_id), t)
    return torch.unique_consecutive(t).tolist()


# ----------------------------------------------------------------------------- 07.2 next_token_loss


def hf_next_token_loss(logits, ids, pad_id=0):
    """The authority: ``GPT2LMHeadModel``'s loss with ``labels=ids`` (``ForCausalLMLoss``, which
    shifts the labels by one and ignores -100), the padding targets mapped to -100."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    labels = ids.masked_fill(ids == pad_id, -100)
    return ForCausalLMLoss(logits, labels, vocab_size=logits.shape[-1])


def _loss_case(B, N, V, *, pad_id=0, lengths=None, scale=2.0):
    """logits (B, N, V) of spread ``scale``; ids with real tokens drawn from every id but
    ``pad_id`` (0 included when it is not the padding), each row padded after ``lengths[b]``."""
    def make(g):
        logits = scale * torch.randn(B, N, V, generator=g)
        ids = torch.randint(V - 1, (B, N), generator=g)
        ids = ids + (ids >= pad_id).long()  # every id but pad_id
        if lengths is not None:
            pad = torch.arange(N)[None] >= torch.tensor(lengths)[:, None]
            ids = ids.masked_fill(pad, pad_id)
        return logits, ids, pad_id

    return make


LOSS_CASES = [
    Case("B=3, N=8, |V|=11, no padding", _loss_case(3, 8, 11)),
    Case("right-padded sentences (pad_id = 0)", _loss_case(4, 9, 10, lengths=[9, 5, 7, 3]),
         hint="A target that is padding (ids[:, t+1] == pad_id) adds nothing to the loss: leave "
              "it out of the sum and out of the count (ignore_index=pad_id)."),
    Case("pad_id = 3, and the id 0 is a real token", _loss_case(3, 8, 9, pad_id=3,
                                                                  lengths=[8, 4, 6]),
         hint="Skip the targets equal to the pad_id argument, whatever its value (here 3), and "
              "only those: 0 is then an id like any other."),
    Case("B=1, N=10, |V|=7", _loss_case(1, 10, 7)),
    Case("N=2: one target per sentence", _loss_case(5, 2, 8),
         hint="Position t predicts the next id: with N=2 the logits of position 0 are scored "
              "against ids[:, 1], and the last position's logits predict nothing."),
    Case("logits of magnitude about 300", _loss_case(2, 7, 12, lengths=[7, 5], scale=100.0),
         hint="With logits this large, exp overflows and the softmax of a wrong id underflows "
              "to 0, whose log is −∞: take log-probabilities with F.log_softmax (or use "
              "F.cross_entropy), which subtracts the largest logit first."),
    Case("a sentence with only padding after its first token",
         _loss_case(4, 7, 9, lengths=[7, 1, 5, 6]),
         hint="Average over every non-padding target of the batch at once: a sentence whose "
              "targets are all padding adds nothing, to the sum or to the count."),
]


def _loss_variant(*, shift=1, ignore=True, reduction="mean"):
    """A wrong ``next_token_loss``, one bug switched on by the arguments."""

    def next_token_loss(logits, ids, pad_id=0):
        if shift == 1:
            z, y = logits[:, :-1], ids[:, 1:]
        elif shift == -1:
            z, y = logits[:, 1:], ids[:, :-1]
        else:
            z, y = logits, ids
        return F.cross_entropy(z.flatten(0, 1), y.flatten(), reduction=reduction,
                               ignore_index=pad_id if ignore else -100)

    return next_token_loss


def _loss_per_sentence(logits, ids, pad_id=0):
    """The mean over each sentence's targets, then over the sentences."""
    y = ids[:, 1:]
    nll = -F.log_softmax(logits[:, :-1], dim=-1).gather(-1, y[..., None])[..., 0]
    keep = (y != pad_id).float()
    return ((nll * keep).sum(1) / keep.sum(1)).mean()


LOSS_MUTANTS = [
    Mutant("no shift", _loss_variant(shift=0),
           "You score position t's logits against ids[:, t], the token the model has just read. "
           "Position t predicts the next one: compare logits[:, :-1] with ids[:, 1:]."),
    Mutant("shifted the wrong way", _loss_variant(shift=-1),
           "You score position t + 1's logits against ids[:, t], the token before it. Shift the "
           "other way: logits[:, :-1] predict ids[:, 1:]."),
    Mutant("padding not ignored", _loss_variant(ignore=False),
           "Your loss counts the padding targets. Leave out every target equal to pad_id "
           "(F.cross_entropy's ignore_index=pad_id): padding is not text to predict."),
    Mutant("sum instead of mean", _loss_variant(reduction="sum"),
           "Your loss is the sum of the targets' cross-entropies; it is their mean over the "
           "non-padding targets (a sum would make the step size grow with the batch and the "
           "length)."),
    Mutant("mean per sentence, then over sentences", _loss_per_sentence,
           "You average within each sentence and then over the sentences, which weighs a short "
           "sentence's targets more than a long one's (and divides by 0 for a sentence with no "
           "target). Take one mean over every non-padding target of the batch at once."),
]

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
            Mutant("no bounds check", _merge_no_bounds_check,
                   "Your code reads ids[i + 1] when i is the last position (an IndexError when "
                   "the last token is pair[0]): check i + 1 < len(ids) before comparing the next "
                   "token, and keep the last token when it is not merged."),
            Mutant("slice compared with the tuple pair", _merge_slice_equals_pair,
                   "Your code merges nothing when ids is a list: a slice ids[i:i + 2] is a list, "
                   "and a list never equals the tuple pair. Compare token by token, ids[i] == "
                   "pair[0] and ids[i + 1] == pair[1] (or tuple(ids[i:i + 2]) == tuple(pair))."),
            Mutant("second id not compared", _merge_first_id_only,
                   "You merge wherever ids[i] is pair[0], whatever follows it: check the second "
                   "id too, ids[i + 1] == pair[1]."),
            Mutant("one output per neighbouring pair", _merge_neighbours,
                   "Your output has one entry per neighbouring pair (zip(ids, ids[1:])): the last "
                   "token is lost, and after a merge the pair's second token comes out again. "
                   "Walk with an index that skips both tokens after a merge (i += 2) and steps "
                   "by 1 otherwise, until the last token."),
            Mutant("first id kept next to new_id", _merge_keeps_first,
                   "Your output keeps the pair's first id next to new_id: a merge replaces both "
                   "ids of the pair by the one id new_id."),
            Mutant("new_id made up", _merge_own_new_id,
                   "Your merged token is not the `new_id` argument (you make one up, such as "
                   "max(ids) + 1): the caller chooses the id, the next free one of its "
                   "vocabulary, which the ids need not show."),
            Mutant("collapses repeats", _merge_collapses_repeats,
                   "Your code also collapses runs of equal tokens that are not the pair (as "
                   "torch.unique_consecutive does): equal neighbours are separate tokens, and "
                   "only an occurrence of the pair becomes one. Build the output token by token."),
        ],
    ),
    Suite(
        exercise="07.2",
        name="next_token_loss",
        points=2,
        reference=hf_next_token_loss,
        solution=tiny_transformer.next_token_loss,
        arg_names=("logits", "ids", "pad_id"),
        grad=("logits",),
        cases=LOSS_CASES,
        hint="Drop the last position's logits and the first id (logits[:, :-1] predict "
             "ids[:, 1:]), flatten (B, N − 1) into one axis, and take the mean cross-entropy "
             "over the targets that are not pad_id.",
        mutants=LOSS_MUTANTS,
        # the gradient with respect to the logits says which positions are scored, against
        # which ids and with what weight: what a wrong shift or a wrong mean changes
        observe=capitalised(next_token_observation),
        readings=NEXT_TOKEN_READINGS,
    ),
]
