"""The library versions the book supports, and a one-line check of the running environment.

Every chapter's set-up cell imports coursekit, which runs :func:`report` once: where a library
the book uses is installed at a version outside the range below, it prints one line that names
the library, the version found and what to install, instead of letting a cell fail later with an
``AttributeError`` deep inside the library. Nothing is printed inside the range.

The range is tested at both ends, unit tests and every notebook in both editions, by
``python benchmarks/environments.py oldest|newest`` (constraints in ``benchmarks/env-*.txt``);
the Validation page records the latest result of each end. CI runs the pins of
``requirements.txt``, which lie inside it.
"""

from __future__ import annotations

import re
from importlib import metadata

# library -> (lowest supported, first unsupported): [low, high). The low ends are the oldest
# environment tested; the high ends lie just past the newest release tested.
SUPPORTED: dict[str, tuple[str, str]] = {
    "torch": ("2.8", "2.15"),
    "transformers": ("4.57", "6"),
    "peft": ("0.17", "0.22"),
    "bitsandbytes": ("0.50", "0.51"),  # 0.47-0.49's CPU kernel rounds NF4 and 8-bit otherwise
}


def _version(text: str) -> tuple[int, ...]:
    """'2.13.0+cpu' -> (2, 13, 0); '5.0.0rc1' -> (5, 0, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def problems(installed: dict[str, str | None] | None = None) -> list[str]:
    """One sentence per supported library installed outside its range (a library that is not
    installed is not a problem here: the chapters that need it say so when they import it)."""
    if installed is None:
        installed = {}
        for name in SUPPORTED:
            try:
                installed[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                installed[name] = None
    found = []
    for name, (low, high) in SUPPORTED.items():
        version = installed.get(name)
        if version is None:
            continue
        if _version(version) < _version(low):
            found.append(f"{name} {version} is older than the book supports: "
                         f'pip install "{name}>={low},<{high}"')
        elif _version(version) >= _version(high):
            found.append(f"{name} {version} is newer than the book has been tested with; if a cell "
                         f'fails, pip install "{name}>={low},<{high}"')
    return found


def report() -> None:
    """Print one line if the environment is outside the supported range, else nothing."""
    found = problems()
    if found:
        print("coursekit: " + "; ".join(found) + ".")
