"""Text-to-text data for T5 (Chapter 7): span corruption and instruction-phrased tasks.

Both are built on the synthetic language (:mod:`coursekit.data.language`), word by word.

**Span corruption** (Raffel et al., 2020, §3.1.4): drop about 15 % of a text's tokens in
spans of mean length 3; the encoder reads the text with each dropped span replaced by one
sentinel ``<extra_id_k>``, the decoder writes the dropped spans, each behind its sentinel::

    the old dog was hungry because its fur was dry .
    input : the old dog was <extra_id_0> its fur was dry .
    target: <extra_id_0> hungry because <extra_id_1>

The language's sentences are 10 to 17 tokens long, so :func:`random_spans_noise_mask` drops
round(0.15 · N) = 2 tokens (3 at N = 17) in one span: only ``<extra_id_0>`` and ``<extra_id_1>``
occur in the book's pre-training. Longer inputs get several spans (exercise 07.10's cases).

**Instruction tasks** (in the spirit of FLAN, Wei et al., 2022; Chung et al., 2022): five tasks
read from the grammar, each asked with five phrasings (*frames*) that share their words across
tasks::

    plural       "what is the plural of dog ?"                        -> dogs
    singular     "give the singular of : buses"                       -> bus
    category     "rabbits , category please"                          -> animal
    antecedent   "tell me the antecedent for the dog near the cars ..." -> cars
    verb         "verb : the dogs near the car were hungry ..."         -> were

and a sixth, ``subject`` (the sentence's first noun, which the verb agrees with), that can be
held out of training entirely.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from coursekit.data.language import LEXICON, Sentence, noun_info, words
from coursekit.data.vocab import Vocab

N_SENTINELS = 16
SENTINELS = tuple(f"<extra_id_{k}>" for k in range(N_SENTINELS))

# ----------------------------------------------------------------------------- span corruption


def random_spans_noise_mask(length: int, noise_density: float = 0.15,
                            mean_noise_span_length: float = 3.0,
                            generator: torch.Generator | None = None) -> Tensor:
    """T5's noise mask: (length,) bool, True at the tokens to drop.

    round(length · density) noise tokens (at least 1) in round(noise / mean span) spans (at
    least 1), each span and each gap between them of random length; the mask starts with kept
    tokens and alternates kept, noise, kept, noise ... as T5's ``random_spans_noise_mask`` does.
    T5's always *ends* with a noise span too, which is harmless over 512 tokens but would cut
    every short sentence of this book at its end: here a last run of kept tokens may follow.
    """
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    num_kept = length - num_noise

    def segment(n_items: int, n_segments: int) -> list[int]:
        # n_items split into n_segments non-empty parts at random
        cuts = torch.randperm(n_items - 1, generator=generator)[:n_segments - 1].add(1).sort()[0]
        bounds = [0, *cuts.tolist(), n_items]
        return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]

    num_spans = min(num_spans, num_kept)
    noise_lengths = segment(num_noise, num_spans) + [0]
    kept_lengths = segment(num_kept + 1, num_spans + 1)  # one more gap, after the last span...
    kept_lengths[-1] -= 1  # ...which may be empty
    mask: list[bool] = []
    for kept, noise in zip(kept_lengths, noise_lengths, strict=True):
        mask += [False] * kept + [True] * noise
    return torch.tensor(mask)


def span_corruption(ids: Tensor, noise_mask: Tensor, sentinels: Tensor) -> tuple[Tensor, Tensor]:
    """The encoder input and decoder target of T5's span corruption (without ``<eos>``).

    ids: (N,) token ids; noise_mask: (N,) bool, True at dropped tokens, False at ``ids[0]``;
    sentinels: (S,) ids, ``sentinels[k]`` is ``<extra_id_k>``.
    input: the kept tokens, each maximal run of dropped tokens replaced by the next sentinel;
    target: each run behind its sentinel, then one more sentinel when the sequence ends with a
    kept token (the target marks every gap of the input) -> input (N_in,), target (N_tgt,).
    """
    inputs: list[int] = []
    targets: list[int] = []
    k = 0
    for i in range(len(ids)):
        if not noise_mask[i]:
            inputs.append(int(ids[i]))
            continue
        if i == 0 or not noise_mask[i - 1]:  # a span starts: one sentinel in both
            inputs.append(int(sentinels[k]))
            targets.append(int(sentinels[k]))
            k += 1
        targets.append(int(ids[i]))
    if len(ids) and not noise_mask[-1]:
        targets.append(int(sentinels[k]))
    return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)


# ----------------------------------------------------------------------------- instruction tasks

FRAMES = (
    "{t} : {x}",
    "what is the {t} of {x} ?",
    "{x} , {t} please",
    "give the {t} of : {x}",
    "tell me the {t} for {x}",
)
TASKS = ("plural", "singular", "category", "antecedent", "verb", "subject")
ANSWER_WORDS = tuple(LEXICON)  # the four categories


def instruction_vocab() -> Vocab:
    """The language's lexicon, the frames' and tasks' words, answers, and the sentinels."""
    frame_words = [w for f in FRAMES for w in f.split() if not w.startswith("{")]
    return Vocab([*words(), *frame_words, *TASKS, *ANSWER_WORDS, *SENTINELS])


@dataclass(frozen=True)
class Example:
    task: str
    frame: int
    prompt: tuple[str, ...]
    answer: tuple[str, ...]


def task_item(task: str, rng: random.Random, sentences: Sequence[Sentence]
              ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """One (content x, answer) pair of ``task``: a noun for the word tasks, a sentence drawn
    from ``sentences`` for the others."""
    if task in ("plural", "singular", "category"):
        category, (singular, plural) = rng.choice([(c, pair) for c, (ns, _) in LEXICON.items()
                                                   for pair in ns])
        if task == "plural":
            return (singular,), (plural,)
        if task == "singular":
            return (plural,), (singular,)
        return (rng.choice((singular, plural)),), (category,)
    s = rng.choice(sentences)
    if task == "antecedent":
        return s.tokens, (s.tokens[s.antecedent],)
    if task == "subject":
        return s.tokens, (s.tokens[s.subject],)
    if task == "verb":  # the first was|were: it agrees with the subject, not the attractor
        return s.tokens, (s.tokens[s.verb],)
    raise ValueError(f"unknown task {task!r}: choose one of {TASKS}")


def answer(task: str, x: Sequence[str], sentences: Sequence[Sentence] = ()
           ) -> tuple[str, ...] | None:
    """The answer of ``task`` for the content ``x``, or None where the task does not apply to it:
    a word task on anything but one noun, ``plural`` of a plural or ``singular`` of a singular
    noun, a sentence task on a sentence not in ``sentences``. Asking one task's content in
    another task's frame (notebook 07g) needs both tasks' answers."""
    x = tuple(x)
    if task in ("plural", "singular", "category"):
        if len(x) != 1 or x[0] not in noun_info():
            return None
        category, plural = noun_info()[x[0]]
        if task == "category":
            return (category,)
        if plural == (task == "plural"):
            return None
        pair = next(pair for pair in LEXICON[category][0] if x[0] in pair)
        return (pair[task == "plural"],)
    if task not in ("antecedent", "subject", "verb"):
        raise ValueError(f"unknown task {task!r}: choose one of {TASKS}")
    s = next((s for s in sentences if s.tokens == x), None)
    if s is None:
        return None
    return (s.tokens[{"antecedent": s.antecedent, "subject": s.subject, "verb": s.verb}[task]],)


def phrase(task: str, frame: int, x: Sequence[str]) -> tuple[str, ...]:
    """The prompt: frame ``frame`` of :data:`FRAMES` with the task's word and the content."""
    out: list[str] = []
    for w in FRAMES[frame].split():
        out += [task] if w == "{t}" else list(x) if w == "{x}" else [w]
    return tuple(out)


def make_examples(n: int, tasks: dict[str, Sequence[int]], sentences: Sequence[Sentence],
                  seed: int = 0) -> list[Example]:
    """``n`` examples: task and frame drawn uniformly from ``tasks`` (task -> allowed frames)."""
    rng = random.Random(seed)
    pairs = [(t, f) for t, frames in tasks.items() for f in frames]
    out = []
    for _ in range(n):
        task, frame = rng.choice(pairs)
        x, answer = task_item(task, rng, sentences)
        out.append(Example(task, frame, phrase(task, frame, x), answer))
    return out


def encode_pairs(vocab: Vocab, prompts: Sequence[Sequence[str]],
                 answers: Sequence[Sequence[str]] | None = None,
                 ) -> tuple[Tensor, Tensor | None]:
    """Right-padded encoder ids (B, N_s) and labels (B, N_t) = answer + ``<eos>``, with -100
    at padding (ignored by the loss), or None without answers."""
    input_ids, _ = vocab.pad_batch(prompts)
    if answers is None:
        return input_ids, None
    labels, lengths = vocab.pad_batch(answers, eos=True)
    labels[torch.arange(labels.shape[1]) >= lengths[:, None]] = -100
    return input_ids, labels


def span_corruption_batch(vocab: Vocab, sentences: Sequence[Sentence], generator: torch.Generator,
                          noise_density: float = 0.15, mean_noise_span_length: float = 3.0,
                          corrupt: Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
                          = span_corruption) -> tuple[Tensor, Tensor]:
    """Span-corrupted sentences -> encoder ids (B, N_s) and labels (B, N_t) (with ``<eos>``,
    -100 at padding). ``corrupt`` is :func:`span_corruption` or the reader's own (exercise 07.10)."""
    sentinels = torch.tensor(vocab.encode(SENTINELS))
    inputs, targets = [], []
    for s in sentences:
        ids = torch.tensor(vocab.encode(s.tokens))
        mask = random_spans_noise_mask(len(ids), noise_density, mean_noise_span_length, generator)
        x, y = corrupt(ids, mask, sentinels)
        inputs.append([vocab.itos[i] for i in x.tolist()])
        targets.append([vocab.itos[i] for i in y.tolist()])
    return encode_pairs(vocab, inputs, targets)
