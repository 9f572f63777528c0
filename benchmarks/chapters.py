"""Execution time of every chapter, in each edition, under a profile (what nbval runs).

``python benchmarks/chapters.py [--profile quick|full] [--only 01 03]`` prints one row per
chapter and edition. The budget is 90 s per chapter on a 2-core CPU in the quick profile.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 90.0


def run_notebook(path: Path, profile: str, timeout: int = 900) -> float:
    """Execute a notebook in a fresh kernel; return wall-clock seconds (kernel start included)."""
    nb = nbformat.read(path, as_version=4)
    os.environ["COURSEKIT_PROFILE"] = profile  # inherited by the kernel
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def measure(profile: str = "quick", only: list[str] | None = None,
            on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Every chapter in both editions; ``on_row`` is called after each (to save as it goes)."""
    rows = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        if only and not any(path.name.startswith(o) for o in only):
            continue
        for edition in ("solutions", "notebooks"):
            seconds = run_notebook(ROOT / edition / path.name, profile)
            rows.append({"chapter": path.stem, "edition": edition, "profile": profile,
                         "seconds": seconds, "within_budget": seconds < BUDGET_S})
            if on_row is not None:
                on_row(rows[-1])
            print(f"{path.stem:<28} {edition:<10} {profile:<6} {seconds:7.1f} s")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="quick", choices=["quick", "full"])
    parser.add_argument("--only", nargs="*", help="chapter number prefixes, e.g. 01 03")
    args = parser.parse_args()
    measure(args.profile, args.only)
