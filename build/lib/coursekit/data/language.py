"""A small synthetic language with agreement and pronoun reference, generated from a grammar.

Every sentence follows one template; the parts in brackets are optional::

    [ADV ,] the [ADJ] N1 [PREP the [ADJ] N2] was|were STATE1 CONJ its|their POSS was|were STATE2 .

    "the old dog near the buses was hungry because their wheels were rusty ."

Its rules, which the generator annotates so that a model's attention can be scored against them:

- *pronoun reference*: ``its|their`` refers to N1 or, when there is one, to N2 (chosen at random).
  N1 and N2 always differ in number, so the pronoun's number says which noun it refers to;
- *the possessed noun* POSS belongs to the referent's category (a dog has a tail, a bus has
  wheels), so predicting the word after the pronoun needs the antecedent;
- *subject–verb agreement*: the first ``was|were`` agrees with the subject N1, never with the
  attractor N2 that may sit between them; the second agrees with POSS;
- *selection*: STATE1 describes N1 and STATE2 describes POSS; each is one of its noun's category's
  states (animals are playful or hungry, vehicles fast or rusty);
- *polarity*: the two states are both good or both bad ("the dog was playful because its fur was
  fluffy", "the bus was rusty and its engine was noisy"), so STATE2 depends on STATE1 as well.

N1 and N2 come from different categories. The lexicon is fixed, so the vocabulary is the same for
every seed; a seed fixes the sentences.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from coursekit.data.vocab import Vocab

# category -> (nouns as (singular, plural), possessions as (word, is_plural))
LEXICON: dict[str, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, bool], ...]]] = {
    "building": (
        (("restaurant", "restaurants"), ("hotel", "hotels"), ("museum", "museums"),
         ("library", "libraries")),
        (("roof", False), ("walls", True), ("garden", False), ("windows", True)),
    ),
    "animal": (
        (("dog", "dogs"), ("cat", "cats"), ("horse", "horses"), ("rabbit", "rabbits")),
        (("tail", False), ("ears", True), ("fur", False), ("paws", True)),
    ),
    "vehicle": (
        (("car", "cars"), ("truck", "trucks"), ("bus", "buses"), ("boat", "boats")),
        (("engine", False), ("wheels", True), ("driver", False), ("seats", True)),
    ),
    "plant": (
        (("tree", "trees"), ("bush", "bushes"), ("rose", "roses"), ("fern", "ferns")),
        (("trunk", False), ("leaves", True), ("bark", False), ("roots", True)),
    ),
}
PREDICATES = {  # category -> (good states, bad states): "the dog was playful", "... was hungry"
    "building": (("modern", "crowded"), ("empty", "haunted")),
    "animal": (("playful", "fluffy"), ("hungry", "sleepy")),
    "vehicle": (("fast", "electric"), ("rusty", "noisy")),
    "plant": (("green", "blooming"), ("dry", "thorny")),
}
ADJECTIVES = ("old", "new", "small", "big")  # attributive, any noun: "the old dog"
PREPOSITIONS = ("near", "behind", "beside", "opposite")
ADVERBS = ("yesterday", "today", "sadly", "luckily")
CONJUNCTIONS = ("because", "and", "so")
PRONOUNS = {False: "its", True: "their"}  # keyed by "the antecedent is plural"
COPULAS = {False: "was", True: "were"}
FUNCTION_WORDS = ("the", ",", ".")
MAX_TOKENS = 17  # ADV , the ADJ N1 PREP the ADJ N2 was STATE1 CONJ its POSS was STATE2 .


def noun_info() -> dict[str, tuple[str, bool]]:
    """Every noun form -> (category, is_plural)."""
    return {form: (category, bool(plural))
            for category, (nouns, _) in LEXICON.items()
            for pair in nouns
            for plural, form in enumerate(pair)}


def possession_info() -> dict[str, tuple[str, bool]]:
    """Every possessed noun -> (the category of its owner, is_plural)."""
    return {word: (category, plural)
            for category, (_, possessions) in LEXICON.items()
            for word, plural in possessions}


def words() -> list[str]:
    """The whole lexicon in a fixed order (the vocabulary is built from it)."""
    out = [*FUNCTION_WORDS, *COPULAS.values(), *PRONOUNS.values(), *ADJECTIVES]
    out += [p for pair in PREDICATES.values() for side in pair for p in side]
    out += [*PREPOSITIONS, *ADVERBS, *CONJUNCTIONS, *noun_info(), *possession_info()]
    return out


@dataclass(frozen=True)
class Sentence:
    """One generated sentence and its annotations, as indices into ``tokens``.

    subject: N1; attractor: N2 or None; verb: the first ``was|were`` (agrees with N1);
    predicate: STATE1, the predicate adjective right after it; pronoun: ``its|their``;
    antecedent: the noun the pronoun refers to (``subject`` or ``attractor``); possessed: POSS
    (the second ``was|were`` follows it and agrees with it, then STATE2).
    """

    tokens: tuple[str, ...]
    subject: int
    attractor: int | None
    verb: int
    predicate: int
    pronoun: int
    antecedent: int
    possessed: int

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    def __str__(self) -> str:
        return self.text

    @property
    def agreement(self) -> tuple[tuple[int, int], ...]:
        """(verb, controller) pairs: each ``was|were`` and the noun it agrees with."""
        return (self.verb, self.subject), (self.possessed + 1, self.possessed)


@dataclass
class LanguageBatch:
    """Sentences encoded as ``<bos> tokens <eos>``, right-padded with ``<pad>``.

    ids: (B, N), lengths: (B,). The annotations are (B,) positions in ``ids`` (the sentence index
    + 1 for ``<bos>``): subject, attractor (-1 where there is none), verb, predicate, pronoun,
    antecedent, possessed.
    """

    ids: torch.Tensor
    lengths: torch.Tensor
    subject: torch.Tensor
    attractor: torch.Tensor
    verb: torch.Tensor
    predicate: torch.Tensor
    pronoun: torch.Tensor
    antecedent: torch.Tensor
    possessed: torch.Tensor
    sentences: list[Sentence]


ANNOTATIONS = ("subject", "attractor", "verb", "predicate", "pronoun", "antecedent", "possessed")


class SyntheticLanguage:
    """The generator: ``lang.sample(1000, seed=0)``, ``lang.batch(sentences)``, ``lang.corpus(n)``.

    p_adverb, p_adjective: how often the optional adverb and each optional adjective appear;
    p_attractor: how often the subject has a prepositional phrase with a second noun N2;
    p_refer_attractor: with N2 present, how often the pronoun refers to N2 rather than N1.
    """

    def __init__(self, p_adverb: float = 0.3, p_adjective: float = 0.3, p_attractor: float = 0.8,
                 p_refer_attractor: float = 0.5) -> None:
        for name, p in [("p_adverb", p_adverb), ("p_adjective", p_adjective),
                        ("p_attractor", p_attractor), ("p_refer_attractor", p_refer_attractor)]:
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name}={p} is not a probability")
        self.p_adverb, self.p_adjective = p_adverb, p_adjective
        self.p_attractor, self.p_refer_attractor = p_attractor, p_refer_attractor
        self.vocab = Vocab(words())

    def __repr__(self) -> str:
        return (f"SyntheticLanguage({len(self.vocab)} tokens, p_attractor={self.p_attractor}, "
                f"p_refer_attractor={self.p_refer_attractor})")

    def _noun_phrase(self, rng: random.Random, tokens: list[str], category: str,
                     plural: bool) -> int:
        """Append ``the [ADJ] N`` and return the position of N."""
        tokens.append("the")
        if rng.random() < self.p_adjective:
            tokens.append(rng.choice(ADJECTIVES))
        tokens.append(rng.choice(LEXICON[category][0])[plural])
        return len(tokens) - 1

    def sentence(self, rng: random.Random) -> Sentence:
        """One sentence drawn from the grammar with ``rng``."""
        tokens: list[str] = []
        if rng.random() < self.p_adverb:
            tokens += [rng.choice(ADVERBS), ","]
        category1, category2 = rng.sample(sorted(LEXICON), 2)  # N1 and N2 never share one
        plural1 = rng.random() < 0.5
        subject = self._noun_phrase(rng, tokens, category1, plural1)
        nouns = {subject: (category1, plural1)}
        attractor = None
        if rng.random() < self.p_attractor:
            tokens.append(rng.choice(PREPOSITIONS))
            attractor = self._noun_phrase(rng, tokens, category2, not plural1)
            nouns[attractor] = (category2, not plural1)
        verb = len(tokens)
        polarity = rng.randrange(2)  # 0: good states, 1: bad states, for both predicates
        tokens += [COPULAS[plural1], rng.choice(PREDICATES[category1][polarity]),
                   rng.choice(CONJUNCTIONS)]
        antecedent = subject
        if attractor is not None and rng.random() < self.p_refer_attractor:
            antecedent = attractor
        category, plural = nouns[antecedent]
        pronoun = len(tokens)
        word, poss_plural = rng.choice(LEXICON[category][1])
        tokens += [PRONOUNS[plural], word, COPULAS[poss_plural],
                   rng.choice(PREDICATES[category][polarity]), "."]
        return Sentence(tuple(tokens), subject, attractor, verb, verb + 1, pronoun, antecedent,
                        pronoun + 1)

    def sample(self, n: int, seed: int = 0) -> list[Sentence]:
        """``n`` sentences; the same seed gives the same sentences on every machine."""
        rng = random.Random(seed)
        return [self.sentence(rng) for _ in range(n)]

    def batch(self, sentences: Sequence[Sentence]) -> LanguageBatch:
        """Encode sentences as ``<bos> ... <eos>`` rows, with annotated positions shifted by one."""
        ids, lengths = self.vocab.pad_batch([s.tokens for s in sentences], bos=True, eos=True)
        positions = {
            name: torch.tensor([-1 if getattr(s, name) is None else getattr(s, name) + 1
                                for s in sentences], dtype=torch.long)
            for name in ANNOTATIONS
        }
        return LanguageBatch(ids, lengths, sentences=list(sentences), **positions)

    def corpus(self, n: int, seed: int = 0) -> list[str]:
        """``n`` sentences as plain text lines (for tokenizers and language-model pre-training)."""
        return [s.text for s in self.sample(n, seed)]
