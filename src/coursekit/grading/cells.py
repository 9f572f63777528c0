"""The namespace an exercise runs in: the same for ``check()`` and for ``coursekit grade``.

The contract with students: the grader runs each code cell tagged ``exercise`` on its own, in a
fresh namespace that holds

- ``math``, ``numpy as np``, ``torch``, ``torch.nn as nn`` and ``torch.nn.functional as F``;
- every exercise of the book that the notebook imports from coursekit (its set-up cell's
  ``from coursekit.attention import masked_softmax``, say), bound to coursekit's implementation;
- the earlier exercises of the same chapter that the suite names as upstream, bound to
  coursekit's implementation as well, so that one bug is not charged twice.

:func:`provided_names` reads the imports from the notebook's code (the batch grader from the
submission's cells, ``check()`` from the cells the kernel has executed), so both derive the
namespace the same way. A helper an exercise needs belongs inside its exercise cell.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterable
from typing import Any

from coursekit.grading.protocol import blocked_import
from coursekit.grading.submissions import PARSING

PRELUDE = (
    "import math\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
    "import torch.nn.functional as F\n"
)
_MAGIC = re.compile(r"^\s*[%!].*$", re.MULTILINE)


def provided_names(sources: Iterable[str], exercises: Iterable[str]) -> dict[str, str]:
    """``{name in the namespace: exercise name}`` for every exercise that the code cells
    ``sources`` import from coursekit (``from coursekit... import x [as y]``)."""
    known = set(exercises)
    found: dict[str, str] = {}
    for source in sources:
        if not isinstance(source, str) or "coursekit" not in source or len(source) > 1 << 20:
            continue
        try:
            with PARSING:
                tree = ast.parse(_MAGIC.sub("", source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == "coursekit" or node.module.startswith("coursekit.")):
                for alias in node.names:
                    if alias.name in known:
                        found[alias.asname or alias.name] = alias.name
    return found


def _withheld_import(name, globals=None, locals=None, fromlist=(), level=0):
    """``__import__`` for an exercise cell run in this process: coursekit is loaded here, but the
    batch grader's worker cannot import it, so the cell may not either (the same error)."""
    error = blocked_import(name) if level == 0 else None
    if error is not None:
        raise error
    return builtins.__import__(name, globals, locals, fromlist, level)


def exercise_globals(provided: dict[str, str], suites: dict) -> dict[str, Any]:
    """A fresh namespace for one exercise cell (in this process): the prelude and the provided
    exercises, bound to their ``solution``; importing coursekit fails there as in the worker."""
    namespace: dict[str, Any] = {"__name__": "__submission__",
                                 "__builtins__": {**vars(builtins), "__import__": _withheld_import}}
    exec(PRELUDE, namespace)
    for local, name in provided.items():
        if name in suites:
            namespace[local] = suites[name].solution
    return namespace


def load_exercise(suite, source: str, provided: dict[str, str], suites: dict) -> tuple[Any, str]:
    """Run one exercise cell as the batch grader does; return ``(what it defines, "")`` or
    ``(None, why not)``. The upstream exercises are bound after the cell ran, as the grader's
    worker binds them before each case."""
    namespace = exercise_globals(provided, suites)
    try:
        exec(compile(source, f"<exercise {suite.exercise}>", "exec", dont_inherit=True),
             namespace)
    except Exception as err:  # the student's cell, reported as the batch grader reports it
        return None, f"the cell did not run: {type(err).__name__}: {err}"
    for name in suite.upstream:
        if name in suites:
            namespace[name] = suites[name].solution
    if suite.name not in namespace:
        return None, f"the exercise cell does not define `{suite.name}`"
    return namespace[suite.name], ""


def exercise_namespace(nb, run_cells: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Execute a notebook's exercise cells, each in its own namespace (see the module
    docstring); return ``{exercise name: the object it defines}`` and per-exercise load errors.

    A cell that fails to run (syntax error, exception at definition time) costs only its own
    exercise: the error is recorded under the exercise's name and the other cells still run.
    """
    from coursekit.grading.registry import all_suites
    from coursekit.release import exercises

    suites = all_suites()
    provided = provided_names([c.source for c in nb.cells if c.cell_type == "code"], suites)
    defined: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for ex in exercises(nb):
        source = nb.cells[ex.cell_index].source
        if not run_cells:
            try:
                compile(source, f"<exercise {ex.exercise}>", "exec")
            except SyntaxError as err:
                errors[ex.name] = f"the cell did not run: SyntaxError: {err}"
            continue
        if ex.name not in suites:
            errors[ex.name] = "no suite grades this exercise"
            continue
        found, error = load_exercise(suites[ex.name], source, provided, suites)
        if error:
            errors[ex.name] = error
        else:
            defined[ex.name] = found
    return defined, errors
