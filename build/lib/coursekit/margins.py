"""The margin of every ``assert`` a notebook makes, recorded while ``coursekit validate`` runs it.

An assertion such as ``assert acc > 0.8`` passes or fails; what a reviewer needs is how far from
its bound the quantity sits, under every seed. While a notebook runs under ``coursekit
validate``, an IPython AST transformer (installed through a start-up file in a private
``IPYTHONDIR``) rewrites each ``assert`` whose test is a comparison, or an ``and`` of comparisons,
so that the compared values are computed once, appended to a JSON-lines log, and then compared
exactly as written. Nothing else in the notebook changes, and a notebook run without
``coursekit validate`` is not touched.

The margin of ``a > b`` or ``a >= b`` is ``a - b``; of ``a < b`` or ``a <= b``, ``b - a``: positive
when the assertion holds, and the distance the quantity may move before it fails.
"""

from __future__ import annotations

import ast
import json
import math
import os
from collections import defaultdict
from pathlib import Path

LOG_ENV = "COURSEKIT_ASSERT_LOG"
NOTEBOOK_ENV = "COURSEKIT_ASSERT_NOTEBOOK"
ORDER = {ast.Gt: 1, ast.GtE: 1, ast.Lt: -1, ast.LtE: -1}  # sign of (left - right) that passes
SYMBOL = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}


def _number(value) -> float | None:
    try:
        number = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def record(text: str, values: tuple, ops: tuple[str, ...]) -> tuple:
    """Log one evaluated comparison ``values[0] ops[0] values[1] ...``; return the values."""
    path = os.environ.get(LOG_ENV)
    if path:
        numbers = [_number(v) for v in values]
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"notebook": os.environ.get(NOTEBOOK_ENV, ""), "assert": text,
                                  "values": numbers, "ops": list(ops)}) + "\n")
    return values


class _Rewrite(ast.NodeTransformer):
    """``assert a > b and c < d, msg`` -> each comparison's operands evaluated once, logged,
    then compared as written (so a failing assertion fails with its own message)."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(
            node.test.op, ast.And) else [node.test]
        if not all(isinstance(t, ast.Compare) and all(type(o) in ORDER for o in t.ops)
                   for t in tests):
            return node
        new_tests = []
        for test in tests:
            text = ast.unparse(test)
            operands = [test.left, *test.comparators]
            ops = tuple(SYMBOL[type(o)] for o in test.ops)
            call = ast.Call(  # __coursekit_record(text, (a, b, ...), ops) -> (a, b, ...)
                func=ast.Name("__coursekit_record", ast.Load()),
                args=[ast.Constant(text), ast.Tuple(operands, ast.Load()),
                      ast.Tuple([ast.Constant(o) for o in ops], ast.Load())], keywords=[])
            values = ast.NamedExpr(ast.Name("__coursekit_values", ast.Store()), call)
            picked = [ast.Subscript(ast.Name("__coursekit_values", ast.Load()), ast.Constant(i),
                                    ast.Load()) for i in range(len(operands))]
            first = ast.Subscript(values, ast.Constant(0), ast.Load())
            new_tests.append(ast.Compare(first, test.ops, picked[1:]))
        # in an `and`, later comparisons are evaluated (and logged) only when earlier ones hold
        test = new_tests[0] if len(new_tests) == 1 else ast.BoolOp(ast.And(), new_tests)
        return ast.copy_location(ast.Assert(test, node.msg), node)


def load_ipython_extension(ip) -> None:
    """Installed by the start-up file ``coursekit validate`` writes into its ``IPYTHONDIR``."""
    ip.user_ns["__coursekit_record"] = record
    ip.ast_transformers.append(_Rewrite())


def ipython_dir(folder: Path) -> Path:
    """An ``IPYTHONDIR`` whose default profile loads the recorder at kernel start."""
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-coursekit-margins.py").write_text(
        "get_ipython().extension_manager.load_extension('coursekit.margins')\n")
    return folder


def margin(values: list[float | None], ops: list[str]) -> float | None:
    """The smallest slack of a chain ``v0 op0 v1 op1 v2``: positive when it holds."""
    slacks = []
    for a, b, op in zip(values, values[1:], ops, strict=False):
        if a is None or b is None:
            return None
        slacks.append(a - b if op.startswith(">") else b - a)
    return min(slacks)


def summarise(logs: dict[int, Path]) -> list[dict]:
    """Per (notebook, assertion): each seed's tightest margin and the values then compared."""
    table: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for seed, path in logs.items():
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            m = margin(entry["values"], entry["ops"])
            if m is None:
                continue
            key = (entry["notebook"], entry["assert"])
            seen = table[key].get(seed)
            if seen is None or m < seen["margin"]:
                table[key][seed] = {"margin": m, "values": entry["values"], "ops": entry["ops"]}
    rows = []
    for (notebook, text), by_seed in table.items():
        margins = [v["margin"] for v in by_seed.values()]
        rows.append({"notebook": notebook, "assert": text, "seeds": sorted(by_seed),
                     "min_margin": min(margins), "max_margin": max(margins),
                     "per_seed": {str(s): v for s, v in sorted(by_seed.items())}})
    return sorted(rows, key=lambda r: (r["notebook"], r["assert"]))
