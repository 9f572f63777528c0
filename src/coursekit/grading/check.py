"""``check(fn)``: instant feedback on an exercise, in the student's own notebook."""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable, Set
from typing import Any

from coursekit.grading.cells import load_exercise, provided_names
from coursekit.grading.registry import all_suites, get_suite
from coursekit.grading.suite import Suite, SuiteResult, not_run, run_suite


def _points(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.2f}"


def format_result(result: SuiteResult, hidden: Set[int] = frozenset()) -> str:
    """The text ``check`` prints: a header with points, one ✓/✗ line per case, the hint.

    ``hidden`` cases (the instructor's) are only counted: their names and messages stay out.
    """
    suite = result.suite
    head = f"Exercise {suite.exercise} · {suite.name}"
    if result.status == "not attempted":
        return (f"{head}: not attempted yet (0 / {_points(suite.points)} points).\n"
                f"Replace the `raise NotImplementedError` with your code and run this cell again.")
    lines = [f"{head}: {_points(result.earned)} / {_points(suite.points)} points"
             f" ({sum(c.earned == c.points for c in result.cases)}/{len(result.cases)} cases)"]
    shown = [c for i, c in enumerate(result.cases) if i not in hidden]
    width = max((len(c.name) for c in shown), default=0)
    for case in shown:
        mark = "✓" if case.earned == case.points else "✗"
        lines.append(f"  {mark} {case.name:<{width}}  {case.message}")
    if hidden:
        passed = sum(result.cases[i].earned == result.cases[i].points for i in hidden)
        lines.append(f"  {len(hidden)} hidden case(s): {passed} passed")
    if result.hint:
        lines.append(f"Hint: {result.hint}")
    return "\n".join(lines)


def cell_source(fn: Any) -> str | None:
    """The whole source of the notebook cell that defined ``fn``, when it was defined in a cell
    (IPython keeps each cell's source in ``linecache`` under a name that is not a real file)."""
    if getattr(fn, "__module__", None) != "__main__":
        return None
    if isinstance(fn, type):
        functions = [v for v in vars(fn).values() if hasattr(v, "__code__")]
    else:
        functions = [fn] if hasattr(fn, "__code__") else []
    for function in functions:
        filename = function.__code__.co_filename
        if filename.startswith("<") and not filename.startswith("<ipython-input-"):
            continue
        if not filename.startswith("<") and os.path.exists(filename):
            continue
        lines = linecache.getlines(filename)
        if lines:
            return "".join(lines)
    return None


def executed_cells() -> list[str]:
    """The sources of the cells this kernel has run, as IPython keeps them in ``linecache``
    under names that are not files. Unlike the history ``In``, they are kept for cells run
    without history too, as nbval runs every cell (``store_history=False``)."""
    return ["".join(entry[2]) for name, entry in list(linecache.cache.items())
            if len(entry) == 4 and entry[1] is None and not os.path.exists(name)]


def notebook_provided(fn: Any) -> dict[str, str]:
    """The exercises the notebook imports from coursekit, read from the cells the kernel has
    executed (its history ``In`` and :func:`executed_cells`) as the batch grader reads them
    from the submission's cells."""
    history = getattr(fn, "__globals__", None) or {}
    if isinstance(fn, type):
        method = next((v for v in vars(fn).values() if hasattr(v, "__globals__")), None)
        history = method.__globals__ if method else {}
    cells = history.get("In")
    if not isinstance(cells, list):
        return {}
    return provided_names([c for c in [*cells, *executed_cells()] if isinstance(c, str)],
                          all_suites())


def grade_source(suite: Suite, source: str, provided: dict[str, str] | None = None) -> SuiteResult:
    """Grade an exercise cell's source in this process, exactly as ``coursekit grade`` runs it:
    the cell alone, in the namespace :mod:`coursekit.grading.cells` describes."""
    found, error = load_exercise(suite, source, provided or {}, all_suites())
    if error:
        return not_run(suite, error)
    return run_suite(suite, found)


def check(fn: Callable, name: str | None = None) -> Callable:
    """Grade ``fn`` against its exercise suite, print the feedback, and return what to use next.

    Returns ``fn`` itself when it earns full marks; otherwise coursekit's implementation, so the
    rest of the chapter runs either way. The suite is found by ``fn.__name__`` unless ``name``
    (an exercise name or id such as ``"01.2"``) is given.

    When ``fn`` was defined in a notebook cell, that cell is graded the way ``coursekit grade``
    grades it (on its own, in the grader's namespace), so the two always agree; a function from
    elsewhere is graded as it is.
    """
    suite = get_suite(name or getattr(fn, "__name__", ""))
    source = cell_source(fn)
    if source is not None and getattr(fn, "__name__", None) == suite.name:
        result = grade_source(suite, source, notebook_provided(fn))
    else:
        result = run_suite(suite, fn)
    print(format_result(result))
    if result.status == "passed":
        return fn
    print(f"The rest of the chapter uses coursekit's {suite.name}.")
    return suite.solution
