"""``check(fn)``: instant feedback on an exercise, in the student's own notebook."""

from __future__ import annotations

from collections.abc import Callable, Set

from coursekit.grading.registry import get_suite
from coursekit.grading.suite import SuiteResult, run_suite


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


def check(fn: Callable, name: str | None = None) -> Callable:
    """Grade ``fn`` against its exercise suite, print the feedback, and return what to use next.

    Returns ``fn`` itself when it earns full marks; otherwise coursekit's implementation, so the
    rest of the chapter runs either way. The suite is found by ``fn.__name__`` unless ``name``
    (an exercise name or id such as ``"01.2"``) is given.
    """
    suite = get_suite(name or getattr(fn, "__name__", ""))
    result = run_suite(suite, fn)
    print(format_result(result))
    if result.status == "passed":
        return fn
    print(f"The rest of the chapter uses coursekit's {suite.name}.")
    return suite.solution
