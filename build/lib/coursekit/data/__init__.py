"""Data sets the book generates itself (nothing is downloaded) and the vocabularies they share."""

from coursekit.data.vocab import Vocab

__all__ = ["Vocab"]
