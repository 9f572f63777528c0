"""Every exercise suite is validated: the reference and the book's solution earn full marks, the
untouched student edition earns 0 with no harness error, and every recorded wrong implementation
loses points with its own hint."""

import ast
import inspect
from pathlib import Path

import nbformat
import pytest
import torch

from coursekit.grading.cells import exercise_namespace
from coursekit.grading.registry import all_suites
from coursekit.grading.suite import run_suite
from coursekit.release import exercises

ROOT = Path(__file__).resolve().parents[1]
SUITES = list(all_suites().values())
MUTANTS = [(s, m) for s in SUITES for m in s.mutants]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
STUDENT = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_reference_and_solution_earn_full_marks(suite):
    for fn in (suite.reference, suite.solution):
        result = run_suite(suite, fn)
        assert result.status == "passed", [c.message for c in result.cases]
        assert result.earned == suite.points


@pytest.mark.parametrize("suite,mutant", MUTANTS, ids=lambda x: getattr(x, "name", ""))
def test_each_mutant_loses_points_with_its_own_hint(suite, mutant):
    result = run_suite(suite, mutant.fn)
    assert result.earned < suite.points, f"the suite does not catch '{mutant.name}'"
    assert result.hint == mutant.hint, f"'{mutant.name}' got the hint: {result.hint}"


def test_every_suite_has_a_distinct_hint_per_mutant():
    for suite in SUITES:
        hints = [m.hint for m in suite.mutants]
        assert len(hints) == len(set(hints)), suite.name


def test_notebook_exercises_and_suites_agree():
    declared = {}
    for path in SOLUTIONS:
        for ex in exercises(nbformat.read(path, as_version=4)):
            assert ex.name not in declared, f"{ex.name} declared twice"
            declared[ex.name] = ex
    suites = {s.name: s for s in SUITES}
    assert declared.keys() == suites.keys(), "every exercise needs a suite and vice versa"
    for name, ex in declared.items():
        assert (ex.exercise, ex.points) == (suites[name].exercise, suites[name].points), name


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_solution_edition_earns_full_marks(path):
    namespace, errors = exercise_namespace(nbformat.read(path, as_version=4))
    assert not errors
    for ex in exercises(nbformat.read(path, as_version=4)):
        suite = all_suites()[ex.name]
        result = run_suite(suite, namespace[ex.name])
        assert result.status == "passed", (ex.name, [c.message for c in result.cases])


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.stem)
def test_student_edition_scores_zero_without_harness_errors(path):
    nb = nbformat.read(path, as_version=4)
    namespace, errors = exercise_namespace(nb)
    assert not errors
    for ex in exercises(nb):
        result = run_suite(all_suites()[ex.name], namespace[ex.name])
        assert result.status == "not attempted", (ex.name, [c.message for c in result.cases])
        assert result.earned == 0


def _stub_parameters() -> dict[str, dict[str, object]]:
    """Exercise name -> {"where.name": default} for every parameter with a default in the
    student edition's stub (the signature students are asked to implement): "name" for a
    function's or a constructor's parameter, "forward.name" for forward's."""
    found: dict[str, dict[str, object]] = {}
    for path in STUDENT:
        nb = nbformat.read(path, as_version=4)
        for ex in exercises(nb):
            tree = ast.parse(nb.cells[ex.cell_index].source)
            params = {}
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef):
                    continue
                where = {"forward": "forward.", "__init__": ""}.get(node.name)
                if node.name == ex.name:
                    where = ""
                if where is None:
                    continue
                positional = node.args.args[len(node.args.args) - len(node.args.defaults):]
                for arg, default in [*zip(positional, node.args.defaults, strict=True),
                                     *zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)]:
                    if default is not None:
                        params[where + arg.arg] = ast.literal_eval(default)
            found[ex.name] = params
    return found


def _passed_values(suite) -> dict[str, list]:
    """Every value each parameter of the book's solution received, over the suite's cases
    (through its ``call`` adapter, as a submission is called)."""
    seen: dict[str, list] = {}
    solution = suite.solution

    def note(where, fn, args, kwargs):
        bound = inspect.signature(fn).bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            seen.setdefault(where + name, []).append(value)

    if inspect.isclass(solution):
        class Spy(solution):
            def __init__(self, *args, **kwargs):
                note("", solution.__init__, (self, *args), kwargs)
                super().__init__(*args, **kwargs)

            def forward(self, *args, **kwargs):
                note("forward.", solution.forward, (self, *args), kwargs)
                return super().forward(*args, **kwargs)

        Spy.__name__ = Spy.__qualname__ = solution.__name__
        spy = Spy
    else:
        def spy(*args, **kwargs):
            note("", solution, args, kwargs)
            return solution(*args, **kwargs)

    assert run_suite(suite, spy).status == "passed"
    return seen


def _differs(value, default) -> bool:
    if isinstance(value, torch.Tensor) or isinstance(default, torch.Tensor):
        return not (isinstance(value, torch.Tensor) and isinstance(default, torch.Tensor)
                    and torch.equal(value, default))
    return type(value) is not type(default) or value != default


STUBS = _stub_parameters()


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_every_parameter_of_the_exercise_is_given_another_value_by_some_case(suite):
    """A flag hard-coded to its default (is_causal=True forced, bias ignored, dropout left
    out) must lose points: some case passes each parameter of the stub's signature a value
    other than its default."""
    seen = _passed_values(suite)
    never = [name for name, default in STUBS[suite.name].items()
             if not any(_differs(v, default) for v in seen.get(name, []))]
    assert not never, (f"{suite.name}: no case gives {', '.join(never)} a value other than "
                       "the default")


def test_the_reference_runs_once_per_case_and_its_outputs_are_copies():
    """reference_outputs computes each case once per suite object (a batch pays for it once),
    hands out copies (a judge that writes into them changes nothing), and a suite rebuilt with
    other cases (hidden ones added) starts afresh."""
    import dataclasses

    from coursekit.grading.suite import Case, Suite, reference_outputs

    calls = []

    def double(x):
        calls.append(x.shape)
        return 2 * x

    suite = Suite("99.1", "double", 2, double, [Case("a", lambda g: (torch.randn(3, generator=g),)),
                                              Case("b", lambda g: (torch.randn(5, generator=g),))])
    first = reference_outputs(suite, 0)
    first[0].zero_()
    again = reference_outputs(suite, 0)
    torch.testing.assert_close(again[0], 2 * suite.inputs(0)[0])
    assert run_suite(suite, lambda x: x + x).status == "passed"
    assert run_suite(suite, lambda x: 3 * x).status == "failed"
    assert calls == [(3,), (5,)]
    more = dataclasses.replace(suite, cases=[*suite.cases, Case("c", lambda g: (torch.ones(7),))])
    assert run_suite(more, lambda x: x + x).status == "passed"
    assert calls == [(3,), (5,), (3,), (5,), (7,)]
