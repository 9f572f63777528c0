"""Every exercise suite of the book, found by exercise name or id.

Each chapter's suites live in ``coursekit.grading.suites.chNN`` as a module-level ``SUITES`` list;
new chapters are picked up without editing this file. A chapter whose exercises span several
notebooks has one module per notebook (``ch07a``, ``ch07b``, ...): a submission of
``07f_bert.ipynb`` is then graded on that notebook's exercises only.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import cache

from coursekit.grading.suite import Suite


@cache
def all_suites() -> dict[str, Suite]:
    """Name -> suite for every exercise, in chapter order."""
    from coursekit.grading import suites as package

    found: dict[str, Suite] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        split = re.fullmatch(r"ch(\d\d[a-z])", info.name)
        for suite in getattr(module, "SUITES", []):
            if split and not suite.notebook:
                suite.notebook = split.group(1)
            if suite.name in found:
                raise RuntimeError(f"two suites are named {suite.name!r}")
            found[suite.name] = suite
    return found


def get_suite(key: str) -> Suite:
    """A suite by exercise name (``"lstm_cell"``) or id (``"01.2"``)."""
    suites = all_suites()
    if key in suites:
        return suites[key]
    for suite in suites.values():
        if suite.exercise == key:
            return suite
    raise KeyError(
        f"no exercise is called {key!r}. Known exercises: "
        + ", ".join(f"{s.exercise} {s.name}" for s in suites.values())
    )
