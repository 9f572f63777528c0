"""Corpus of plausible student code for the new exercises of 07a (see grading_corpus.py)."""

VARIANTS: list = []
