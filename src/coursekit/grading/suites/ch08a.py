"""Chapter 8, notebook 08a (the Vision Transformer) — ``patchify``.

The authority is ``F.unfold`` with kernel = stride = P, transposed to (B, N, C·P·P): its patches
are the windows of a strided convolution in row-major order, each flattened in (channel, row,
column) order, the layout of a ``nn.Conv2d`` weight (d_model, C, P, P) flattened to
(d_model, C·P·P). ``tests/test_ch08_vit_clip.py`` also checks it against Hugging Face's ViT patch
embedding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coursekit.grading.suite import Case, Mutant, Suite
from coursekit.models import vit


def unfold_patches(images, patch_size):
    """F.unfold's windows of a stride-P convolution: (B, C·P·P, N) -> (B, N, C·P·P)."""
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)


def _variant(*, grid="rows", inside="c,r,col", naive=False):
    """A wrong patchify, one bug switched on by the arguments."""

    def variant(images, patch_size):
        B, C, H, W = images.shape
        P = patch_size
        if naive:  # cut the flattened image into consecutive chunks
            return images.reshape(B, (H // P) * (W // P), C * P * P)
        x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, rows, P, cols, P)
        grid_axes = (2, 4) if grid == "rows" else (4, 2)
        inside_axes = {"c,r,col": (1, 3, 5), "r,col,c": (3, 5, 1), "c,col,r": (1, 5, 3)}[inside]
        x = x.permute(0, *grid_axes, *inside_axes)
        return x.reshape(B, (H // P) * (W // P), C * P * P)

    return variant


def _case(B, C, H, W, P, by_hand=False):
    def make(g):
        if by_hand:
            return torch.arange(float(B * C * H * W)).reshape(B, C, H, W), P
        return torch.randn(B, C, H, W, generator=g), P

    return make


CASES = [
    Case("by hand: one 4x4 image holding 0..15, P = 2", _case(1, 1, 4, 4, 2, by_hand=True)),
    Case("B=2, C=1, 8x8, P=2", _case(2, 1, 8, 8, 2)),
    Case("three channels, 8x8, P=4", _case(2, 3, 8, 8, 4),
         hint="Inside a patch the features go channel by channel: all P·P pixels of channel 0 "
              "(row by row), then channel 1, ...: the order of a Conv2d weight (C, P, P)."),
    Case("non-square image: 4x8, P=2", _case(2, 2, 4, 8, 2),
         hint="Patches are numbered row by row over the grid: n = r·(W/P) + c. With H ≠ W the "
              "grid has H/P rows and W/P columns; keep the two apart."),
    Case("P = 1: every pixel a token", _case(1, 2, 3, 5, 1)),
    Case("P = H = W: one patch", _case(3, 2, 4, 4, 4)),
]

SUITES = [
    Suite(
        exercise="08.1",
        name="patchify",
        points=2,
        reference=unfold_patches,
        solution=vit.patchify,
        cases=CASES,
        arg_names=("images", "patch_size"),
        hint="Split H into (H/P, P) and W into (W/P, P), permute to (B, rows, cols, C, P, P), then "
             "flatten to (B, N, C·P·P).",
        mutants=[
            Mutant("plain reshape", _variant(naive=True),
                   "A plain reshape cuts the image into runs of consecutive pixels (rows of the "
                   "image), not P x P squares: split each spatial axis into (grid, P) and permute "
                   "before flattening."),
            Mutant("columns before rows", _variant(grid="cols"),
                   "Your patches are numbered column by column. The order is row-major over the "
                   "grid, as a convolution's output flattened: patch n = r·(W/P) + c."),
            Mutant("channels last inside a patch", _variant(inside="r,col,c"),
                   "Your patch features are (row, column, channel), channels last, as in "
                   "einops' 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'. The book's (and a Conv2d "
                   "weight's) order is (channel, row, column)."),
            Mutant("pixels inside a patch transposed", _variant(inside="c,col,r"),
                   "Inside a patch your pixels go column by column; flatten each patch row by "
                   "row: permute to (..., C, P_row, P_col)."),
        ],
    ),
]
