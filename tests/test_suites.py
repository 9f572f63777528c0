"""Every exercise suite is validated: the reference and the book's solution earn full marks, the
untouched student edition earns 0 with no harness error, and every recorded wrong implementation
loses points with its own hint."""

from pathlib import Path

import nbformat
import pytest

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
