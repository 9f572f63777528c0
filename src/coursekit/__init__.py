"""coursekit: the reference implementations, data and grading behind the course book.

Importing ``coursekit`` is cheap: torch is imported only when a function that needs it runs.
Submodules (``coursekit.rnn``, ``coursekit.attention``, ...) are imported by name.
"""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["device", "seed", "seed_everything", "profile", "by_profile"]
__version__ = "0.1.0"

PROFILES = ("quick", "full")

if "ipykernel" in __import__("sys").modules:  # a notebook's set-up cell: one line, only where a
    try:                                       # library is outside the supported range
        from coursekit.environment import report as _report_environment

        _report_environment()
    except Exception:  # noqa: BLE001  a broken metadata record must not stop the import
        pass
T = TypeVar("T")


def device() -> torch.device:
    """The device chapters train on: CUDA when available, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed(base: int = 0) -> int:
    """The seed a chapter uses where its code says ``base``.

    Normally ``base`` itself. ``COURSEKIT_SEED=k`` (k = 0, 1, 2, ...) asks for the k-th draw of
    every seeded experiment, ``base + 1000 k``, so that a notebook can be re-run under other
    initialisations and data streams: a result the book asserts must hold under every draw, not
    only the one the chapter was written with (``coursekit validate --seeds 0-4``). k = 0 is the
    book's own run.
    """
    chosen = os.environ.get("COURSEKIT_SEED", "").strip()
    if not chosen:
        return base
    if not chosen.isdigit():
        raise ValueError(f"COURSEKIT_SEED={chosen!r}: expected a whole number >= 0")
    return base + 1000 * int(chosen)


def seed_everything(base: int = 0) -> int:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) so a chapter is reproducible on one machine.

    The seed used is ``coursekit.seed(base)`` (``COURSEKIT_SEED`` moves it), and is returned.

    In the quick profile it also runs PyTorch on one CPU thread: the book's models are too small
    to gain from intra-op threads, results do not depend on the thread count, and on a busy
    2-core machine competing OpenMP pools made a training step 20x slower (15 ms -> 347 ms).
    """
    import numpy as np
    import torch

    used = seed(base)
    random.seed(used)
    np.random.seed(used)
    torch.manual_seed(used)
    if profile() == "quick":
        torch.set_num_threads(1)
    return used


def profile() -> str:
    """``"quick"`` on CPU (CI, laptops), ``"full"`` on a GPU; ``COURSEKIT_PROFILE`` overrides."""
    chosen = os.environ.get("COURSEKIT_PROFILE", "").strip().lower()
    if chosen:
        if chosen not in PROFILES:
            raise ValueError(f"COURSEKIT_PROFILE={chosen!r}: expected one of {PROFILES}")
        return chosen
    import torch

    return "full" if torch.cuda.is_available() else "quick"


def by_profile(quick: T, full: T) -> T:
    """Pick a training budget by profile: ``steps = by_profile(quick=400, full=4000)``."""
    return quick if profile() == "quick" else full
