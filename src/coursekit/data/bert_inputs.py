"""BERT's inputs over the synthetic language: word tokens with ``[CLS]``/``[SEP]``, masked-language-
model corruption (the 80/10/10 rule), and a sentence-level task for fine-tuning.

One sentence becomes ``[CLS] w_1 ... w_n [SEP]`` (segment 0), right-padded with ``[PAD]``; a pair
is ``[CLS] A [SEP] B [SEP]`` with segment ids 0 over ``[CLS] A [SEP]`` and 1 over ``B [SEP]``.
The vocabulary is :class:`coursekit.data.vocab.Vocab` over the language's fixed lexicon, so its
``<pad>`` (id 0) is BERT's ``[PAD]``; ``<bos>``/``<eos>`` are never used here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from coursekit.data.language import COPULAS, PRONOUNS, Sentence, words
from coursekit.data.vocab import Vocab

CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
IGNORE = -100  # the label of a position the loss skips (``F.cross_entropy``'s ignore_index)


def bert_vocab() -> Vocab:
    """``<pad>`` (= [PAD]) 0, ``<bos>`` 1, ``<eos>`` 2, [CLS] 3, [SEP] 4, [MASK] 5, then the words."""
    return Vocab([CLS, SEP, MASK, *words()])


VOCAB = bert_vocab()
VOCAB_SIZE = len(VOCAB)
CLS_ID, SEP_ID, MASK_ID = VOCAB.stoi[CLS], VOCAB.stoi[SEP], VOCAB.stoi[MASK]
N_SPECIAL = MASK_ID + 1  # ids below this are special tokens; the words follow


def encode(sentences: Sequence[Sequence[str]], pairs: Sequence[Sequence[str]] | None = None,
           vocab: Vocab = VOCAB) -> tuple[Tensor, Tensor, Tensor]:
    """Token lists -> ids (B, N), segments (B, N), special-token mask (B, N) (True at [CLS],
    [SEP], [PAD]). With ``pairs``, row b is ``[CLS] A_b [SEP] B_b [SEP]``."""
    rows, segs = [], []
    for b, tokens in enumerate(sentences):
        row = [CLS_ID, *vocab.encode(tokens), SEP_ID]
        seg = [0] * len(row)
        if pairs is not None:
            second = [*vocab.encode(pairs[b]), SEP_ID]
            row, seg = row + second, seg + [1] * len(second)
        rows.append(row)
        segs.append(seg)
    N = max(len(r) for r in rows)
    ids = torch.full((len(rows), N), vocab.pad_id, dtype=torch.long)
    segments = torch.zeros((len(rows), N), dtype=torch.long)
    for b, (row, seg) in enumerate(zip(rows, segs, strict=True)):
        ids[b, :len(row)] = torch.tensor(row)
        segments[b, :len(seg)] = torch.tensor(seg)
    return ids, segments, ids < N_SPECIAL


def mask_tokens(ids: Tensor, special: Tensor, mask_id: int, vocab_size: int,
                generator: torch.Generator | None = None, p: float = 0.15,
                ) -> tuple[Tensor, Tensor]:
    """BERT's masked-language-model corruption (the 80/10/10 rule of Devlin et al., 2019, §3.1).

    Each non-special position is picked with probability p, independently, as Hugging Face's
    ``DataCollatorForLanguageModeling`` does (so a sentence may have no position picked, or
    more than 15 % of them). BERT's own ``create_pretraining_data.py`` picks a fixed count
    instead: ``min(max_predictions_per_seq, max(1, round(len(tokens) * 0.15)))`` positions of
    each sequence (its tokens counted with [CLS] and [SEP], which are never picked), the first
    ones of a shuffled list. Of the picked positions, 80 % become ``[MASK]``, 10 % a token
    drawn uniformly from the whole vocabulary, 10 % stay as they are; the model must recover the
    original at every picked position.

    ids: (B, N) long; special: (B, N) bool, True where a position may never be picked
    ([CLS], [SEP], [PAD]) -> inputs (B, N), labels (B, N): the original id at the picked
    positions, -100 (ignored by the loss) everywhere else. ``ids`` is not modified.
    """
    rand = torch.rand(ids.shape, generator=generator)
    picked = (rand < p) & ~special
    labels = torch.where(picked, ids, IGNORE)
    # One more uniform draw splits the picked positions 80 / 10 / 10.
    draw = torch.rand(ids.shape, generator=generator)
    to_mask = picked & (draw < 0.8)
    to_random = picked & (draw >= 0.8) & (draw < 0.9)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    inputs = torch.where(to_mask, mask_id, ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


# ----------------------------------------------------------------------------- sentence pairs


def split(sentence: Sentence) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A sentence cut before its pronoun: ("the dog near the buses was hungry because",
    "their wheels were rusty ."). Which noun B's pronoun refers to, what it owns and how it is
    (good or bad) all depend on A, so a B taken from another sentence usually does not fit."""
    return sentence.tokens[:sentence.pronoun], sentence.tokens[sentence.pronoun:]


def pair_position(sentence: Sentence, index: int) -> int:
    """Where token ``index`` of ``sentence`` sits in ``[CLS] A [SEP] B [SEP]``."""
    return index + 1 + (index >= sentence.pronoun)


def nsp_pairs(sentences: Sequence[Sentence], rng: random.Random,
              ) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]], Tensor]:
    """Next-sentence prediction over split sentences: each A is followed by its own B (label 1,
    IsNext) or, half of the time, by the B of a sentence drawn uniformly from ``sentences``
    (label 0, NotNext).

    The draw does not exclude the sentence itself, nor other sentences with the same ending
    (the BERT notebook's 20,000 training sentences have 128 distinct B's), so a NotNext pair is now
    and then the true continuation word for word: 2 of the 255 NotNext pairs of the notebook's
    held-out pairs, about 2 % of those in its training batches of 64. They are a few of the
    NotNext pairs whose B happens to fit A (the grammar accepts A + B), which no model can tell
    from IsNext. (BERT's own ``create_pretraining_data.py`` takes a NotNext B from another
    document.) The draw is kept as it is because the shipped checkpoint (``bert_pretrained``)
    was trained and measured on it: excluding the true continuation changes every batch, and a
    model retrained that way learned the pronoun at another step than the one the notebook shows.
    """
    firsts, seconds, labels = [], [], []
    for s in sentences:
        first, second = split(s)
        is_next = rng.random() < 0.5
        if not is_next:
            second = split(sentences[rng.randrange(len(sentences))])[1]
        firsts.append(first)
        seconds.append(second)
        labels.append(int(is_next))
    return firsts, seconds, torch.tensor(labels)


# ----------------------------------------------------------------------------- word types

WORD_TYPES = ("subject noun", "verb (agreement)", "pronoun", "possessed noun", "state 1",
              "state 2")


def word_type_positions(sentence: Sentence) -> dict[str, int]:
    """Word type -> its index in ``sentence.tokens`` (the annotated slots of the grammar)."""
    return {"subject noun": sentence.subject, "verb (agreement)": sentence.verb,
            "pronoun": sentence.pronoun, "possessed noun": sentence.possessed,
            "state 1": sentence.predicate, "state 2": sentence.possessed + 2}


# ----------------------------------------------------------------------------- fine-tuning task

CORRUPTIONS = ("verb", "pronoun", "second verb")
_FLIP = {**{w: COPULAS[not p] for p, w in COPULAS.items()},
         **{w: PRONOUNS[not p] for p, w in PRONOUNS.items()}}


def corrupt(sentence: Sentence, kind: str) -> tuple[str, ...]:
    """The sentence made ungrammatical by one flip: ``"verb"`` (the first was/were no longer
    agrees with the subject), ``"pronoun"`` (its/their no longer agrees with its antecedent, and
    the other noun owns nothing of POSS's kind), ``"second verb"`` (disagrees with POSS)."""
    where = {"verb": sentence.verb, "pronoun": sentence.pronoun,
             "second verb": sentence.possessed + 1}[kind]
    tokens = list(sentence.tokens)
    tokens[where] = _FLIP[tokens[where]]
    return tuple(tokens)


@dataclass
class AcceptabilityData:
    """Sentences labelled 1 (grammatical) or 0 (one flip away from it), half and half."""

    tokens: list[tuple[str, ...]]
    labels: Tensor  # (B,) long

    def tensors(self) -> tuple[Tensor, Tensor, Tensor]:
        """-> ids (B, N), segments (B, N), labels (B,)."""
        ids, segments, _ = encode(self.tokens)
        return ids, segments, self.labels


def acceptability(sentences: Sequence[Sentence], seed: int = 0) -> AcceptabilityData:
    """Each sentence as it is (label 1) or corrupted by a random flip (label 0), at random."""
    rng = random.Random(seed)
    tokens, labels = [], []
    for s in sentences:
        good = rng.random() < 0.5
        tokens.append(s.tokens if good else corrupt(s, rng.choice(CORRUPTIONS)))
        labels.append(int(good))
    return AcceptabilityData(tokens, torch.tensor(labels))
