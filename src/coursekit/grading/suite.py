"""Exercise suites: seeded cases, an authority-backed reference, known wrong implementations.

A suite runs the same way in a student's notebook (:func:`coursekit.grading.check`) and in the
batch grader. The verdict is always the comparison of the submission's outputs with the
reference's outputs on the same inputs; the hint for a failure comes from *mutants*, plausible
wrong implementations recorded with the suite: when a submission's outputs match a mutant's, the
mutant's hint names the bug. The same mutants prove, in the tests, that each suite catches them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import torch

Outputs = list[torch.Tensor]
ADVICE = "Compare your code with the equation above, step by step."


@dataclass(frozen=True)
class Case:
    """One graded call. ``make(generator)`` returns the positional arguments (seeded, fresh each time)."""

    name: str
    make: Callable[[torch.Generator], tuple]
    points: float = 1.0
    hint: str = ""  # what this case probes; shown when it fails and no mutant explains the failure


@dataclass(frozen=True)
class Mutant:
    """A plausible wrong implementation and the hint that names its bug."""

    name: str
    fn: Callable
    hint: str


@dataclass
class Suite:
    """Everything needed to grade one exercise.

    ``reference`` decides the verdict (it is tied to the authority: ``torch.nn``,
    ``F.scaled_dot_product_attention``, ...); ``solution`` is the coursekit implementation the
    chapter continues with when the exercise is not done yet (defaults to ``reference``).
    ``call(fn, args)`` adapts a submission to the case arguments (default ``fn(*args)``), so class
    exercises can be built and fed weights.
    """

    exercise: str
    name: str
    points: float
    reference: Callable
    cases: list[Case]
    mutants: list[Mutant] = field(default_factory=list)
    solution: Callable | None = None
    call: Callable[[Callable, tuple], Any] | None = None
    upstream: tuple[str, ...] = ()
    atol: float = 1e-5
    rtol: float = 1e-4
    hint: str = ""  # general advice when nothing more specific applies

    def __post_init__(self) -> None:
        if self.solution is None:
            self.solution = self.reference
        if not self.cases:
            raise ValueError(f"suite {self.name} has no cases")

    def inputs(self, index: int) -> tuple:
        """Fresh, seeded arguments for case ``index`` (the same on every call and machine)."""
        seed = zlib.crc32(f"{self.exercise}/{self.cases[index].name}".encode())
        return self.cases[index].make(torch.Generator().manual_seed(seed))

    def run(self, fn: Callable, args: tuple) -> Any:
        return self.call(fn, args) if self.call else fn(*args)

    def case_points(self, index: int) -> float:
        total = sum(c.points for c in self.cases)
        return self.points * self.cases[index].points / total


# ----------------------------------------------------------------------------- comparison


class OutputError(Exception):
    """A submission returned something that is not what the exercise asks for."""


def as_outputs(value: Any, what: str = "output") -> Outputs:
    """A tensor, or a tuple/list of tensors, as a flat list. Exact types only: no subclasses."""
    if type(value) is torch.Tensor:
        return [value]
    if type(value) in (tuple, list):
        out = []
        for i, item in enumerate(value):
            if type(item) is not torch.Tensor:
                raise OutputError(
                    f"{what}[{i}] is a {type(item).__name__}, expected a torch.Tensor"
                )
            out.append(item)
        return out
    raise OutputError(f"{what} is a {type(value).__name__}, expected a torch.Tensor or a tuple of them")


@dataclass
class Comparison:
    ok: bool
    message: str
    max_abs: float = float("nan")
    max_rel: float = float("nan")


def compare(expected: Outputs, actual: Outputs, atol: float, rtol: float) -> Comparison:
    """Strict structure first (count, dtype, shape, finite), then ``torch.testing`` tolerances."""
    if len(actual) != len(expected):
        return Comparison(False, f"returned {len(actual)} tensor(s), expected {len(expected)}")
    worst_abs = worst_rel = 0.0
    for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
        label = f"output {k}: " if len(expected) > 1 else ""
        if a.dtype != e.dtype:
            return Comparison(False, f"{label}dtype {a.dtype}, expected {e.dtype}")
        if tuple(a.shape) != tuple(e.shape):
            return Comparison(False, f"{label}shape {tuple(a.shape)}, expected {tuple(e.shape)}")
        a, e = a.detach().cpu(), e.detach().cpu()
        if a.is_floating_point() and not torch.isfinite(a).all() and torch.isfinite(e).all():
            bad = (~torch.isfinite(a)).nonzero()[0].tolist()
            return Comparison(False, f"{label}non-finite value {a[tuple(bad)].item()} at {tuple(bad)}")
        if a.numel() == 0:
            continue
        finite = torch.isfinite(e)
        agree = (a == e) | (torch.isnan(a) & torch.isnan(e))
        wrong = ~agree & ~(finite & torch.isfinite(a))
        if wrong.any():  # a NaN or an infinity where the other side has something else
            where = tuple(wrong.nonzero()[0].tolist())
            return Comparison(False, f"{label}at index {where}: got {a[where].item():.6g}, "
                                     f"expected {e[where].item():.6g}")
        # The non-finite values agree: the error is measured on the finite ones.
        diff = torch.where(finite, a.double() - e.double(), 0).abs()
        rel = diff / torch.where(finite, e.double().abs(), 1).clamp_min(1e-12)
        worst_abs, worst_rel = max(worst_abs, diff.max().item()), max(worst_rel, rel.max().item())
        try:
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)
        except AssertionError:
            where = tuple(torch.unravel_index(diff.argmax(), diff.shape))
            where = tuple(int(i) for i in where)
            return Comparison(
                False,
                f"{label}max |Δ| {diff.max().item():.2e} (relative {rel.max().item():.2e}) "
                f"at index {where}: got {a[where].item():.6g}, expected {e[where].item():.6g}",
                worst_abs,
                worst_rel,
            )
    return Comparison(True, f"max |Δ| {worst_abs:.1e}", worst_abs, worst_rel)


# ----------------------------------------------------------------------------- running


@dataclass
class CaseResult:
    name: str
    points: float
    earned: float
    message: str
    outputs: Outputs | None = None  # the submission's outputs (None when it raised)


@dataclass
class SuiteResult:
    suite: Suite
    cases: list[CaseResult]
    status: str  # "passed", "partial", "failed", "not attempted"
    hint: str = ""

    @property
    def earned(self) -> float:
        return round(sum(c.earned for c in self.cases), 9)  # no 2.9999999999999996 for 3

    @property
    def points(self) -> float:
        return self.suite.points


def describe_exception(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"raised {type(err).__name__}: {text[-1] if text else ''}".rstrip(": ")


def reference_outputs(suite: Suite, index: int) -> Outputs:
    with torch.no_grad():
        return [t.detach() for t in as_outputs(suite.run(suite.reference, suite.inputs(index)))]


def grade_outputs(suite: Suite, submitted: Sequence[Outputs | str],
                  hidden: Set[int] = frozenset()) -> SuiteResult:
    """Verdicts from what a submission produced: per case, its outputs or an error message.

    This is the half of grading that runs in the grader's own process: it never calls student
    code. :func:`run_suite` and the batch grader both end here. ``hidden`` cases (the
    instructor's) count like the others, but the hint never comes from them.
    """
    results = []
    for i, got in enumerate(submitted):
        points = suite.case_points(i)
        if isinstance(got, str):
            results.append(CaseResult(suite.cases[i].name, points, 0.0, got))
            continue
        verdict = compare(reference_outputs(suite, i), got, suite.atol, suite.rtol)
        results.append(CaseResult(suite.cases[i].name, points, points if verdict.ok else 0.0,
                                  verdict.message, got))
    not_attempted = all(isinstance(g, str) and g.startswith("raised NotImplementedError")
                        for g in submitted)
    if not_attempted:
        return SuiteResult(suite, results, "not attempted")
    earned = sum(r.earned for r in results)
    status = "passed" if all(r.earned == r.points for r in results) else (
        "partial" if earned > 0 else "failed")
    hint = "" if status == "passed" else diagnose(suite, results, hidden)
    return SuiteResult(suite, results, status, hint)


def diagnose(suite: Suite, results: list[CaseResult], hidden: Set[int] = frozenset()) -> str:
    """The hint for a failing submission: the mutant that reproduces its failures, if any.
    Only the failures of cases that are not ``hidden`` are looked at."""
    failed = [i for i, r in enumerate(results) if r.earned < r.points and i not in hidden]
    best, best_matches = None, 0
    for mutant in suite.mutants:
        matches = 0
        for i in failed:
            got = results[i].outputs
            if got is None:
                continue
            try:
                with torch.no_grad():
                    expected = as_outputs(suite.run(mutant.fn, suite.inputs(i)))
            except Exception:
                continue
            if compare(expected, got, suite.atol, suite.rtol).ok:
                matches += 1
        if matches > best_matches:
            best, best_matches = mutant, matches
    if best is not None:
        return best.hint
    if not failed:  # only hidden cases failed: nothing about them may show
        return suite.hint or ADVICE
    first = results[failed[0]]
    case = suite.cases[failed[0]]
    if first.outputs is None and "NotImplementedError" not in first.message:
        return f"The call {first.message}. " + (case.hint or suite.hint)
    return case.hint or suite.hint or ADVICE


def run_suite(suite: Suite, fn: Callable) -> SuiteResult:
    """Call ``fn`` on every case (in this process) and grade what it returns."""
    submitted: list[Outputs | str] = []
    for i in range(len(suite.cases)):
        try:
            submitted.append(as_outputs(suite.run(fn, suite.inputs(i))))
        except OutputError as err:
            submitted.append(f"returned the wrong type: {err}")
        except Exception as err:  # the student's bug, reported, never raised
            submitted.append(describe_exception(err))
    return grade_outputs(suite, submitted)
