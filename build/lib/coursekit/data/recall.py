"""Key–value recall: a task that only content-based lookup solves.

A sequence holds P (key, value) pairs, one pair per position, followed by a query position that
holds a key and the placeholder value ``?``; the target is the value stored with that key::

    (k=5, v=2) (k=11, v=7) (k=0, v=2) ... (k=11, v=?)   ->   7

Keys are distinct within a sequence and placed in random order, so where the answer sits carries
no information: a model must compare the query's key with every stored key. Each position is one
pair (as if an earlier layer had already glued every value to its key), so a single
self-attention layer can do the lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RecallBatch:
    """key_ids, value_ids: (B, P + 1), the last position is the query (value id = ``query_id``);
    target: (B,) the value to recall; answer_pos: (B,) the position of the matching pair."""

    key_ids: torch.Tensor
    value_ids: torch.Tensor
    target: torch.Tensor
    answer_pos: torch.Tensor

    def to(self, device: torch.device | str) -> RecallBatch:
        """The same batch with its tensors on ``device``."""
        return RecallBatch(self.key_ids.to(device), self.value_ids.to(device),
                           self.target.to(device), self.answer_pos.to(device))


class KeyValueRecall:
    """``n_pairs`` distinct keys out of ``n_keys``, values drawn (with repeats) from ``n_values``.

    Value ids are ``0 .. n_values-1``; ``query_id = n_values`` marks the query position, so a
    value embedding needs ``n_values + 1`` rows.
    """

    def __init__(self, n_keys: int = 16, n_values: int = 16, n_pairs: int = 8) -> None:
        if not 1 <= n_pairs <= n_keys:
            raise ValueError(f"need 1 <= n_pairs <= n_keys, got n_pairs={n_pairs}, n_keys={n_keys}")
        if n_values < 1:
            raise ValueError(f"need at least one value, got n_values={n_values}")
        self.n_keys, self.n_values, self.n_pairs = n_keys, n_values, n_pairs
        self.query_id = n_values

    def sample(self, n: int, generator: torch.Generator | None = None) -> RecallBatch:
        """``n`` sequences of length ``n_pairs + 1``, reproducible with a seeded ``generator``."""
        keys = torch.rand(n, self.n_keys, generator=generator).argsort(dim=-1)[:, : self.n_pairs]
        values = torch.randint(self.n_values, (n, self.n_pairs), generator=generator)
        answer_pos = torch.randint(self.n_pairs, (n,), generator=generator)
        rows = torch.arange(n)
        key_ids = torch.cat([keys, keys[rows, answer_pos, None]], dim=1)
        value_ids = torch.cat([values, torch.full((n, 1), self.query_id)], dim=1)
        return RecallBatch(key_ids, value_ids, values[rows, answer_pos], answer_pos)
