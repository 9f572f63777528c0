"""Corpus of plausible student code for the new exercises of 07c (see grading_corpus.py)."""

VARIANTS: list = []
