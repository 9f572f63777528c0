"""Corpus of plausible student code for the new exercises of 08b (see grading_corpus.py)."""

VARIANTS: list = []
