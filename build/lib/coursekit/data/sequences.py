"""Toy sequence tasks (copy, reverse, sort) with controllable length, for seq2seq experiments."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from coursekit.data.vocab import Vocab

DIGITS = "0123456789"
TASKS = {
    "copy": lambda s: list(s),
    "reverse": lambda s: list(reversed(s)),
    "sort": lambda s: sorted(s),
}


@dataclass
class SequenceBatch:
    """src: (B, S) ids, src_len: (B,), tgt_in: (B, T) = BOS + target, tgt_out: (B, T) = target + EOS."""

    src: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    sources: list[list[str]]
    targets: list[list[str]]

    def to(self, device: torch.device | str) -> SequenceBatch:
        """The same batch with its tensors on ``device``."""
        return SequenceBatch(self.src.to(device), self.src_len, self.tgt_in.to(device),
                             self.tgt_out.to(device), self.sources, self.targets)


class SequenceTask:
    """Random digit strings of length ``min_len..max_len`` mapped by ``task`` (copy/reverse/sort)."""

    def __init__(self, task: str = "reverse", min_len: int = 2, max_len: int = 16) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}: choose one of {sorted(TASKS)}")
        if not 1 <= min_len <= max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {min_len}, {max_len}")
        self.task, self.min_len, self.max_len = task, min_len, max_len
        self.vocab = Vocab(DIGITS)

    def sample(self, n: int, rng: random.Random, length: int | None = None) -> SequenceBatch:
        """``n`` examples; every source has ``length`` tokens if given, else a uniform length."""
        sources = [
            [rng.choice(DIGITS) for _ in range(length or rng.randint(self.min_len, self.max_len))]
            for _ in range(n)
        ]
        targets = [TASKS[self.task](s) for s in sources]
        src, src_len = self.vocab.pad_batch(sources)
        tgt_in, _ = self.vocab.pad_batch(targets, bos=True)
        tgt_out, _ = self.vocab.pad_batch(targets, eos=True)
        return SequenceBatch(src, src_len, tgt_in, tgt_out, sources, targets)
