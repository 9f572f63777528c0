"""Does a sentence belong to :mod:`coursekit.data.language`? A recogniser for the generated language.

Sampled text is scored with it: the share of a language model's samples that the grammar
accepts. It checks the template and every rule the generator follows::

    [ADV ,] the [ADJ] N1 [PREP the [ADJ] N2] was|were STATE1 CONJ its|their POSS was|were STATE2 .

N1 and N2 differ in category and number; each ``was|were`` agrees with its noun; the pronoun's
number picks its antecedent (N1 or N2); POSS belongs to the antecedent's category; STATE1 is a
state of N1's category, STATE2 of the antecedent's, and both have the same polarity.
"""

from __future__ import annotations

from collections.abc import Sequence

from coursekit.data.language import (
    ADJECTIVES,
    ADVERBS,
    CONJUNCTIONS,
    COPULAS,
    LEXICON,
    PREDICATES,
    PREPOSITIONS,
    PRONOUNS,
    noun_info,
)

_NOUNS = noun_info()
_POSSESSIONS = {category: dict(possessions) for category, (_, possessions) in LEXICON.items()}


def rejection(tokens: Sequence[str]) -> str | None:
    """Why the grammar rejects ``tokens``, or None when it accepts them."""
    t = list(tokens)
    i = 0

    def take(allowed, what: str) -> str:
        nonlocal i
        if i >= len(t):
            raise _Reject(f"ends before {what}")
        if t[i] not in allowed:
            raise _Reject(f"{t[i]!r} where {what} belongs (word {i + 1})")
        i += 1
        return t[i - 1]

    def noun_phrase(what: str) -> tuple[str, bool]:
        nonlocal i
        take(("the",), f"'the' before {what}")
        if i < len(t) and t[i] in ADJECTIVES:
            i += 1
        return _NOUNS[take(_NOUNS, what)]

    try:
        if t and t[0] in ADVERBS:
            i = 1
            take((",",), "',' after the adverb")
        nouns = [noun_phrase("the subject")]
        if i < len(t) and t[i] in PREPOSITIONS:
            i += 1
            nouns.append(noun_phrase("the second noun"))
            if nouns[1][0] == nouns[0][0] or nouns[1][1] == nouns[0][1]:
                raise _Reject("the two nouns must differ in category and in number")
        category, plural = nouns[0]
        take((COPULAS[plural],), "the verb agreeing with the subject")
        good, bad = PREDICATES[category]
        state = take(good + bad, f"a state of a {category}")
        polarity = 0 if state in good else 1
        take(CONJUNCTIONS, "a conjunction")
        pronoun_plural = take(PRONOUNS.values(), "its|their") == PRONOUNS[True]
        referents = [n for n in nouns if n[1] == pronoun_plural]
        if not referents:
            raise _Reject("the pronoun's number matches no noun")
        category = referents[0][0]
        possessed = take(_POSSESSIONS[category], f"something a {category} has")
        take((COPULAS[_POSSESSIONS[category][possessed]],), f"the verb agreeing with {possessed!r}")
        take(PREDICATES[category][polarity], "a state of the same polarity")
        take((".",), "'.'")
        if i != len(t):
            raise _Reject("words after the full stop")
    except _Reject as reason:
        return str(reason)
    return None


def accepts(tokens: Sequence[str] | str) -> bool:
    """True when the sentence (words, or one string of space-separated words) is in the language."""
    return rejection(tokens.split() if isinstance(tokens, str) else tokens) is None


class _Reject(Exception):
    pass
