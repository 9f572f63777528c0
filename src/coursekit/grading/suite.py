"""Exercise suites: seeded cases, an authority-backed reference, known wrong implementations.

A suite runs the same way in a student's notebook (:func:`coursekit.grading.check`) and in the
batch grader. The verdict is always the comparison of the submission's outputs with the
reference's outputs on the same inputs; the hint for a failure comes from *mutants*, plausible
wrong implementations recorded with the suite: when a submission's outputs match a mutant's, the
mutant's hint names the bug. The same mutants prove, in the tests, that each suite catches them.
"""

from __future__ import annotations

import contextvars
import inspect
import re
import threading
import zlib
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import torch

from coursekit.grading.autodiff import backward_call

Outputs = list[torch.Tensor]
_CASE_GRAD: contextvars.ContextVar[bool] = contextvars.ContextVar("case_grad", default=True)
ADVICE = "Compare your code with the equation above, step by step."


@dataclass(frozen=True)
class Case:
    """One graded call. ``make(generator)`` returns the positional arguments (seeded, fresh each time)."""

    name: str
    make: Callable[[torch.Generator], tuple]
    points: float = 1.0
    hint: str = ""  # the one property this case probes; shown when it is the telling failure
    # Whether the suite's gradients are compared on this case too (not where the inputs are
    # numerically extreme on purpose: float32 gradients there are noise).
    grad: bool = True
    # Tolerances of this case where they differ from the suite's (a float16 or bfloat16 case
    # rounds at 1e-3 or 1e-2 of the values): None keeps the suite's.
    atol: float | None = None
    rtol: float | None = None

    def tolerances(self, suite: Suite) -> tuple[float, float]:
        return (suite.atol if self.atol is None else self.atol,
                suite.rtol if self.rtol is None else self.rtol)


# ----------------------------------------------------------------------------- cases over the contract
#
# A suite's cases should cover the range its exercise's contract allows, not only the float32
# tensors and lists its examples use: a submission that hard-codes float32 constants, or takes
# one matrix's scale for a whole batch, or indexes a list where a tuple is allowed, must meet a
# case that tells. These derive such cases from a plain one, so that every suite draws them the
# same way (issue 48, class 1).

# What float16 and bfloat16 round to: the reference computes in the case's dtype too, so a
# right answer differs from it by a few units in the last place (eps 9.8e-4 and 7.8e-3).
LOW_PRECISION = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2)}


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if type(value) in (tuple, list):
        return type(value)(_map_tensors(v, fn) for v in value)
    if type(value) is dict:
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def derived(case: Case, name: str, transform: Callable[[tuple], tuple], hint: str = "",
            **changes: Any) -> Case:
    """A new case whose arguments are ``transform`` of ``case``'s (the same draw, changed):
    the building block of the derivations below. ``changes`` override other fields (points,
    grad, atol, rtol)."""
    make = case.make
    fields = dict(points=case.points, grad=case.grad, atol=case.atol, rtol=case.rtol)
    fields.update(changes)
    return Case(name, lambda g: transform(make(g)), hint=hint, **fields)


def in_dtype(case: Case, dtype: torch.dtype, hint: str = "", only: Sequence[int] | None = None,
             **changes: Any) -> Case:
    """``case`` with its floating-point tensors (those at positions ``only``, or all, inside
    tuples, lists and dicts too) in ``dtype``: the output should come back in the input's
    dtype, computed without float32 constants forced into it. Low-precision dtypes get their
    own tolerances unless ``changes`` give others."""
    def cast(args: tuple) -> tuple:
        return tuple(_map_tensors(a, lambda t: t.to(dtype) if t.is_floating_point() else t)
                     if only is None or k in only else a for k, a in enumerate(args))
    if dtype in LOW_PRECISION:
        atol, rtol = LOW_PRECISION[dtype]
        changes = {"atol": atol, "rtol": rtol, "grad": False, **changes}
    short = str(dtype).removeprefix("torch.")
    return derived(case, f"{case.name}, in {short}", cast, hint or (
        f"This case passes {short} tensors: compute in the input's dtype (a constant made with "
        f"torch.tensor(...) or torch.ones(...) is float32 unless you pass dtype=x.dtype) and "
        f"return {short}."), **changes)


def scaled_batch(case: Case, position: int, factors: Sequence[float], hint: str = "",
                 **changes: Any) -> Case:
    """``case`` with batch element b of the tensor argument at ``position`` multiplied by
    ``factors[b]`` (cycled): matrices of one batch many orders of magnitude apart, so that a
    scale, a norm or a maximum taken over the whole batch instead of per element shows."""
    def scale(args: tuple) -> tuple:
        args = list(args)
        t = args[position]
        f = torch.tensor([factors[b % len(factors)] for b in range(t.shape[0])], dtype=t.dtype)
        args[position] = t * f.reshape(-1, *([1] * (t.dim() - 1)))
        return tuple(args)
    shown = ", ".join(f"{f:g}" for f in factors)
    return derived(case, f"{case.name}, batch elements scaled by {shown}", scale, hint or (
        "In this case the batch's elements differ in scale by orders of magnitude: whatever "
        "your code computes per element (a norm, a maximum, a scale) must come from that "
        "element alone, not from the whole batch."), **changes)


def as_container(case: Case, position: int, kind: type, hint: str = "",
                 **changes: Any) -> Case:
    """``case`` with the list argument at ``position`` passed as a ``kind`` (tuple, or any
    other sequence the docstring allows): code that needs a list's methods shows."""
    def convert(args: tuple) -> tuple:
        args = list(args)
        args[position] = kind(args[position])
        return tuple(args)
    return derived(case, f"{case.name}, as a {kind.__name__}", convert, hint or (
        f"This case passes a {kind.__name__} where the others pass a list, as the docstring "
        "allows: iterate and index it without list-only methods (.append, .copy, +) on the "
        "argument, or convert it with list(...) first."), **changes)


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
    # Names of the case's positional arguments, for "modified in place" messages. Defaults to
    # the parameters of ``solution`` when there is no ``call`` adapter.
    arg_names: tuple[str, ...] = ()
    # The notebook that holds the exercise when a chapter's exercises span several notebooks
    # ("07f" for 07f_bert.ipynb). The registry sets it from the suites module's name (``ch07f``);
    # empty for a chapter whose exercises all live in its first notebook.
    notebook: str = ""
    # ``observe(expected, got) -> str``: what is observably wrong in a failing case's outputs
    # (which output, which way), said without guessing a cause; used when no mutant reproduces
    # the submission. Empty when it sees nothing it can describe.
    observe: Callable[[Outputs, Outputs], str] | None = None
    # Arguments (by name, see ``argument_names``) whose gradients are compared too, for an
    # exercise the chapter trains through: a weighted sum of the outputs is back-propagated
    # (:func:`backward`). A ``call`` adapter asks for gradients itself.
    grad: tuple[str, ...] = ()
    # ``judge(expected, got, atol, rtol) -> Comparison``: the verdict on one case, for a suite
    # whose outputs are not compared element by element (statistics of a random exercise,
    # compared by a test with a fixed false-alarm rate). Defaults to :func:`compare`.
    judge: Callable[[Outputs, Outputs, float, float], Any] | None = None
    # What an observation of :func:`relation` (or of ``observe``) implies for this exercise,
    # where it implies one thing: (regular expression searched in the observation, the
    # diagnosis). "holds the expected values one position earlier along axis 1" is a guess in
    # general, but in a next-token loss it can only mean unshifted targets. Only write a reading
    # that is true of every submission that produces the observation (issue 48, class 4).
    readings: tuple[tuple[str, str], ...] = ()
    # What the last axis of the outputs holds, for observations that name it ("keys, the last
    # axis" for attention weights).
    last_axis: str = "features, the last axis"

    @property
    def chapter(self) -> str:
        return self.exercise.split(".")[0]

    @property
    def key(self) -> str:
        """What a submission is graded as: its notebook ("07b") or its chapter ("03")."""
        return self.notebook or self.chapter

    def __post_init__(self) -> None:
        if self.solution is None:
            self.solution = self.reference
        if not self.cases:
            raise ValueError(f"suite {self.name} has no cases")

    def inputs(self, index: int) -> tuple:
        """Fresh, seeded arguments for case ``index`` (the same on every call and machine)."""
        seed = zlib.crc32(f"{self.exercise}/{self.cases[index].name}".encode())
        return self.cases[index].make(torch.Generator().manual_seed(seed))

    def run(self, fn: Callable, args: tuple, index: int | None = None) -> Any:
        """``fn`` on case ``index``'s arguments ``args``, through the ``call`` adapter, with its
        gradients where the suite compares them."""
        if self.call:  # an adapter asks for gradients with backward(), which reads the flag
            token = _CASE_GRAD.set(index is None or self.cases[index].grad)
            try:
                return self.call(fn, args)
            finally:
                _CASE_GRAD.reset(token)
        if self.grad and (index is None or self.cases[index].grad):
            names = self.argument_names(len(args))
            wrt = {name: names.index(name) for name in self.grad if name in names}
            return backward(fn, args, {name: i for name, i in wrt.items()  # None: not given
                                       if isinstance(args[i], torch.Tensor)
                                       and args[i].is_floating_point()})
        return fn(*args)

    def case_points(self, index: int) -> float:
        total = sum(c.points for c in self.cases)
        return self.points * self.cases[index].points / total

    def argument_names(self, count: int) -> list[str]:
        names = list(self.arg_names)
        if not names and self.call is None:
            try:
                names = [p.name for p in inspect.signature(self.solution).parameters.values()
                         if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            except (TypeError, ValueError):
                names = []
        return names[:count] + [f"argument {i + 1}" for i in range(len(names), count)]

    def modified_arguments(self, index: int, args: tuple) -> list[str]:
        """The arguments of case ``index`` that no longer equal what the case passed in."""
        fresh = self.inputs(index)
        names = self.argument_names(len(fresh))
        return [label for name, a, b in zip(names, args, fresh, strict=False)
                for label in _changed(name, a, b)]


def _changed(label: str, now: Any, before: Any) -> list[str]:
    """The labels of what differs between an argument after the call (``now``) and as the case
    made it (``before``): tensors by value, lists, tuples and dicts deeply, other values by
    ``==`` (a list of ids the call rewrote is modified as a tensor would be)."""
    if isinstance(before, torch.Tensor):
        if not isinstance(now, torch.Tensor) or now.shape != before.shape \
                or now.dtype != before.dtype:
            return [label]
        same = (now == before) | (torch.isnan(now) & torch.isnan(before)) \
            if now.is_floating_point() else now == before
        return [] if bool(same.all()) else [label]
    if isinstance(before, (tuple, list, dict)):
        if type(now) is not type(before) or len(now) != len(before) or (
                isinstance(before, dict) and set(now) != set(before)):
            return [label]
        pairs = ([(f"{label}[{k!r}]", now[k], before[k]) for k in before]
                 if isinstance(before, dict) else
                 [(f"{label}[{i}]", a, b) for i, (a, b) in enumerate(zip(now, before, strict=True))])
        found = []
        for inner, a, b in pairs:
            changed = _changed(inner, a, b)
            # a tensor inside is named; a changed number or string makes the container changed
            found += changed if isinstance(b, (torch.Tensor, tuple, list, dict)) or not changed \
                else [label]
        return list(dict.fromkeys(found))
    if before is None or isinstance(before, (bool, int, float, str)):
        return [] if type(now) is type(before) and (now == before or now != now and
                                                   before != before) else [label]
    return []


def load_parameters(module: Any, parameters: dict) -> None:
    """Load ``parameters`` (name -> tensor) into a submitted module, by its parameters only.

    Every given tensor must land in a parameter of that name, and every parameter must be given;
    buffers and attributes the module adds (a registered causal mask, nanoGPT-style) are its own
    business. Works on a module in this process and on a handle to one in a grading worker.
    """
    missing, unexpected = module.load_state_dict(parameters, strict=False)
    if unexpected:
        raise RuntimeError(f"the module has no parameter(s) {', '.join(map(str, unexpected))}; "
                           f"it must have exactly {', '.join(parameters)}")
    if missing:
        owned = {name for name, _ in module.named_parameters()}
        lost = [m for m in missing if m in owned]
        if lost:
            raise RuntimeError(f"the module has extra parameter(s) {', '.join(map(str, lost))}; "
                               f"it must have exactly {', '.join(parameters)}")


# ----------------------------------------------------------------------------- gradients


@dataclass
class Backward:
    """What a call returned, and the gradients of its backward pass (label -> gradient)."""

    value: Any
    grads: dict[str, torch.Tensor]


def backward(fn: Callable, args: tuple, wrt: dict[str, int], kwargs: dict | None = None,
             params: bool = False, first: int | None = None) -> Backward:
    """Call ``fn(*args, **kwargs)`` and back-propagate through it (:mod:`autodiff`): the
    gradients with respect to the arguments ``wrt`` names (name -> position) and, with
    ``params``, to ``fn``'s trainable parameters (``fn`` is then a module); only the ``first``
    outputs enter the loss when it is given.

    In the batch grader ``fn`` is a handle to an object in the worker, and the backward pass
    runs there. What the call does to its arguments in place is mirrored onto ``args``, so the
    in-place check sees it as with a plain call.
    """
    if not _CASE_GRAD.get():  # a case whose gradients are not compared: the call alone
        return Backward(fn(*args, **(kwargs or {})), {})
    positions = list(wrt.values())
    remote = getattr(type(fn), "_ck_backward", None)
    if remote is not None:
        value, grads, named = remote(fn, args, kwargs or {}, positions, params, first)
    else:
        value, grads, named = backward_call(fn, args, kwargs or {}, positions, params, first)
    labelled = {f"the gradient with respect to `{name}`": g for name, g in zip(wrt, grads,
                                                                             strict=True)}
    labelled.update({f"the gradient of parameter `{name}`": g for name, g in named})
    return Backward(value, labelled)


class Labelled(list):
    """Outputs, and what each one is (``labels``); ``size`` of them are what the call
    returned, the rest its gradients."""

    labels: tuple[str, ...] = ()
    size: int = 0


def _labelled(outputs: Outputs, grads: dict[str, torch.Tensor]) -> Labelled:
    result = Labelled(outputs + list(grads.values()))
    named = ["the output"] if len(outputs) == 1 else [f"output {k}" for k in range(len(outputs))]
    result.labels, result.size = tuple(named + list(grads)), len(outputs)
    return result


# ----------------------------------------------------------------------------- comparison


class OutputError(Exception):
    """A submission returned something that is not what the exercise asks for."""


def as_outputs(value: Any, what: str = "output") -> Outputs:
    """A tensor, or a tuple/list of tensors, as a flat list. A tuple may be a subclass (a
    namedtuple unpacks like a tuple); the tensors must be exactly ``torch.Tensor``. A
    :class:`Backward` gives its value's outputs, then its gradients, labelled."""
    if type(value) is Backward:
        grads = value.grads
        if any(type(g) is not torch.Tensor for g in grads.values()):
            raise OutputError("a gradient came back as something other than a tensor")
        return _labelled(as_outputs(value.value, what), grads)
    if type(value) is torch.Tensor:
        return [value]
    if isinstance(value, tuple) or type(value) is list:
        out = []
        items = tuple.__iter__(value) if isinstance(value, tuple) else iter(value)
        for i, item in enumerate(items):
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
    """Strict structure first (count, dtype, shape, finite), then ``torch.testing`` tolerances.
    Labelled outputs (with gradients) compare what was returned, then which gradients exist
    (a parameter trainable here and frozen there), then every tensor."""
    labels = getattr(expected, "labels", ())
    if labels:
        size, got = expected.size, getattr(actual, "labels", ())
        returned = getattr(actual, "size", len(actual))
        if returned != size:
            return Comparison(False, f"returned {returned} tensor(s), expected {size}")
        extra = [x.removeprefix("the gradient of parameter ") for x in got if x not in labels]
        lost = [x.removeprefix("the gradient of parameter ") for x in labels if x not in got]
        if extra or lost:
            said = [f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} trainable "
                    "(requires_grad), expected frozen (a new nn.Parameter requires grad)"
                    ] if extra else []
            said += [f"{', '.join(lost)} {'is' if len(lost) == 1 else 'are'} not trainable "
                     "(no gradient), expected trainable"] if lost else []
            return Comparison(False, "; ".join(said))
    elif len(actual) != len(expected):
        return Comparison(False, f"returned {len(actual)} tensor(s), expected {len(expected)}")
    worst_abs = worst_rel = 0.0
    for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
        label = f"{labels[k]}: " if labels and len(labels) > 1 else (
            f"output {k}: " if len(expected) > 1 else "")
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
        # A gradient sums over many terms: its rounding scales with its largest entry, so its
        # absolute tolerance is rtol times that (float32 backward passes of the same function
        # differ by about 1e-6 of the gradient's scale).
        gradient = labels and k >= expected.size and e.is_floating_point()
        scale = float(e[finite].abs().max()) if gradient and finite.any() else 0.0
        try:
            torch.testing.assert_close(a, e, atol=atol + rtol * scale, rtol=rtol, equal_nan=True)
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
    modified: tuple[str, ...] = ()  # the arguments it modified in place


@dataclass
class Attempt:
    """What one call of a submission did: its outputs or why there are none, and the arguments
    it modified in place. :func:`grade_outputs` also takes a bare list of outputs or a string."""

    outputs: Outputs | None = None
    error: str = ""
    modified: tuple[str, ...] = ()


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


def one_line(text: Any) -> str:
    """Text on one line: tabs, newlines and runs of spaces become one space."""
    return re.sub(r"\s+", " ", str(text)).strip()


def sentence(text: str) -> str:
    """``text`` ending with exactly one full stop (or its own ? ! or …)."""
    text = one_line(text).rstrip(" .")
    return text + ("" if text.endswith(("?", "!", "…")) else ".") if text else ""


WITHOUT_COURSEKIT = (
    "The grader runs exercise cells without coursekit, which holds the book's own solutions "
    "(in check() as in coursekit grade): write the computation in the cell. What the chapter's "
    "set-up cell imports from coursekit, and the earlier exercises, are provided under their "
    "names without an import.")


def not_run(suite: Suite, message: str) -> SuiteResult:
    """Every case of an exercise that could not run at all: the message says why, and the hint
    what to do when the reason is clear from it (an import of coursekit)."""
    cases = [CaseResult(c.name, suite.case_points(i), 0.0, message)
             for i, c in enumerate(suite.cases)]
    hint = WITHOUT_COURSEKIT if "without coursekit" in message else ""
    return SuiteResult(suite, cases, "failed", hint)


def describe_exception(err: BaseException) -> str:
    lines = [one_line(line) for line in str(err).splitlines()]
    lines = [line for line in lines if line]
    return f"raised {type(err).__name__}: {lines[-1] if lines else ''}".rstrip(": ")


def in_place_message(names: Sequence[str]) -> str:
    which = ", ".join(f"`{n}`" for n in names)
    return f"modified its argument{'s' if len(names) > 1 else ''} {which} in place"


def in_place_hint(names: Sequence[str], containers: bool = False) -> str:
    which = ", ".join(f"`{n}`" for n in names)
    if containers:  # a list or dict argument
        return (f"Your code changes its argument{'s' if len(names) > 1 else ''} {which} in place "
                "(item or slice assignment, `.pop()`, `.append()`, `del`, `.update()`), so the "
                "caller's list or dict is silently changed. Build a new one instead "
                "(`out = []`, then `out.append(...)`, or `list(ids)` first).")
    return (f"Your code modifies its argument{'s' if len(names) > 1 else ''} {which} in place "
            "(an in-place operation such as `x += y`, `x /= s`, `x.mul_(y)` or `m |= mask` on an "
            "argument, or on a view of it), so the caller's tensors are silently changed. Compute "
            "a new tensor instead: `x = x + y`, `x = x / s`, `m = m | mask`.")


def _close(a: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> bool:
    return a.shape == e.shape and torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True)


def relation(expected: Outputs, got: Outputs, atol: float = 1e-5, rtol: float = 1e-4,
             last_axis: str = "features, the last axis") -> str:
    """What relates a wrong output to the expected one, when something simple does: negated,
    transposed, a constant factor, shifted by one position, the same values in another order
    along the last axis, or only some rows wrong. An observation, never a guess at the cause;
    empty when none applies."""
    labels = getattr(expected, "labels", ())
    if labels and getattr(got, "labels", ()) != labels:
        return ""
    for k, (e, a) in enumerate(zip(expected, got, strict=False)):
        if (type(a) is not torch.Tensor or not e.is_floating_point() or a.dtype != e.dtype
                or a.numel() == 0):
            continue
        e, a = e.detach().double().cpu(), a.detach().double().cpu()
        if not (torch.isfinite(a).all() and torch.isfinite(e).all()) or _close(a, e, atol, rtol):
            continue
        label = (labels[k].replace("the output", "your output") if labels else
                 f"output {k}" if len(expected) > 1 else "your output")
        if _close(a, e, 10 * atol, 10 * rtol):  # wrong by rounding only: nothing to observe
            return ""
        if labels and k >= expected.size:  # every returned output is right: a gradient is not
            name = label.removeprefix("the gradient with respect to ").removeprefix(
                "the gradient of parameter ")
            if not a.any():
                return (f"your output is right, but no gradient reaches {name} (zero "
                        "everywhere, expected nonzero): the computation leaves the autograd "
                        "graph somewhere, as `.item()`, `float(...)`, `math.exp`, `.detach()` or "
                        "`torch.no_grad()` do")
            related = relation([e], [a], atol, rtol, last_axis)
            return (f"your output is right, but {label} is not"
                    + (f" ({related.replace('your output', 'it')})" if related else ""))
        if a.numel() < 2:
            return f"{label} is zero" if not a.any() else ""
        tol = dict(atol=10 * atol, rtol=10 * rtol)
        if _close(a, -e, **tol):
            return f"{label} is the expected one negated"
        if e.dim() >= 2 and _close(a, e.transpose(-1, -2), **tol):
            return f"{label} is the transpose of the expected one (its last two axes swapped)"
        if not a.any():
            return f"{label} is zero everywhere"
        if a.shape == e.shape and float((e * e).sum()) > 0:
            c = float((a * e).sum() / (e * e).sum())
            if abs(c - 1) > 1e-3 and abs(c) > 1e-3 and _close(a, c * e, **tol):
                big = c * c if c > 1 else 1 / (c * c)  # a square root, such as √d, is named
                named = (f" ({'' if c > 1 else '1 / '}√{round(big)})"
                         if abs(big - round(big)) < 1e-3
                         and (round(big) >= 16 or abs(big ** 0.5 - round(big ** 0.5)) > 1e-3)
                         else "")
                return f"{label} is the expected one times {c:.4g}{named}, everywhere"
        if a.shape == e.shape:
            for axis in range(a.dim()):
                n = a.shape[axis]
                if n > 2:
                    for lag, way in ((1, "later"), (-1, "earlier")):
                        src = e.narrow(axis, 0, n - 1) if lag == 1 else e.narrow(axis, 1, n - 1)
                        dst = a.narrow(axis, 1, n - 1) if lag == 1 else a.narrow(axis, 0, n - 1)
                        if _close(dst, src, **tol):
                            return (f"{label} holds the expected values one position {way} along "
                                    f"axis {axis} (shifted by one)")
            permuted = _feature_permutation(a, e, tol)
            if permuted:
                return f"{label} {permuted}"
            normalised = _normalised_axis(a, e, tol)
            if normalised is not None:
                return (f"{label} sums to 1 along axis {normalised}; the expected one sums to 1 "
                        f"along its last axis ({a.dim() - 1}): it is normalised over another axis")
            if _close(a.sort(-1).values, e.sort(-1).values, **tol):
                return (f"{label} has the expected values along its last axis, in another "
                        "order")
            if a.dim() >= 2:
                rows_a, rows_e = a.reshape(-1, a.shape[-1]), e.reshape(-1, e.shape[-1])
                bad = ~torch.isclose(rows_a, rows_e, atol=atol, rtol=rtol).all(-1)
                if 0 < int(bad.sum()) <= bad.numel() // 2:
                    first = tuple(int(i) for i in torch.unravel_index(
                        bad.nonzero()[0, 0], a.shape[:-1]))
                    return (f"{label} is right in {int((~bad).sum())} of its {bad.numel()} rows "
                            f"(along the last axis) and wrong in the others, the first at index "
                            f"{first}")
                columns = ~torch.isclose(rows_a, rows_e, atol=atol, rtol=rtol).all(0)
                if 0 < int(columns.sum()) < columns.numel():
                    wrong = columns.nonzero()[:, 0].tolist()
                    shown = ", ".join(map(str, wrong[:6])) + (", ..." if len(wrong) > 6 else "")
                    return (f"{label} is right in {columns.numel() - len(wrong)} of its "
                            f"{columns.numel()} columns ({last_axis}) at every "
                            f"position, and wrong in column{'s' if len(wrong) > 1 else ''} "
                            f"{shown}")
        return ""
    return ""


def _feature_permutation(a: torch.Tensor, e: torch.Tensor, tol: dict) -> str:
    """'has the expected features ... in another order' when the columns (last axis) of ``a``
    are those of ``e``, permuted the same way at every position; else empty."""
    if a.dim() < 2 or a.shape[-1] < 2:
        return ""
    cols_a, cols_e = a.reshape(-1, a.shape[-1]).T, e.reshape(-1, e.shape[-1]).T
    order = []
    for col in cols_a:
        match = [j for j, other in enumerate(cols_e) if j not in order and _close(col, other, **tol)]
        if not match:
            return ""
        order.append(match[0])
    moved = [(i, j) for i, j in enumerate(order) if i != j]
    if not moved:
        return ""
    shown = ", ".join(f"yours {i} = expected {j}" for i, j in moved[:4])
    return (f"has the expected features (last axis) in another order, the same at every "
            f"position ({shown}{', ...' if len(moved) > 4 else ''})")


def _normalised_axis(a: torch.Tensor, e: torch.Tensor, tol: dict) -> int | None:
    """The axis other than the last along which ``a`` sums to 1, when ``e`` is a distribution
    along its last axis (non-negative, each row summing to 1 or 0) and ``a`` is non-negative."""
    if a.dim() < 2 or (e < 0).any() or (a < 0).any():
        return None
    sums = e.sum(-1)
    if not bool(((sums - 1).abs() < 1e-4).logical_or(sums.abs() < 1e-6).all()) or \
            not bool(((sums - 1).abs() < 1e-4).any()):
        return None
    for axis in range(a.dim() - 1):
        if a.shape[axis] > 1 and _close(a.sum(axis), torch.ones_like(a.sum(axis)), **tol):
            return axis
    return None


def _separating_argument(suite: Suite, visible: list[int], failed: list[int]) -> str:
    """'your code fails exactly the cases where `x` is v' when one argument's value tells the
    failing visible cases from the passing ones: a flag (a bool, a string, a tensor given or
    None), or a number shared by at least two failing cases. Empty otherwise."""
    passed = [i for i in visible if i not in failed]
    if not passed:
        return ""
    inputs = {i: suite.inputs(i) for i in visible}
    count = max(len(args) for args in inputs.values())
    names = suite.argument_names(count)

    def value(args: tuple, k: int) -> Any:
        if k >= len(args):
            return "absent"
        v = args[k]
        if v is None or type(v) in (bool, str):
            return v
        if type(v) in (int, float):
            return v
        return "given" if isinstance(v, torch.Tensor) else "other"

    found = []
    for k, name in enumerate(names):
        bad = {repr(value(inputs[i], k)) for i in failed}
        good = {repr(value(inputs[i], k)) for i in passed}
        if len(bad) != 1 or bad & good or "'other'" in bad:
            continue
        v = value(inputs[failed[0]], k)
        flag = v is None or type(v) in (bool, str)
        if not flag and len(failed) < 2:
            continue
        said = ("is given" if v == "given" else "is not given" if v == "absent" else
                f"is {v!r}")
        found.append((not flag, f"`{name}` {said}"))
    if not found:
        return ""
    found.sort(key=lambda item: item[0])
    which = " and ".join(text for rank, text in found if rank == found[0][0])
    return (f"your code fails exactly the case{'s' if len(failed) > 1 else ''} where {which}; "
            "every other case passes")


_REFERENCE_LOCK = threading.RLock()


def reference_outputs(suite: Suite, index: int) -> Outputs:
    """The reference's outputs on case ``index``: computed once per suite object and process
    (a case's inputs are seeded, so they are the same every time), then copied. Grading a batch
    pays for the reference once, not once per submission: checking 07.3 (Hugging Face's
    collator is its reference) takes 1.8-2.0 s the first time, 0.25-0.27 s after."""
    cache = suite.__dict__.setdefault("_reference_outputs", {})
    if index not in cache:
        # One reference at a time: the batch grader's threads may reach a reference that
        # imports a library for the first time (transformers' lazy modules fail an import made
        # from two threads at once with "cannot import name ..."), and each is computed once.
        with _REFERENCE_LOCK:
            if index not in cache:
                with torch.no_grad():
                    outputs = as_outputs(suite.run(suite.reference, suite.inputs(index), index))
                cache[index] = outputs
    outputs = cache[index]
    copied = [t.detach().clone() for t in outputs]
    if isinstance(outputs, Labelled):
        copied = _labelled(copied[:outputs.size],
                           dict(zip(outputs.labels[outputs.size:], copied[outputs.size:],
                                    strict=True)))
    return copied


def _attempt(got: Outputs | str | Attempt) -> Attempt:
    if isinstance(got, Attempt):
        return got
    if isinstance(got, str):
        return Attempt(error=got)
    return Attempt(outputs=got)


def grade_outputs(suite: Suite, submitted: Sequence[Outputs | str | Attempt],
                  hidden: Set[int] = frozenset()) -> SuiteResult:
    """Verdicts from what a submission produced: per case, its outputs or an error message
    (an :class:`Attempt` also says which arguments it modified in place).

    This is the half of grading that runs in the grader's own process: it never calls student
    code. :func:`run_suite` and the batch grader both end here. ``hidden`` cases (the
    instructor's) count like the others, but the hint never comes from them.
    """
    attempts = [_attempt(g) for g in submitted]
    results = []
    for i, got in enumerate(attempts):
        points = suite.case_points(i)
        name = suite.cases[i].name
        if got.outputs is None:
            results.append(CaseResult(name, points, 0.0, got.error, None, got.modified))
            continue
        verdict = (suite.judge or compare)(reference_outputs(suite, i), got.outputs,
                                           *suite.cases[i].tolerances(suite))
        message = verdict.message
        if got.modified:
            message = in_place_message(got.modified) + ("" if not verdict.ok else
                                                        " (its outputs are right)") + (
                "" if verdict.ok else f"; {verdict.message}")
        ok = verdict.ok and not got.modified
        results.append(CaseResult(name, points, points if ok else 0.0, message, got.outputs,
                                  got.modified))
    not_attempted = all(a.outputs is None and a.error.startswith("raised NotImplementedError")
                        for a in attempts)
    if not_attempted:
        return SuiteResult(suite, results, "not attempted")
    earned = sum(r.earned for r in results)
    status = "passed" if all(r.earned == r.points for r in results) else (
        "partial" if earned > 0 else "failed")
    hint = "" if status == "passed" else diagnose(suite, results, hidden)
    return SuiteResult(suite, results, status, hint)


def _mutant_outputs(suite: Suite, mutant: Mutant, index: int) -> Outputs | None:
    """The mutant's outputs on case ``index`` (None where it raises), computed once per process
    under the references' lock, like :func:`reference_outputs` (the cases are seeded)."""
    cache = suite.__dict__.setdefault("_mutant_outputs", {})
    key = (mutant.name, index)
    if key not in cache:
        with _REFERENCE_LOCK:
            if key not in cache:
                try:
                    with torch.no_grad():
                        cache[key] = as_outputs(suite.run(mutant.fn, suite.inputs(index), index))
                except Exception:
                    cache[key] = None
    return cache[key]


def _reproduces(suite: Suite, mutant: Mutant, index: int, result: CaseResult) -> bool:
    """Whether ``mutant`` does on case ``index`` what the submission did: the same outputs
    (within tolerance) where it returned some, an exception where it raised."""
    expected = _mutant_outputs(suite, mutant, index)
    if expected is None:  # the mutant raised
        return result.outputs is None
    if result.outputs is None:
        return False
    return (suite.judge or compare)(expected, result.outputs, *suite.cases[index].tolerances(suite)).ok


def _reading(suite: Suite, observation: str) -> str:
    """The diagnosis the suite reads in ``observation`` (its ``readings``), or empty."""
    return next((said for pattern, said in suite.readings
                 if observation and re.search(pattern, observation)), "")


def diagnose(suite: Suite, results: list[CaseResult], hidden: Set[int] = frozenset()) -> str:
    """The hint for a failing submission, from the visible cases only.

    1. Arguments modified in place: the hint names them.
    2. A mutant that reproduces the submission on every visible case, passes and failures
       alike: its hint names the bug.
    3. A suite that can read its outputs (``observe``) says what is observably wrong.
    4. Otherwise the failing cases speak. What relates the first failing output to the expected
       one (negated, transposed, a constant factor, shifted by one, reordered, some rows wrong;
       :func:`relation`) is stated first, as an observation. When only probing cases (cases
       with a hint) fail, the first of them names the property at fault; when a plain case
       fails too, the bug is not specific to one property and the suite's general advice is
       given. An exception's message
       comes first either way.
    """
    visible = [i for i in range(len(results)) if i not in hidden]
    failed = [i for i in visible if results[i].earned < results[i].points]
    if not failed:  # only hidden cases failed: nothing about them may show
        return suite.hint or ADVICE
    modified = [n for i in failed for n in results[i].modified]
    if modified:
        inputs = suite.inputs(failed[0])
        kinds = dict(zip(suite.argument_names(len(inputs)), inputs, strict=False))
        containers = any(isinstance(kinds.get(n), (list, dict)) for n in modified)
        return in_place_hint(list(dict.fromkeys(modified)), containers)
    for mutant in suite.mutants:
        if all(_reproduces(suite, mutant, i, results[i]) for i in visible):
            return mutant.hint
    if suite.observe is not None:
        seen = next((text for i in failed if results[i].outputs is not None
                     and (text := suite.observe(reference_outputs(suite, i), results[i].outputs))),
                    "")
        if seen:
            return f"{sentence(seen)} {sentence(_reading(suite, seen) or suite.hint or ADVICE)}"
    # what relates the first failing case's output to the expected one, said as an observation
    first = next((i for i in failed if results[i].outputs is not None), None)
    try:  # an observation is a bonus: whatever the outputs, it never stops the grading
        related = "" if first is None else relation(reference_outputs(suite, first),
                                                     results[first].outputs,
                                                     *suite.cases[first].tolerances(suite),
                                                     suite.last_axis)
    except Exception:
        related = ""
    if not related and first is not None and (
            "trainable" in results[first].message
            or re.match(r"((?:output \d+|the output|the \S+ \S+ \S+ `\w+`): )?(dtype|shape) ",
                        results[first].message)
            or results[first].message.startswith("returned ")):
        # which parameters are trainable, a dtype, a shape or a count of outputs that is not
        # the expected one: the structure is the observation
        said = results[first].message
        said = ("your code " + said if said.startswith("returned ") else
                re.sub(r"^(?:(.+?): )?(dtype|shape) ",
                       lambda m: f"{m.group(1) or 'your output'} has {m.group(2)} ", said))
        related = said
    observed = (f"In the case '{suite.cases[first].name}', {sentence(related)} "
                if related else "")
    try:
        separated = _separating_argument(suite, visible, failed)
    except Exception:
        separated = ""
    if separated:
        observed = f"{sentence(separated[0].upper() + separated[1:])} {observed}"
    probes = [i for i in failed if suite.cases[i].hint]
    general = suite.hint or ADVICE
    # A probe's hint only when every failing case probes that one property, and the outputs
    # themselves are wrong (a right output with a wrong gradient is not what a probe probes).
    single = len({suite.cases[i].hint for i in probes}) == 1 and len(probes) == len(failed)
    advice = suite.cases[probes[0]].hint if single and "is right, but" not in related \
        else general
    advice = _reading(suite, observed) or advice
    raised = next((results[i] for i in failed if results[i].outputs is None
                   and results[i].message.startswith("raised ")
                   and "NotImplementedError" not in results[i].message), None)
    if raised is not None:
        if "requires grad" in raised.message:
            advice = ("The grader calls your code with inputs that require gradients, as "
                      "training does, and back-propagates through it: keep the computation in "
                      "torch operations (no .numpy(), no .item()), so that gradients flow.")
        elif "without coursekit" in raised.message:
            advice = WITHOUT_COURSEKIT
        elif raised.message.startswith("raised NameError"):
            missing = re.search(r"name '(\w+)' is not defined", raised.message)
            what = f"`{missing.group(1)}`" if missing else "it"
            advice = ("The grader runs each exercise cell on its own, with math, np, torch, nn, "
                      "F and what the chapter imports from coursekit: define or import "
                      f"{what} inside the exercise cell (a helper or an import in another cell "
                      "is not there).")
        where = suite.cases[next(i for i in failed if results[i] is raised)].name
        advice = _reading(suite, raised.message) or advice
        return f"In the case '{where}', the call {sentence(raised.message)} {sentence(advice)}"
    wrong_type = next((results[i] for i in failed if results[i].outputs is None
                       and results[i].message.startswith("returned the wrong type")), None)
    if wrong_type is not None:
        advice = _reading(suite, wrong_type.message) or advice
        return f"Your code {sentence(wrong_type.message)} {sentence(advice)}"
    return observed + advice


def run_case(suite: Suite, fn: Callable, index: int) -> Attempt:
    """Call ``fn`` on case ``index`` in this process; note the arguments it modified."""
    args = suite.inputs(index)
    try:
        outputs = as_outputs(suite.run(fn, args, index))
        attempt = Attempt(outputs=outputs)
    except OutputError as err:
        attempt = Attempt(error=f"returned the wrong type: {err}")
    except Exception as err:  # the student's bug, reported, never raised
        attempt = Attempt(error=describe_exception(err))
    attempt.modified = tuple(suite.modified_arguments(index, args))
    return attempt


def run_suite(suite: Suite, fn: Callable) -> SuiteResult:
    """Call ``fn`` on every case (in this process) and grade what it returns."""
    return grade_outputs(suite, [run_case(suite, fn, i) for i in range(len(suite.cases))])
