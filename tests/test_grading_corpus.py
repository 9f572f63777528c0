"""Verdicts students can trust, measured on a corpus of plausible student code
(``tests/grading_corpus.py``): every bug loses points, every correct alternative earns full
marks, no hint names a bug the code does not have, most hints name the bug, and ``check()`` in the
notebook and ``coursekit grade`` give the same points for the same cell source — for the book's
own solution, the untouched stub, every variant of the corpus (one for every suite mutant among
them) and variants that modify their arguments, alias them or return views.

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import linecache
import re
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import nbformat
import pytest

from coursekit.grading import check
from coursekit.grading.batch import grade
from coursekit.grading.cells import provided_names
from coursekit.grading.check import grade_source
from coursekit.grading.registry import all_suites
from coursekit.grading.suite import ADVICE
from coursekit.grading.worker_pool import Limits
from coursekit.release import exercises

sys.path.insert(0, str(Path(__file__).parent))
# Every corpus module in tests/ (grading_corpus*.py, named by what it covers), each with its
# VARIANTS: a new module is picked up without being listed here.
CORPUS = [importlib.import_module(path.stem)
          for path in sorted(Path(__file__).parent.glob("grading_corpus*.py"))]

ROOT = Path(__file__).resolve().parents[1]
SUITES = all_suites()
VARIANTS = [variant for module in CORPUS for variant in module.VARIANTS]
# What a submission is graded as: a chapter ("03") or, where a chapter spans notebooks with
# exercises of their own, a notebook ("07b").
CHAPTERS = sorted({suite.key for suite in SUITES.values()})
BUGS = [v for v in VARIANTS if v.bug]
ALTERNATIVES = [v for v in VARIANTS if not v.bug]


def _notebook(edition: str, chapter: str) -> Path:
    """The notebook that holds the exercises graded as ``chapter`` (02a_..., not 02b_...)."""
    for path in sorted((ROOT / edition).glob(f"{chapter}*_*.ipynb")):
        if any(ex.name in SUITES and SUITES[ex.name].key == chapter
               for ex in exercises(nbformat.read(path, as_version=4))):
            return path
    raise FileNotFoundError(f"no notebook of chapter {chapter} in {edition}/ holds its exercises")


@cache
def chapter_notebook(edition: str, chapter: str):
    return nbformat.read(_notebook(edition, chapter), as_version=4)


@cache
def provided(chapter: str) -> tuple:
    nb = chapter_notebook("solutions", chapter)
    return tuple(provided_names([c.source for c in nb.cells if c.cell_type == "code"],
                                SUITES).items())


def chapter_of(name: str) -> str:
    return SUITES[name].key


def cell_sources(edition: str, chapter: str) -> dict[str, str]:
    nb = chapter_notebook(edition, chapter)
    return {ex.name: nb.cells[ex.cell_index].source for ex in exercises(nb)}


@cache
def in_process(name: str, source: str):
    with contextlib.redirect_stdout(io.StringIO()):
        return grade_source(SUITES[name], source, dict(provided(chapter_of(name))))


def classify(variant) -> str:
    """'names', 'generic' or 'wrong': what the hint says about a bug."""
    suite = SUITES[variant.exercise]
    hint = in_process(variant.exercise, variant.source).hint
    if variant.mutant:
        wanted = next(m.hint for m in suite.mutants if m.name == variant.mutant)
        return "names" if hint == wanted else "wrong"
    # the phrase must be in what the hint says of this submission, not in the suite's general
    # advice that ends many hints ("max" is in "softmax")
    said = hint.replace(suite.hint, "") if suite.hint else hint
    if any(phrase in said for phrase in variant.expect):
        return "names"
    generic = [suite.hint or ADVICE, ADVICE]
    if any(hint.endswith(g) for g in generic):
        return "generic"
    return "wrong"


def test_every_mutant_has_a_corpus_source():
    named = {(v.exercise, v.mutant) for v in VARIANTS if v.mutant}
    for suite in SUITES.values():
        if suite.key in CHAPTERS:
            assert {(suite.name, m.name) for m in suite.mutants} <= named, suite.name


@pytest.mark.parametrize("variant", BUGS, ids=lambda v: f"{v.exercise}: {v.name}")
def test_every_bug_loses_points_with_no_wrong_hint(variant):
    result = in_process(variant.exercise, variant.source)
    if variant.missed:  # known, and said why: it must still be missed, or the mark must go
        assert result.earned == result.points, "now caught: remove `missed` from the variant"
        return
    assert result.earned < result.points, [c.message for c in result.cases]
    assert classify(variant) != "wrong", result.hint
    assert "\t" not in result.hint and not re.search(r"\.\.(\s|$)", result.hint), result.hint


@pytest.mark.parametrize("variant", ALTERNATIVES, ids=lambda v: f"{v.exercise}: {v.name}")
def test_every_correct_alternative_earns_full_marks(variant):
    result = in_process(variant.exercise, variant.source)
    assert result.status == "passed", [c.message for c in result.cases]


def test_most_hints_name_the_bug():
    kinds = Counter(classify(v) for v in BUGS)
    caught = sum(in_process(v.exercise, v.source).earned < SUITES[v.exercise].points
                 for v in BUGS)
    accepted = sum(in_process(v.exercise, v.source).status == "passed" for v in ALTERNATIVES)
    print(f"\ncorpus: {len(BUGS)} bugs, {caught} caught; {len(ALTERNATIVES)} correct "
          f"alternatives, {accepted} accepted; hints: {kinds['names']} name the bug, "
          f"{kinds['generic']} generic, {kinds['wrong']} wrong "
          f"({kinds['names'] / len(BUGS):.0%} naming)")
    print("| chapter | bugs | lose points | hint names the bug | generic | misleading "
          "| alternatives | full marks |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for chapter in sorted({SUITES[v.exercise].chapter for v in VARIANTS}):
        bugs = [v for v in BUGS if SUITES[v.exercise].chapter == chapter]
        alts = [v for v in ALTERNATIVES if SUITES[v.exercise].chapter == chapter]
        caught = [v for v in bugs
                  if in_process(v.exercise, v.source).earned < SUITES[v.exercise].points]
        said = Counter(classify(v) for v in caught)
        full = sum(in_process(v.exercise, v.source).status == "passed" for v in alts)
        print(f"| {chapter} | {len(bugs)} | {len(caught)} | {said['names']} | "
              f"{said['generic']} | {said['wrong']} | {len(alts)} | {full} |")
    assert kinds["names"] >= 0.75 * len(BUGS)


def test_check_grades_the_cell_as_the_batch_grader_does():
    """In a notebook, check() grades the cell that defined the function (IPython keeps its
    source in linecache) in the grader's namespace: a helper defined outside the exercise cell
    fails there as it does in ``coursekit grade``, and set-up imports are provided."""
    setup = "from coursekit.attention import masked_softmax\n"
    source = ("def scaled_dot_product_attention(q, k, v, mask=None):\n"
              "    weights = masked_softmax(helper(q, k), mask)\n    return weights @ v, weights\n")
    helper = "def helper(q, k):\n    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
    for cell, expected in [(source, 0), (helper + source, 3)]:
        filename = f"<ipython-input-{len(cell)}-corpus>"
        linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
        namespace = {"__name__": "__main__", "In": ["", setup, helper, cell]}
        exec(setup + helper, namespace)
        exec(compile(cell, filename, "exec"), namespace)
        fn = namespace["scaled_dot_product_attention"]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            returned = check(fn)
        assert f"{expected} / 3 points" in out.getvalue(), out.getvalue()
        assert (returned is fn) == (expected == 3)


def _submissions(folder: Path) -> dict[str, tuple[str, str]]:
    """One notebook per (chapter, k): variant k of every exercise of the chapter (the stub
    where an exercise has fewer). Returns {submission id: ...} -> {(id, exercise): source}."""
    expected = {}
    by_exercise: dict[str, list[str]] = {}
    for variant in VARIANTS:
        by_exercise.setdefault(variant.exercise, []).append(variant.source)
    for chapter in sorted(CHAPTERS):
        stubs = cell_sources("notebooks", chapter)
        solutions = cell_sources("solutions", chapter)
        for name in stubs:
            by_exercise.setdefault(name, [])
            by_exercise[name] = [solutions[name], stubs[name], *by_exercise[name]]
        rounds = max(len(by_exercise[name]) for name in stubs)
        for k in range(rounds):
            nb = chapter_notebook("solutions", chapter)
            nb = nbformat.from_dict(nb)  # a copy
            for ex in exercises(nb):
                sources = by_exercise[ex.name]
                source = sources[k] if k < len(sources) else stubs[ex.name]
                nb.cells[ex.cell_index].source = source
                expected[(f"{chapter}_{k:02d}", ex.name)] = source
            nbformat.write(nb, folder / f"{chapter}_{k:02d}.ipynb")
    return expected


def test_check_and_the_batch_grader_agree(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    expected = _submissions(subs)
    batch = grade([subs], tmp_path / "out", jobs=2, stream=None,
                  limits=Limits(timeout=120, case_timeout=20))
    disagree, total = [], 0
    for record in batch.records:
        meta = record["extra_data"]["coursekit"]
        assert not meta["harness_errors"], meta["harness_errors"]
        for exercise in meta["exercises"].values():
            name = exercise["name"]
            total += 1
            source = expected[(meta["submission"], name)]
            mine = in_process(name, source)
            if abs(exercise["score"] - mine.earned) > 1e-3:  # the report rounds to 4 places
                disagree.append((meta["submission"], name, exercise["score"], mine.earned,
                                 source.splitlines()[-1]))
    print(f"\nbatch vs check(): {total - len(disagree)} of {total} exercise verdicts agree "
          f"({len(batch.records)} notebooks, {batch.seconds:.0f} s)")
    assert total == len(expected)
    assert not disagree, "\n".join(map(str, disagree))
