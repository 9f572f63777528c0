"""Digit scenes: a few of scikit-learn's 8x8 digits placed on a canvas, with a generated caption.

The canvas is a ``grid x grid`` arrangement of cells of ``cell`` pixels. A scene puts
``min_digits..max_digits`` digits in distinct cells (each jittered a little inside its cell) and
reads them out in reading order (row by row, left to right): ``"seven , two and one"``.
Every caption word that names a digit records the cell it came from (``SceneBatch.cells``), so
a captioner's attention over the grid can be scored against where the digit really is. With
``positions=True`` each digit's word is followed by the words of its cell
(``"seven top left and two bottom right"``), the attributes CLIP (Chapter 8) learns to bind; a
set of ``(label, cell)`` pairs can be kept out of a sample (``exclude``), to probe composition.

The digit images are split once, seeded: test scenes are drawn from digit images never seen in
training (unseen images, not unseen handwriting: scikit-learn's digits come from 13 writers, and a
random split puts each writer's digits on both sides). Nothing is downloaded: ``load_digits``
ships with scikit-learn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

from coursekit.data.vocab import Vocab

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
NO_CELL = -1  # in SceneBatch.cells: this word names no digit (",", "and", <eos>, padding)


@cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1797 handwritten digits: images (N, 8, 8) scaled to [0, 1], labels (N,)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.images / 16.0).astype(np.float32), digits.target.astype(np.int64)


def position_words(cell: int, grid: int) -> list[str]:
    """The words of a cell: row ("top", "middle", "bottom") then column ("left", "middle",
    "right"); a 2 x 2 grid has no "middle". position_words(1, 2) -> ['top', 'right']."""
    if grid not in (2, 3):
        raise ValueError(f"position words exist for 2x2 and 3x3 grids, not {grid}x{grid}")
    row, col = divmod(cell, grid)
    rows = ["top", "bottom"] if grid == 2 else ["top", "middle", "bottom"]
    cols = ["left", "right"] if grid == 2 else ["left", "middle", "right"]
    return [rows[row], cols[col]]


def caption_words(labels: list[int], cells: list[int] | None = None, grid: int = 3) -> list[str]:
    """[7, 2, 1] -> ['seven', ',', 'two', 'and', 'one']; with ``cells`` each number is followed
    by its position: ([7, 2], [0, 3], grid=2) -> ['seven', 'top', 'left', 'and', 'two',
    'bottom', 'right']."""
    words = []
    for k, label in enumerate(labels):
        if k:
            words.append("and" if k == len(labels) - 1 else ",")
        words.append(NUMBER_WORDS[label])
        if cells is not None:
            words.extend(position_words(cells[k], grid))
    return words


@dataclass
class SceneBatch:
    """images: (B, 1, H, W) in [0, 1]; tgt_in/tgt_out: (B, T) caption ids (BOS + words, words + EOS);
    cells: (B, T) the grid cell (row-major) of the digit each tgt_out word names, else NO_CELL;
    layouts: per scene, the (cell, label) pairs in reading order."""

    images: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    cells: torch.Tensor
    captions: list[list[str]]
    layouts: list[list[tuple[int, int]]]

    def to(self, device: torch.device | str) -> SceneBatch:
        """The same batch with its tensors on ``device``."""
        return SceneBatch(self.images.to(device), self.tgt_in.to(device), self.tgt_out.to(device),
                          self.cells.to(device), self.captions, self.layouts)


class DigitScenes:
    """Scenes of ``grid x grid`` cells of ``cell`` pixels, each with ``min_digits..max_digits`` digits."""

    def __init__(self, grid: int = 3, cell: int = 10, min_digits: int = 1, max_digits: int = 3,
                 test_fraction: float = 0.2, seed: int = 0, positions: bool = False) -> None:
        if cell < 8:
            raise ValueError(f"a cell must hold an 8x8 digit, got cell={cell}")
        if not 1 <= min_digits <= max_digits <= grid * grid:
            raise ValueError(f"need 1 <= min_digits <= max_digits <= {grid * grid}")
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        self.grid, self.cell = grid, cell
        self.min_digits, self.max_digits = min_digits, max_digits
        self.size = grid * cell  # the canvas is size x size pixels
        images, labels = _digits()
        order = np.random.default_rng(seed).permutation(len(labels))
        n_test = round(test_fraction * len(labels))
        self.split_index = {"test": order[:n_test], "train": order[n_test:]}
        self.images, self.labels = images, labels
        self.positions = positions
        words = NUMBER_WORDS + [",", "and"]
        if positions:
            words += [w for c in range(grid * grid) for w in position_words(c, grid)]
        self.vocab = Vocab(words)

    def sample(self, n: int, rng: random.Random, split: str = "train",
               exclude: frozenset[tuple[int, int]] | set[tuple[int, int]] = frozenset(),
               ) -> SceneBatch:
        """``n`` random scenes whose digits come from ``split`` ("train" or "test"); no digit
        ``label`` is placed in a ``cell`` when ``(label, cell)`` is in ``exclude``."""
        if split not in self.split_index:
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        pool = self.split_index[split]
        canvas = np.zeros((n, 1, self.size, self.size), dtype=np.float32)
        layouts, captions, named_cells = [], [], []
        for b in range(n):
            k = rng.randint(self.min_digits, self.max_digits)
            layout = []
            for cell in sorted(rng.sample(range(self.grid * self.grid), k)):  # reading order
                index = int(pool[rng.randrange(len(pool))])
                while (int(self.labels[index]), cell) in exclude:
                    index = int(pool[rng.randrange(len(pool))])
                row, col = divmod(cell, self.grid)
                dy, dx = rng.randint(0, self.cell - 8), rng.randint(0, self.cell - 8)
                y, x = row * self.cell + dy, col * self.cell + dx
                canvas[b, 0, y:y + 8, x:x + 8] = self.images[index]
                layout.append((cell, int(self.labels[index])))
            cells = [cell for cell, _ in layout] if self.positions else None
            words = caption_words([label for _, label in layout], cells, self.grid)
            digit_cells = iter(cell for cell, _ in layout)
            layouts.append(layout)
            captions.append(words)
            named_cells.append([next(digit_cells) if w in NUMBER_WORDS else NO_CELL for w in words])
        tgt_in, _ = self.vocab.pad_batch(captions, bos=True)
        tgt_out, _ = self.vocab.pad_batch(captions, eos=True)
        cells = torch.full(tgt_out.shape, NO_CELL, dtype=torch.long)
        for b, row in enumerate(named_cells):
            cells[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        return SceneBatch(torch.from_numpy(canvas), tgt_in, tgt_out, cells, captions, layouts)
