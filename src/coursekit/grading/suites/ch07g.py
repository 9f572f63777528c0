"""Chapter 7, T5 notebook (07g) — exercises 07.10 ``span_corruption``, 07.9 ``shift_right`` and 07.8
``position_bias``.

The authority is the span-corruption code of Hugging Face's T5 pre-training example
(``examples/flax/language-modeling/run_t5_mlm_flax.py``: ``create_sentinel_ids`` and
``filter_input_ids``), transcribed to torch for one sequence. There, sentinel k is the id
``len(tokenizer) − 1 − k``; here it is ``sentinels[k]``, and no ``<eos>`` is appended. The targets
are the same two functions applied to the inverted mask, which is why they end with one more
sentinel exactly when the sequence ends with a kept token. ``tests/test_ch07c_t5.py`` checks it on
the published examples (the T5 paper's Figure 2, the Hugging Face T5 page).

The authority for ``shift_right`` is Hugging Face's ``T5PreTrainedModel._shift_right``, called on
a tiny ``T5Config`` whose ``decoder_start_token_id`` and ``pad_token_id`` are the case's; for
``position_bias``, ``T5Attention.compute_bias`` with the queries offset by N_k − N_q
(``past_seen_tokens`` in Transformers 5, ``cache_position`` in 4; its bucket function and lookup,
so that gradients reach the table).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

from coursekit.data import instructions
from coursekit.grading.suite import Case, Mutant, OutputError, Suite, in_dtype
from coursekit.grading.suites.ch07_readings import capitalised
from coursekit.models import t5


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
             first=0, arithmetic=False, final_in_input=False, swapped=False, final_repeats=False):
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
            closing = sentinel(max(k - 1, 0)) if final_repeats else sentinel(k)
            targets.append(closing)
            if final_in_input:
                inputs.append(closing)
        out = torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)
        return out[::-1] if swapped else out

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
         hint="Each span gets the next sentinel: <extra_id_0>, then <extra_id_1> and so on, in order."),
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

def run_span_corruption(fn, args):
    """The call, with Python lists (not tensors) named as such."""
    out = fn(*args)
    if isinstance(out, (tuple, list)) and out and all(type(o) is list for o in out):
        raise OutputError("it returned Python lists: return the input and the target as 1-D "
                          "tensors of dtype torch.long, torch.tensor(ids, dtype=torch.long)")
    return out


def observe_spans(expected, got) -> str:
    """Ids in the output that are in neither expected output: sentinels taken from somewhere
    else than sentinels[k] (both expected outputs together hold every id and every sentinel a
    right answer uses)."""
    if len(got) != len(expected) or any(a.dtype != e.dtype for a, e in zip(got, expected,
                                                                          strict=True)):
        return ""
    e_in, e_tgt = (e.tolist() for e in expected)
    a_in, a_tgt = (a.tolist() for a in got)
    if a_in == e_in and e_tgt and a_tgt == e_tgt[:-1] and e_tgt[-1] not in a_tgt:
        return ("your input is right and your target is the expected one without its final "
                "sentinel: the case's sequence ends with a kept token")
    kept = set(e_in) - set(e_tgt)
    if a_in == e_in and any(v in kept for v in a_tgt):
        shown = ", ".join(map(str, [v for v in dict.fromkeys(a_tgt) if v in kept][:4]))
        return (f"your input is right, but your target holds kept tokens too ({shown}: ids the "
                "expected input keeps and the expected target does not hold)")
    known = set(torch.cat([e.flatten() for e in expected]).tolist())
    foreign = [v for v in dict.fromkeys(torch.cat([a.flatten() for a in got]).tolist())
               if v not in known]
    if not foreign:
        return ""
    shown = ", ".join(map(str, foreign[:4])) + (", ..." if len(foreign) > 4 else "")
    return (f"your output holds ids that are in neither the expected input nor the expected "
            f"target ({shown}): neither the sequence's ids nor the sentinels this case uses")


SPAN_READINGS = (
    (r"without its final sentinel: the case's sequence ends with a kept token",
     "When the sequence ends with a kept token, the target ends with one more sentinel, the "
     "next one, sentinels[k] with k the number of spans (it marks the kept text after the last "
     "span). Test the last position's mask as a truth value (`if not noise_mask[-1]:`): a "
     "tensor element is never the object False, so `is False` is never true."),
    (r"your target holds kept tokens too",
     "The target holds only the dropped spans, each behind its sentinel, and the final "
     "sentinel: the kept text is the encoder's input alone, not written out again by the "
     "decoder (that is the BERT-style objective span corruption replaces)."),
    (r"in neither the expected input nor the expected target",
     "Every sentinel comes from the `sentinels` argument, the k-th span's as sentinels[k], "
     "counting the spans from 0 in order: not an id of your own (such as T5's 32099 − k), "
     "not sentinels[-1 − k], not sentinels[0] + k."),
)

SUITES = [
    Suite(
        exercise="07.10",
        name="span_corruption",
        points=3,
        reference=t5_span_corruption,
        solution=instructions.span_corruption,
        cases=CASES,
        call=run_span_corruption,
        arg_names=("ids", "noise_mask", "sentinels"),
        observe=capitalised(observe_spans),
        readings=SPAN_READINGS,
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
            Mutant("final sentinel in the input too", _variant(final_in_input=True),
                   "Your input ends with the target's final sentinel too: that sentinel marks, "
                   "in the target only, the kept text after the last span; the input ends with "
                   "its last kept token."),
            Mutant("input and target swapped", _variant(swapped=True),
                   "Your two outputs are swapped: return (input, target), the encoder's input "
                   "(kept tokens and one sentinel per span) first, then the target (the dropped "
                   "spans behind their sentinels)."),
            Mutant("final sentinel repeats the last span's", _variant(final_repeats=True),
                   "Your target's final sentinel repeats the last span's: it is the next one, "
                   "sentinels[k] with k the number of spans (one more sentinel than the spans "
                   "use)."),
        ],
    ),
]


# ----------------------------------------------------------------------------- 07.9 shift_right


def hf_shift_right(labels, start_id=0, pad_id=0):
    """Hugging Face's ``T5PreTrainedModel._shift_right``, unbound, on an object holding a tiny
    ``T5Config`` (``decoder_start_token_id=start_id``, ``pad_token_id=pad_id``)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the config is local
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5PreTrainedModel

    config = T5Config(vocab_size=64, d_model=4, d_kv=2, d_ff=4, num_layers=1, num_heads=2,
                      decoder_start_token_id=start_id, pad_token_id=pad_id)
    return T5PreTrainedModel._shift_right(SimpleNamespace(config=config), labels)


def _shift_variant(*, left=False, start_last=False, keep_ignored=False, ignore_start=False,
                   keep_last=False, swapped=False):
    """A wrong shift_right, one bug switched on by the arguments."""

    def variant(labels, start_id=0, pad_id=0):
        if swapped:
            start_id, pad_id = pad_id, start_id
        first = pad_id if ignore_start else start_id
        start = labels.new_full((labels.shape[0], 1), first)
        if left:
            shifted = torch.cat([labels[:, 1:], start], dim=1)
        elif start_last:
            shifted = torch.cat([labels[:, :-1], start], dim=1)
        elif keep_last:
            shifted = torch.cat([start, labels], dim=1)
        else:
            shifted = torch.cat([start, labels[:, :-1]], dim=1)
        return shifted if keep_ignored else shifted.masked_fill(shifted == -100, pad_id)

    return variant


def _labels(rows, *ids):
    """Fixed labels (a list of rows), then start_id and pad_id where given."""

    def make(g):
        return (torch.tensor(rows, dtype=torch.long), *ids)

    return make


def _random_labels(batch, length, low, high, start_id, pad_id, ignored=()):
    """Random ids in [low, high), ``ignored`` = (row, first position) pairs: -100 from there on
    (a right-padded target), or (row, position, "one") for a single -100 inside the row."""

    def make(g):
        labels = torch.randint(low, high, (batch, length), generator=g)
        for row, at, *one in ignored:
            if one:
                labels[row, at] = -100
            else:
                labels[row, at:] = -100
        return labels, start_id, pad_id

    return make


IGNORED = ("In the shifted labels, every -100 (a label the loss ignores, no id of the "
           "vocabulary) becomes pad_id and nothing else changes: find the -100s in the shifted "
           "tensor, not in the labels (they have moved one position right), and write pad_id "
           "there, not 0 or start_id.")

SHIFT_CASES = [
    Case("by hand: 2 rows of 5 labels, the default start_id = pad_id = 0 (T5's)",
         _labels([[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]])),
    Case("start_id = 2, pad_id = 0: the first position holds start_id",
         _random_labels(3, 6, 10, 50, 2, 0),
         hint="Position 0 of every row is start_id (T5 happens to use the pad id, but here "
              "they are separate arguments); the labels follow from position 1."),
    Case("right-padded labels, -100 at the end of two rows; start_id = 7, pad_id = 5",
         _random_labels(4, 7, 10, 50, 7, 5, ignored=[(0, 4), (2, 2)]), hint=IGNORED),
    Case("a single -100 inside a row, ids after it; start_id = 9, pad_id = 2",
         _random_labels(3, 8, 10, 50, 9, 2, ignored=[(1, 3, "one"), (2, 5, "one")]),
         hint=IGNORED),
    Case("a training batch: 8 rows right-padded with -100 at random lengths, start = pad = 0",
         _random_labels(8, 9, 3, 60, 0, 0, ignored=[(0, 3), (1, 8), (3, 5), (4, 1), (6, 7)]),
         hint=IGNORED),
    Case("labels holding pad_id = 4 and ids below it, no -100; start_id = 1",
         _labels([[4, 2, 4, 3, 9, 1], [0, 4, 5, 4, 4, 8]], 1, 4),
         hint="Only -100 becomes pad_id: every other label, pad_id itself and the ids below it "
              "included, is copied as it is."),
    Case("B = 1: one row of 6 labels; start_id = 3, pad_id = 1",
         _random_labels(1, 6, 10, 50, 3, 1),
         hint="With B = 1 the output is still (1, N_t): keep the batch axis, shift along the "
              "positions."),
    Case("N_t = 1: each row is the start token alone; start_id = 6, pad_id = 0",
         _random_labels(3, 1, 10, 50, 6, 0),
         hint="With N_t = 1 the one label is the last one, which the decoder never reads: each "
              "row of the output is start_id alone, and the output is (B, 1)."),
]

def observe_shift(expected, got) -> str:
    """Where an integer output is wrong: at position 0 only, or row by row one row late (a
    shift along the batch axis)."""
    e, a = expected[0], got[0]
    if a.shape != e.shape or a.dtype != e.dtype or e.dim() != 2 or torch.equal(a, e):
        return ""
    if (a == -100).any() and not (e == -100).any():
        where = tuple((a == -100).nonzero()[0].tolist())
        return (f"your output holds −100 (at {where}, and maybe elsewhere), which is no id of "
                "the vocabulary: the decoder's input must hold ids only")
    if e.shape[1] > 1 and torch.equal(a[:, 1:], e[:, 1:]):
        return (f"your output is right from position 1 on; position 0 holds "
                f"{sorted(set(a[:, 0].tolist()))}, where every row starts with "
                f"{int(e[0, 0])}, the start_id")
    if e.shape[0] > 1 and e.shape[1] > 1 and torch.equal(a[1:, :-1], e[:-1, 1:]):
        return ("row b of your output holds row b − 1 of the labels (row 0 is start_id "
                "throughout): the shift runs along the batch axis (axis 0), not along the "
                "positions (axis 1)")
    return ""


SHIFT_READINGS = (
    (r"holds −100 .* which is no id of the vocabulary",
     "Replace every −100 of the shifted labels by pad_id, "
     "shifted.masked_fill(shifted == -100, pad_id), and nothing else: find the −100s in the "
     "shifted tensor, not in the labels (they have moved one position right), and do not "
     "replace pad_id by −100 (that is what a data collator does to the labels, the other way "
     "round)."),
    (r"right from position 1 on",
     "Position 0 of every row is start_id, the argument (T5 happens to use the pad id, but here "
     "they are separate arguments): write it there, in place of whatever the shift or the "
     "roll leaves."),
    (r"along the batch axis",
     "Shift each row along its positions: shifted[:, 1:] = labels[:, :-1], with start_id in "
     "column 0 (shifted[1:] = labels[:-1] moves whole rows)."),
)

SUITES.append(
    Suite(
        exercise="07.9",
        name="shift_right",
        points=2,
        reference=hf_shift_right,
        solution=t5.shift_right,
        cases=SHIFT_CASES,
        hint="The decoder's input is each row of labels moved one position right: start_id at "
             "position 0, then the labels without their last one, with every -100 replaced by "
             "pad_id. The output has the labels' shape and dtype.",
        mutants=[
            Mutant("shifted left", _shift_variant(left=True),
                   "Your rows are shifted left: they start with the second label and end with "
                   "start_id. Teacher forcing feeds the decoder the labels moved one position "
                   "right, behind start_id, so that position t reads label t − 1 and predicts "
                   "label t."),
            Mutant("start token at the end", _shift_variant(start_last=True),
                   "Your output holds the right labels, but start_id is at the end of each row: "
                   "it goes first (position 0), and the labels follow from position 1."),
            Mutant("-100 left in place", _shift_variant(keep_ignored=True),
                   "Your output still holds -100 where the labels did: -100 only tells the loss "
                   "to ignore a position, it is no id the embedding table holds; replace it "
                   "with pad_id in the decoder's input."),
            Mutant("pad_id as the start token", _shift_variant(ignore_start=True),
                   "Your rows start with pad_id: the start token is start_id (T5 sets both to 0, "
                   "but they are separate arguments)."),
            Mutant("start_id and pad_id swapped", _shift_variant(swapped=True),
                   "Your start_id and pad_id are swapped: position 0 holds pad_id and the -100s "
                   "became start_id. Row by row: start_id first, then the labels without the "
                   "last one, each -100 replaced by pad_id."),
            Mutant("last label kept", _shift_variant(keep_last=True),
                   "Your output has N_t + 1 positions: the last label is never an input (there "
                   "is nothing after it to predict), so drop it and keep the labels' shape "
                   "(B, N_t)."),
        ],
        observe=capitalised(observe_shift),
        readings=SHIFT_READINGS,
    )
)


# ----------------------------------------------------------------------------- 07.8 position_bias


def hf_position_bias(table, n_q, n_k, bidirectional=True, max_distance=128):
    """Hugging Face's ``T5Attention.compute_bias`` for N_q new queries after N_k − N_q cached
    positions, written with its own bucket function on ``table`` so that gradients reach the
    table; ``tests/test_ch07c_position_bias.py`` checks it equals ``compute_bias`` (through
    :func:`coursekit.hf_compat.t5_compute_bias`, for Transformers 4 and 5)."""
    from transformers.models.t5.modeling_t5 import T5Attention

    past = n_k - n_q
    context = torch.arange(n_q)[:, None] + past        # the queries are the last n_q positions
    memory = torch.arange(n_k)[None, :]
    buckets = T5Attention._relative_position_bucket(memory - context, bidirectional=bidirectional,
                                                    num_buckets=table.shape[0],
                                                    max_distance=max_distance)
    return torch.nn.functional.embedding(buckets, table).permute(2, 0, 1)  # (H, N_q, N_k)


def _bias_variant(*, reversed_offset=False, top_left=False, always_bidirectional=False,
                  default_distance=False, unpermuted=False, heads_as_buckets=False,
                  inverted=False, default_buckets=False):
    """A wrong position_bias, one bug switched on by the arguments."""
    from coursekit.positional import relative_position_bucket

    def variant(table, n_q, n_k, bidirectional=True, max_distance=128):
        query = torch.arange(n_q)[:, None] + (0 if top_left else n_k - n_q)
        key = torch.arange(n_k)[None, :]
        offset = query - key if reversed_offset else key - query
        both = True if always_bidirectional else (not bidirectional if inverted else bidirectional)
        buckets = relative_position_bucket(
            offset, both,
            32 if default_buckets else table.shape[1] if heads_as_buckets else table.shape[0],
            128 if default_distance else max_distance)
        values = table[buckets]
        return values if unpermuted else values.permute(2, 0, 1)

    return variant


def _table(num_buckets, n_heads, n_q, n_k, bidirectional, max_distance, by_hand=False):
    def make(g):
        table = (torch.arange(num_buckets * n_heads, dtype=torch.float32).reshape(num_buckets, n_heads)
                 if by_hand else 0.5 * torch.randn(num_buckets, n_heads, generator=g))
        return table, n_q, n_k, bidirectional, max_distance

    return make


CACHED = ("With N_q < N_k the queries are the last N_q positions (i = N_k − N_q, ..., N_k − 1), "
          "as when a decoder with a KV cache adds new tokens to the ones it has: the offset of "
          "key j for the first new query is j − (N_k − N_q), not j.")

BIAS_CASES = [
    Case("by hand: table[b, h] = 2b + h, 8 buckets, 2 heads, N = 4, bidirectional, "
         "max_distance 16", _table(8, 2, 4, 4, True, 16, by_hand=True)),
    Case("causal, N = 5, 16 buckets, 4 heads, max_distance 32", _table(16, 4, 5, 5, False, 32),
         hint="In a decoder (bidirectional=False) every offset j − i > 0 shares bucket 0 and the "
              "past uses all the buckets: pass bidirectional on to relative_position_bucket."),
    Case("one cached decoding step: N_q = 1 new query over N_k = 9 keys, causal, 16 buckets",
         _table(16, 3, 1, 9, False, 40), hint=CACHED),
    Case("3 new queries over N_k = 10 keys, causal, 32 buckets, 2 heads",
         _table(32, 2, 3, 10, False, 128), hint=CACHED),
    Case("long offsets: N = 60, 16 buckets, max_distance 20, bidirectional",
         _table(16, 2, 60, 60, True, 20),
         hint="Offsets at or beyond max_distance all land in the last bucket of their half: pass "
              "max_distance on to relative_position_bucket (its default is 128)."),
    Case("long offsets, causal: N = 50, 12 buckets, max_distance 24, 5 heads",
         _table(12, 5, 50, 50, False, 24)),
    Case("12 heads, 32 buckets, N = 40, bidirectional, max_distance 128",
         _table(32, 12, 40, 40, True, 128)),
    Case("1 head, 6 buckets, N = 7, bidirectional, max_distance 8", _table(6, 1, 7, 7, True, 8)),
]
# the table comes in the model's dtype: the bias is returned in it
BIAS_CASES.append(in_dtype(BIAS_CASES[6], torch.float64))


def observe_bias(expected, got) -> str:
    """A bias whose values are the expected ones laid out by a reshape of the (N_q, N_k, H)
    lookup; or one none of whose values is an entry of the table the expected bias shows."""
    e, a = expected[0], got[0]
    if a.shape != e.shape or a.dtype != e.dtype or e.dim() != 3 or not a.is_floating_point():
        return ""
    e, a = e.detach(), a.detach()
    H, n_q, n_k = e.shape
    if H > 1 and torch.allclose(a, e.permute(1, 2, 0).reshape(H, n_q, n_k)):
        return ("your output holds the (N_q, N_k, H) lookup's values read out in (H, N_q, N_k) "
                "order, as a reshape or a view lays them out: heads and positions are mixed")
    def rounded(t):  # a lookup copies the table's entries: equal to a millionth
        return torch.round(t.double().flatten() * 1e6)

    if a.numel() >= 4 and not torch.isin(rounded(a), rounded(e)).any():
        return ("none of your output's values is an entry of the table that the expected bias "
                "reads (the table's rows at the buckets that occur)")
    return ""


BIAS_READINGS = (
    (r"as a reshape or a view lays them out",
     "A reshape keeps the memory order, so it does not move the heads' axis: permute the "
     "lookup's (N_q, N_k, H) to (H, N_q, N_k) with .permute(2, 0, 1) or .movedim(-1, 0)."),
    (r"of your output's values is an entry of the table",
     "Take the bias from the `table` argument, table[buckets] (or F.embedding(buckets, table)): "
     "not from a new nn.Embedding or another table of your own, whose values (and gradient) "
     "are not the model's."),
)

SUITES.append(
    Suite(
        exercise="07.8",
        name="position_bias",
        points=3,
        reference=hf_position_bias,
        solution=__import__("coursekit.positional", fromlist=["position_bias"]).position_bias,
        cases=BIAS_CASES,
        grad=("table",),
        hint="For query i (the last N_q of N_k positions) and key j, bucket the offset j − i with "
             "relative_position_bucket(offset, bidirectional, num_buckets = table.shape[0], "
             "max_distance), look the buckets up in the table (N_q, N_k, H) and put the heads "
             "first: (H, N_q, N_k).",
        mutants=[
            Mutant("offset i − j", _bias_variant(reversed_offset=True),
                   "Your offsets have the wrong sign: T5 buckets j − i, the key's position minus "
                   "the query's, so a key in the past has a negative offset."),
            Mutant("queries at the first positions", _bias_variant(top_left=True), CACHED),
            Mutant("always bidirectional", _bias_variant(always_bidirectional=True),
                   "Your buckets are the bidirectional ones even when bidirectional=False: a "
                   "decoder's bias gives the past all num_buckets buckets."),
            Mutant("max_distance left at its default", _bias_variant(default_distance=True),
                   "Pass max_distance on to relative_position_bucket: it decides which offsets "
                   "share the last bucket."),
            Mutant("heads last", _bias_variant(unpermuted=True),
                   "Your output is (N_q, N_k, H), the table lookup's order: move the heads first, "
                   "(H, N_q, N_k), as attention scores are laid out."),
            Mutant("number of buckets read from the heads' axis", _bias_variant(heads_as_buckets=True),
                   "The table is (num_buckets, H): the number of buckets is table.shape[0]."),
            Mutant("bidirectional inverted", _bias_variant(inverted=True),
                   "Your buckets are the causal ones where bidirectional=True and the "
                   "bidirectional ones where it is False: pass bidirectional on to "
                   "relative_position_bucket as it is, not negated."),
            Mutant("num_buckets left at its default", _bias_variant(default_buckets=True),
                   "Pass num_buckets = table.shape[0] to relative_position_bucket: its default, "
                   "32, is not the number of rows of this table (an index past the table's end, "
                   "or other buckets)."),
        ],
        observe=capitalised(observe_bias),
        readings=BIAS_READINGS,
    )
)
