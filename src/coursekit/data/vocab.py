"""A character/word vocabulary with the three special tokens every seq2seq chapter needs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


class Vocab:
    """Maps tokens to ids. ``<pad>`` is 0, ``<bos>`` 1, ``<eos>`` 2, then ``tokens`` in order."""

    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos: list[str] = [PAD, BOS, EOS]
        for token in tokens:
            if token not in self.itos:
                self.itos.append(token)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {' '.join(self.itos[3:13])}{' ...' if len(self) > 13 else ''})"

    def encode(self, tokens: Iterable[str]) -> list[int]:
        try:
            return [self.stoi[t] for t in tokens]
        except KeyError as err:
            raise KeyError(f"token {err.args[0]!r} is not in the vocabulary {self!r}") from None

    def decode(self, ids: Iterable[int], sep: str = "") -> str:
        """Ids back to text, stopping at ``<eos>`` and skipping ``<pad>``/``<bos>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i > self.eos_id:
                out.append(self.itos[i])
        return sep.join(out)

    def pad_batch(
        self, sequences: Sequence[Sequence[str]], bos: bool = False, eos: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode and right-pad: -> ids (B, max_len) and lengths (B,)."""
        encoded = [
            ([self.bos_id] if bos else []) + self.encode(s) + ([self.eos_id] if eos else [])
            for s in sequences
        ]
        width = max(map(len, encoded))
        ids = torch.tensor([e + [self.pad_id] * (width - len(e)) for e in encoded], dtype=torch.long)
        return ids, torch.tensor([len(e) for e in encoded])
