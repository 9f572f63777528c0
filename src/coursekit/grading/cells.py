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
import types
from collections.abc import Iterable
from typing import Any

from coursekit.grading.protocol import blocked_import
from coursekit.grading.submissions import PARSING

PRELUDE = (
    "import math\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
    "import torch.nn.functional as F\n"
)
_MAGIC = re.compile(r"^\s*[%!].*$", re.MULTILINE)


_IMPORT = re.compile(r"^[ \t]*from[ \t]+coursekit(?:\.[\w.]+)?[ \t]+import[ \t]+"
                     r"(?:\([^)]{0,4000}\)|[^\n]{0,4000})", re.MULTILINE)


def provided_names(sources: Iterable[str], exercises: Iterable[str]) -> dict[str, str]:
    """``{name in the namespace: exercise name}`` for every exercise that the code cells
    ``sources`` import from coursekit (``from coursekit... import x [as y]``). Only the import
    statements are parsed, one at a time, so a cell's size costs the grader nothing more."""
    known = set(exercises)
    found: dict[str, str] = {}
    for source in sources:
        if not isinstance(source, str) or "coursekit" not in source:
            continue
        for match in _IMPORT.finditer(source):
            try:
                with PARSING:
                    tree = ast.parse(match.group(0).strip())
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                        node.module == "coursekit" or node.module.startswith("coursekit.")):
                    for alias in node.names:
                        if alias.name in known:
                            found[alias.asname or alias.name] = alias.name
    return found


def book_order(suite) -> tuple:
    """Where an exercise stands in the book: its notebook (or chapter), then its number."""
    return (suite.key, int(suite.exercise.split(".")[1]))


def _code_of(obj: Any) -> list[tuple[types.CodeType, dict]]:
    """The code objects (with their globals) of a coursekit function, or of every method of a
    coursekit class and its coursekit bases."""
    if isinstance(obj, types.FunctionType):
        return [(obj.__code__, obj.__globals__)]
    found = []
    if isinstance(obj, type):
        for cls in obj.__mro__:
            if not cls.__module__.startswith("coursekit"):
                continue
            for member in vars(cls).values():
                member = getattr(member, "__func__", member)  # staticmethod, classmethod
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, types.FunctionType):
                    found.append((member.__code__, member.__globals__))
    return found


def reachable(start: Any, limit: int = 5000) -> set[int]:
    """``id`` of every coursekit function and class that ``start`` can call, directly or
    through others: the names its code reads, looked up in its module (and in the coursekit
    modules it reads them from), followed transitively. Read from the code, never run."""
    seen: set[int] = set()
    todo = [start]
    while todo and len(seen) < limit:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for code, space in _code_of(obj):
            codes = [code]
            while codes:
                c = codes.pop()
                codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
                modules = [space] + [vars(v) for v in space.values()
                                     if isinstance(v, types.ModuleType)
                                     and v.__name__.startswith("coursekit")]
                for name in c.co_names:
                    for module in modules:
                        found = module.get(name)
                        if (isinstance(found, (types.FunctionType, type))
                                and getattr(found, "__module__", "").startswith("coursekit")):
                            todo.append(found)
    return seen


_COMPUTES: dict[tuple[str, str], bool] = {}


def usable_provided(provided: dict[str, str], target: str, suites: dict) -> dict[str, str]:
    """The provided exercises that exercise ``target``'s cell may use: only those that come
    before it in the book and whose reference cannot compute it, by what their code calls
    (``SelfAttention`` calls ``scaled_dot_product_attention``: never provided to 03.1), not by
    their name. A reference that computes the exercise being graded would earn its points."""
    if target not in suites:
        return {}
    mine = suites[target]
    usable = {}
    for local, name in provided.items():
        if name == target or name not in suites:
            continue
        other = suites[name]
        if book_order(other) >= book_order(mine):
            continue
        key = (name, target)
        if key not in _COMPUTES:
            _COMPUTES[key] = id(mine.solution) in reachable(other.solution)
        if not _COMPUTES[key]:
            usable[local] = name
    return usable


def _withheld_import(name, globals=None, locals=None, fromlist=(), level=0):
    """``__import__`` for an exercise cell run in this process: coursekit is loaded here, but the
    batch grader's worker cannot import it, so the cell may not either (the same error)."""
    error = blocked_import(name) if level == 0 else None
    if error is not None:
        raise error
    return builtins.__import__(name, globals, locals, fromlist, level)


def exercise_globals(provided: dict[str, str], suites: dict, target: str) -> dict[str, Any]:
    """A fresh namespace for exercise ``target``'s cell (in this process): the prelude and the
    provided exercises it may use (:func:`usable_provided`), bound to their ``solution``;
    importing coursekit fails there as in the worker."""
    namespace: dict[str, Any] = {"__name__": "__submission__",
                                 "__builtins__": {**vars(builtins), "__import__": _withheld_import}}
    exec(PRELUDE, namespace)
    for local, name in usable_provided(provided, target, suites).items():
        namespace[local] = suites[name].solution
    return namespace


def load_exercise(suite, source: str, provided: dict[str, str], suites: dict) -> tuple[Any, str]:
    """Run one exercise cell as the batch grader does; return ``(what it defines, "")`` or
    ``(None, why not)``. The upstream exercises are bound after the cell ran, as the grader's
    worker binds them before each case."""
    namespace = exercise_globals(provided, suites, suite.name)
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
