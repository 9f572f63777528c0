"""The synthetic language keeps its own grammar: agreement, pronoun reference and determinism."""

import random

import pytest
import torch

from coursekit.data.language import (
    ADJECTIVES,
    ADVERBS,
    CONJUNCTIONS,
    COPULAS,
    MAX_TOKENS,
    PREDICATES,
    PREPOSITIONS,
    PRONOUNS,
    SyntheticLanguage,
    noun_info,
    possession_info,
    words,
)

NOUNS, POSSESSIONS = noun_info(), possession_info()
LANG = SyntheticLanguage()
SENTENCES = LANG.sample(3000, seed=0)


def plural_of(word: str) -> bool:
    return {**NOUNS, **POSSESSIONS}[word][1]


def test_lexicon_has_no_word_in_two_roles():
    assert len(words()) == len(set(words()))
    assert len(LANG.vocab) == 3 + len(words())  # <pad>, <bos>, <eos> first


def test_annotations_point_at_the_right_words():
    for sentence in SENTENCES:
        check_annotations(sentence)


def check_annotations(sentence):
    t = sentence.tokens
    assert t[sentence.subject] in NOUNS
    assert t[sentence.subject - 1] in ("the", *ADJECTIVES)
    if sentence.attractor is not None:
        assert t[sentence.attractor] in NOUNS and sentence.subject < sentence.attractor
        assert t[sentence.subject + 1] in PREPOSITIONS
    assert t[sentence.verb] in COPULAS.values()
    assert t[sentence.pronoun] in PRONOUNS.values()
    assert sentence.antecedent in (sentence.subject, sentence.attractor)
    assert sentence.antecedent < sentence.pronoun
    assert t[sentence.possessed] in POSSESSIONS
    assert t[sentence.verb + 2] in CONJUNCTIONS and t[-1] == "."
    assert 5 <= len(t) <= MAX_TOKENS
    # every noun in the sentence is annotated: nothing else the pronoun could refer to
    nouns = [i for i, w in enumerate(t) if w in NOUNS]
    assert nouns == [i for i in (sentence.subject, sentence.attractor) if i is not None]


def test_pronoun_agrees_with_its_antecedent_and_only_with_it():
    for s in SENTENCES:
        antecedent_plural = plural_of(s.tokens[s.antecedent])
        assert s.tokens[s.pronoun] == PRONOUNS[antecedent_plural], s.text
        if s.attractor is not None:  # the other noun has the other number: no ambiguity
            assert plural_of(s.tokens[s.subject]) != plural_of(s.tokens[s.attractor]), s.text


def test_possessed_noun_belongs_to_the_antecedents_category():
    for s in SENTENCES:
        owner = NOUNS[s.tokens[s.antecedent]][0]
        assert POSSESSIONS[s.tokens[s.possessed]][0] == owner, s.text
        if s.attractor is not None:
            assert NOUNS[s.tokens[s.subject]][0] != NOUNS[s.tokens[s.attractor]][0], s.text


def test_verbs_agree_with_their_controllers_not_with_the_attractor():
    for s in SENTENCES:
        for verb, controller in s.agreement:
            assert s.tokens[verb] == COPULAS[plural_of(s.tokens[controller])], s.text
        assert s.agreement[0] == (s.verb, s.subject)


def test_predicates_are_selected_by_category_and_share_their_polarity():
    polarities = set()
    for s in SENTENCES:
        assert s.predicate == s.verb + 1
        first = PREDICATES[NOUNS[s.tokens[s.subject]][0]]
        second = PREDICATES[POSSESSIONS[s.tokens[s.possessed]][0]]
        polarity = next(p for p in (0, 1) if s.tokens[s.predicate] in first[p])
        assert s.tokens[s.possessed + 2] in second[polarity], s.text
        polarities.add(polarity)
    assert polarities == {0, 1}


def test_both_referents_and_both_numbers_occur_as_configured():
    with_attractor = [s for s in SENTENCES if s.attractor is not None]
    assert abs(len(with_attractor) / len(SENTENCES) - 0.8) < 0.04
    to_attractor = sum(s.antecedent == s.attractor for s in with_attractor) / len(with_attractor)
    assert abs(to_attractor - 0.5) < 0.04
    their = sum(s.tokens[s.pronoun] == "their" for s in SENTENCES) / len(SENTENCES)
    assert abs(their - 0.5) < 0.04
    assert any(s.tokens[0] in ADVERBS for s in SENTENCES)
    assert max(len(s.tokens) for s in SENTENCES) == MAX_TOKENS
    only_subject = SyntheticLanguage(p_attractor=0.0).sample(200, seed=1)
    assert all(s.attractor is None and s.antecedent == s.subject for s in only_subject)
    always_attractor = SyntheticLanguage(p_attractor=1.0, p_refer_attractor=1.0).sample(200)
    assert all(s.antecedent == s.attractor for s in always_attractor)


def test_same_seed_same_sentences_other_seed_other_sentences():
    assert [s.text for s in LANG.sample(50, seed=7)] == [s.text for s in LANG.sample(50, seed=7)]
    assert LANG.corpus(50, seed=7) == [s.text for s in LANG.sample(50, seed=7)]
    assert LANG.corpus(50, seed=7) != LANG.corpus(50, seed=8)
    # sentence(rng) draws from the rng it is given, nothing global
    random.seed(123)
    a = LANG.sentence(random.Random(5))
    random.seed(456)
    assert LANG.sentence(random.Random(5)) == a
    # the vocabulary does not depend on the seed or the probabilities
    assert SyntheticLanguage(p_adverb=0.0).vocab.itos == LANG.vocab.itos


def test_batch_encodes_bos_tokens_eos_and_shifts_annotations():
    sentences = SENTENCES[:64]
    batch = LANG.batch(sentences)
    B, N = batch.ids.shape
    assert B == 64 and N == max(len(s.tokens) for s in sentences) + 2
    assert torch.equal(batch.lengths, torch.tensor([len(s.tokens) + 2 for s in sentences]))
    itos = LANG.vocab.itos
    for b, s in enumerate(sentences):
        row = batch.ids[b].tolist()
        assert row[0] == LANG.vocab.bos_id and row[len(s.tokens) + 1] == LANG.vocab.eos_id
        assert all(i == LANG.vocab.pad_id for i in row[len(s.tokens) + 2:])
        assert LANG.vocab.decode(row, sep=" ") == s.text
        for name in ("subject", "verb", "predicate", "pronoun", "antecedent", "possessed"):
            position = int(getattr(batch, name)[b])
            assert itos[row[position]] == s.tokens[getattr(s, name)], name
        if s.attractor is None:
            assert batch.attractor[b] == -1
        else:
            assert itos[row[int(batch.attractor[b])]] == s.tokens[s.attractor]


def test_probabilities_are_checked():
    with pytest.raises(ValueError, match="p_attractor"):
        SyntheticLanguage(p_attractor=1.5)
