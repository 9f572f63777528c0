"""``coursekit export nbgrader|otter``: the course in other graders (issue 30).

The fast tests check what the exports write for every chapter (nbgrader's schema-3 cell metadata
and nothing more, one graded test cell per exercise worth its points, hidden cases inside nbgrader's
hidden-tests markers) and the test cell's grading function in this process.

The round trips need the real tools and execute notebooks, so each runs one chapter (03) and is
skipped, with the reason, where the tool is not installed: ``nbgrader generate_assignment``, then
``nbgrader autograde`` of three submissions (the solutions: full points; the untouched student
edition: 0; a known bug: the score ``coursekit grade`` gives it), read back from nbgrader's
gradebook, and the feedback nbgrader generates shows coursekit's hint. In the test suite the
chapter is cut to what grading touches (``graded_cells_only``: its set-up cell, its exercises,
their ``check`` cells and its concept checks; the experiments are nbval's to run), which each tool
executes three times. Every whole chapter by the same path: ``python tests/test_export.py
nbgrader`` (see ``book/instructor.md``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from coursekit.export import chapter_notebooks, otter
from coursekit.export import nbgrader as nbg
from coursekit.grading.check import grade_source
from coursekit.grading.registry import all_suites
from coursekit.release import exercise_meta, exercises

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
SUITES = all_suites()
# the known bug of the round trips: exercise 03.1 without the 1/√d_k scale; in a notebook without
# 03.1, the corpus's first bug that reproduces a suite mutant of its first exercise that has one
BUG = ("scaled_dot_product_attention", " / math.sqrt(q.shape[-1])", "")


def known_bug(solutions: dict[str, str]) -> tuple[str, str] | None:
    """``(exercise name, its buggy cell source)`` for a notebook whose exercise cells are
    ``solutions`` (name -> source, in the notebook's order)."""
    if BUG[0] in solutions:
        return BUG[0], solutions[BUG[0]].replace(BUG[1], BUG[2])
    sys.path.insert(0, str(Path(__file__).parent))
    from test_grading_corpus import VARIANTS

    for name in solutions:
        found = next((v for v in VARIANTS if v.exercise == name and v.mutant and not v.missed), None)
        if found:
            return name, found.source
    return None


def graded_cells_only(folder: Path, chapter: str) -> Path:
    """A solutions folder holding chapter ``chapter`` with only the cells grading touches: the
    set-up cell (the first code cell), the exercises, the cells that ``check`` them and the concept
    checks, and every Markdown cell. Returns the folder."""
    from coursekit.concepts import CONCEPTS_TAG

    folder.mkdir(parents=True, exist_ok=True)
    for path in SOLUTIONS.glob(f"{chapter}_*.ipynb"):
        nb = nbformat.read(path, 4)
        code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
        nb.cells = [c for i, c in enumerate(nb.cells)
                    if c.cell_type != "code" or i == code[0] or exercise_meta(c, path.name)
                    or "= check(" in c.source
                    or CONCEPTS_TAG in c.get("metadata", {}).get("tags", [])]
        nbformat.write(nb, folder / path.name)
    return folder


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------- nbgrader, fast


@pytest.fixture(scope="module")
def nbgrader_course(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nbgrader")
    nbg.export(out, SOLUTIONS)
    return out


def test_every_chapter_becomes_an_nbgrader_assignment(nbgrader_course):
    chapters = chapter_notebooks(SOLUTIONS)
    assert sorted(p.name for p in (nbgrader_course / "source").iterdir()) == \
        [f"ch{n}" for n in sorted(chapters)]
    assert "c.Execute.timeout" in (nbgrader_course / "nbgrader_config.py").read_text()
    graded = 0
    for number, paths in chapters.items():
        for path in paths:
            nb = nbformat.read(nbgrader_course / "source" / f"ch{number}" / path.name, 4)
            assert nbg.check_metadata(nb) == [], path.name
            for i, cell in enumerate(nb.cells):
                meta = exercise_meta(cell, path.name)
                if meta is None:
                    continue
                graded += 1
                assert cell.metadata["nbgrader"]["solution"] is True
                assert "### BEGIN SOLUTION" in cell.source
                test = nb.cells[i + 1]  # the graded test cell follows its exercise
                assert test.metadata["nbgrader"] == {
                    "schema_version": 3, "grade": True, "locked": True, "solution": False,
                    "task": False, "grade_id": f"test_{meta.exercise.replace('.', '_')}",
                    "points": float(meta.points)}
                assert test.source.endswith(f"score({meta.name}, {meta.exercise!r})")
    # every exercise of the book, once
    assert graded == sum(len(exercises(nbformat.read(p, 4))) for p in SOLUTIONS.glob("*.ipynb"))


def test_metadata_checks_refuse_what_nbgrader_refuses():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.cells[0].metadata["nbgrader"] = dict(nbg.nbgrader_meta("a", grade=True, points=1),
                                            coursekit="no")
    assert "extra keys ['coursekit']" in nbg.check_metadata(nb)[0]


def test_hidden_cases_stay_inside_nbgrader_hidden_tests(tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    written = nbg.export(tmp_path / "course", SOLUTIONS, chapter="03", extra_cases=extra)
    nb = nbformat.read(written[0], 4)
    tests = [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(tests) == 3
    for source in tests:
        hidden = source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
        assert str(extra.resolve()) in hidden
        assert str(extra.resolve()) not in source.replace(hidden, "")


def test_score_is_the_suites_partial_credit_and_writes_nothing_to_stderr():
    suite = SUITES["scaled_dot_product_attention"]
    buggy = next(m.fn for m in suite.mutants if m.name == "missing scale")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        full = nbg.score(suite.reference, "03.1")
        wrong = nbg.score(buggy, "scaled_dot_product_attention")
        missing = nbg.score(None, "03.1")
    assert full == suite.points and 0 <= wrong < suite.points and missing == 0
    assert next(m.hint for m in suite.mutants if m.name == "missing scale") in out.getvalue()
    assert err.getvalue() == ""


# ----------------------------------------------------------------------------- round trips


def _submission(release: Path, source: Path, bug: tuple[str, str] | None) -> object:
    """The released notebook with the exercise cells of ``source`` (the solutions), the cell of
    ``bug``'s exercise replaced by its buggy source."""
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source
               for c in nbformat.read(source, 4).cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    nb = nbformat.read(release, 4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
            if bug and cell.metadata.get("coursekit", {}).get("name") == bug[0]:
                cell.source = bug[1]
    return nb


def _exercise_sources(source: Path) -> dict[str, str]:
    return {m.name: c.source for c in nbformat.read(source, 4).cells
            if (m := exercise_meta(c, source.name))}


def _expected_bug_score(bug: tuple[str, str]) -> float:
    """What ``coursekit grade`` gives the bug (its in-process path, which it agrees with)."""
    return grade_source(SUITES[bug[0]], bug[1]).earned


def _nbgrader(course: Path, *args: str, timeout: int = 1800) -> str:
    # nbgrader runs `alembic` as a command: the environment's scripts must be on PATH even
    # when it is not activated
    env = dict(os.environ, COURSEKIT_PROFILE=os.environ.get("COURSEKIT_PROFILE", "quick"),
               TQDM_DISABLE="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{log[-4000:]}"
    return log


def nbgrader_round_trip(course: Path, chapter: str, feedback: bool = True,
                        solutions: Path = SOLUTIONS) -> dict:
    """Export ``chapter``, generate the assignment, autograde the three submissions, read the
    gradebook. Returns the scores, what they should be and the feedback of the bug."""
    nbg.export(course, solutions, chapter=chapter)
    assignment = f"ch{chapter}"
    _nbgrader(course, "generate_assignment", assignment, "--force")
    expected = {"solutions": 0.0, "untouched": 0.0, "buggy": 0.0}
    for source in sorted((course / "source" / assignment).glob("*.ipynb")):
        release = course / "release" / assignment / source.name
        total = sum(c.metadata["nbgrader"].get("points", 0) for c in nbformat.read(source, 4).cells
                    if c.metadata.get("nbgrader", {}).get("grade"))
        bug = known_bug(_exercise_sources(source))
        for student, nb in [("solutions", _submission(release, source, None)),
                            ("untouched", nbformat.read(release, 4)),
                            ("buggy", _submission(release, source, bug))]:
            folder = course / "submitted" / student / assignment
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, folder / source.name)
        expected["solutions"] += total
        expected["buggy"] += total
        if bug:
            expected["buggy"] += _expected_bug_score(bug) - SUITES[bug[0]].points
    started = time.monotonic()
    _nbgrader(course, "autograde", assignment, "--force")
    seconds = time.monotonic() - started
    html = ""
    if feedback:
        _nbgrader(course, "generate_feedback", assignment, "--force", "--student", "buggy")
        html = "".join(p.read_text() for p in
                       (course / "feedback" / "buggy" / assignment).glob("*.html"))
    return {"scores": nbg.gradebook_scores(course, assignment), "expected": expected,
            "feedback": html, "autograde_seconds": seconds}


@pytest.mark.skipif(not _has("nbgrader"), reason="nbgrader is not installed (pip install "
                    "nbgrader, pinned in requirements.txt): the nbgrader round trip is skipped")
def test_nbgrader_round_trip_of_one_chapter(tmp_path):
    found = nbgrader_round_trip(tmp_path / "course", "03",
                                solutions=graded_cells_only(tmp_path / "solutions", "03"))
    assert found["scores"] == pytest.approx(found["expected"], abs=1e-3)
    assert found["scores"]["solutions"] == 8 and found["scores"]["untouched"] == 0
    assert 0 < found["scores"]["buggy"] < 8
    hint = next(m.hint for m in SUITES[BUG[0]].mutants if m.name == "missing scale")
    assert hint.split(":")[0] in found["feedback"]


@pytest.mark.skipif(not _has("nbgrader"), reason="nbgrader is not installed: the check of every "
                    "chapter with nbgrader's own validator is skipped")
def test_every_chapter_passes_nbgraders_validation_and_generate_assignment(nbgrader_course,
                                                                            tmp_path, monkeypatch):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.nbgraderformat import MetadataValidator
    from traitlets.config import Config

    validator = MetadataValidator()
    for folder in sorted((nbgrader_course / "source").iterdir()):
        for path in sorted(folder.glob("*.ipynb")):
            validator.validate_nb(nbformat.read(path, 4))  # raises on what nbgrader refuses
    course = tmp_path / "course"
    shutil.copytree(nbgrader_course, course)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent),
                                                os.environ["PATH"]]))  # nbgrader runs alembic
    monkeypatch.chdir(course)
    config = Config()
    config.CourseDirectory.root = str(course)
    api = NbGraderAPI(config=config)  # one process for every chapter: nbgrader starts slowly
    for folder in sorted((course / "source").iterdir()):
        result = api.generate_assignment(folder.name, force=True)
        assert result["success"], result.get("log", "")[-3000:]
        released = sorted((course / "release" / folder.name).glob("*.ipynb"))
        assert [p.name for p in released] == sorted(p.name for p in folder.glob("*.ipynb"))
        for path in released:
            assert "### BEGIN SOLUTION" not in path.read_text()


# ----------------------------------------------------------------------------- Otter


def test_every_chapter_becomes_an_otter_master_notebook(tmp_path):
    written = otter.export(tmp_path, SOLUTIONS)
    assert len(written) == len(list(SOLUTIONS.glob("*.ipynb")))
    for path in written:
        nb = nbformat.read(path, 4)
        assert nb.cells[0].cell_type == "raw"
        assert nb.cells[0].source.startswith(f"# ASSIGNMENT CONFIG\nname: {path.stem}\n")
        assert "ok_format: false" in nb.cells[0].source
        assert (path.parent / "requirements.txt").read_text().strip().endswith("coursekit")
        for i, cell in enumerate(nb.cells):
            meta = exercise_meta(cell, path.name)
            if meta is None:
                continue
            suite = SUITES[meta.name]
            assert [c.source for c in nb.cells[i - 2:i]] == [
                f"# BEGIN QUESTION\nname: q{meta.exercise.replace('.', '_')}", "# BEGIN SOLUTION"]
            assert "### BEGIN SOLUTION" not in cell.source and "# BEGIN PROMPT" in cell.source
            tests = []
            for later in nb.cells[i + 3:]:
                if later.source == "# END TESTS":
                    break
                tests.append(later.source)
            assert len(tests) == len(suite.cases)  # one @test_case per case, with its points
            assert sum(float(t.split("points: ")[1].split("\n")[0]) for t in tests) == \
                pytest.approx(suite.points)
        checks = [c.source for c in nb.cells if "= check(" in c.source]
        assert all("submitted_" in c for c in checks)  # the tests grade what the student wrote


def test_otter_case_fails_with_coursekits_hint():
    suite = SUITES["causal_mask"]
    wrong = next(m for m in suite.mutants if m.name == "transposed")
    otter.case({"causal_mask": suite.reference}, "03.2", 0)
    with pytest.raises(AssertionError, match="Hint: " + wrong.hint[:20]):
        otter.case({"submitted_causal_mask": wrong.fn, "causal_mask": suite.reference},
                   "03.2", 1)


def _otter(*args: str, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, COURSEKIT_PROFILE=os.environ.get("COURSEKIT_PROFILE", "quick"),
               TQDM_DISABLE="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    return subprocess.Popen([sys.executable, "-m", "otter", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(run: subprocess.Popen, what: str, timeout: int = 1800) -> str:
    log, _ = run.communicate(timeout=timeout)
    assert run.returncode == 0, f"otter {what} failed:\n{log[-4000:]}"
    return log


def otter_round_trip(folder: Path, notebook: str, solutions: Path = SOLUTIONS) -> dict:
    """Export one chapter notebook (``"03"``, ``"02b"``), `otter assign` it, `otter run` the
    three submissions (in parallel), and return the scores and what they should be."""
    master = otter.export(folder, solutions, chapter=notebook)[0]
    work = master.parent
    _finish(_otter("assign", master.name, "dist", cwd=work), "assign")
    student = work / "dist" / "student" / master.name
    zip_path = next((work / "dist" / "autograder").glob("*.zip"))
    source = next(solutions.glob(f"{notebook}_*.ipynb"))
    answers = _exercise_sources(source)
    total = sum(SUITES[n].points for n in answers)
    expected = {"solutions": total, "untouched": 0.0, "buggy": total}
    runs = {}
    for name in expected:
        nb = nbformat.read(student, 4)
        bug = known_bug(answers) if name == "buggy" else None
        if name != "untouched":
            for cell in nb.cells:
                exercise = cell.metadata.get("coursekit", {}).get("name")
                if exercise in answers:
                    cell.source = answers[exercise]
                    if bug and exercise == bug[0]:
                        cell.source = bug[1]
        if bug:
            expected[name] += _expected_bug_score(bug) - SUITES[bug[0]].points
        (work / name).mkdir()
        nbformat.write(nb, work / name / master.name)
        runs[name] = _otter("run", "-a", str(zip_path), "-o", str(work / name),
                            str(work / name / master.name), cwd=work / name)
    scores, feedback = {}, {}
    for name, run in runs.items():
        _finish(run, f"run ({name})")
        tests = json.loads((work / name / "results.json").read_text())["tests"]
        scores[name] = sum(t.get("score", 0) for t in tests)  # "Public Tests" has no score
        feedback[name] = "\n".join(t.get("output", "") for t in tests)
    return {"scores": scores, "expected": expected, "feedback": feedback}


@pytest.mark.skipif(not _has("otter"), reason="Otter-Grader is not installed (pip install "
                    "otter-grader, pinned in requirements.txt): the Otter round trip is skipped")
def test_otter_round_trip_of_one_chapter(tmp_path):
    found = otter_round_trip(tmp_path / "work", "03",
                             solutions=graded_cells_only(tmp_path / "solutions", "03"))
    assert found["scores"] == pytest.approx(found["expected"], abs=1e-3)
    assert found["scores"]["solutions"] == pytest.approx(8)
    assert found["scores"]["untouched"] == 0 and 0 < found["scores"]["buggy"] < 8
    hint = next(m.hint for m in SUITES[BUG[0]].mutants if m.name == "missing scale")
    assert hint.split(":")[0] in found["feedback"]["buggy"]


# ----------------------------------------------------------------------------- every chapter


def main(argv: list[str]) -> int:
    """``python tests/test_export.py nbgrader|otter [CHAPTER ...]``: the round trip for every
    chapter (or those named), one table of scores; exit status 1 if any differs."""
    import tempfile

    tool = argv[0] if argv else ""
    if tool not in ("nbgrader", "otter"):
        print("usage: python tests/test_export.py nbgrader|otter [CHAPTER ...]", file=sys.stderr)
        return 2
    if tool == "nbgrader":
        chapters = argv[1:] or sorted(chapter_notebooks(SOLUTIONS))
    else:  # Otter grades one notebook per assignment: 02a, 03, ... (02b and 06b have no
        # exercises, and `otter run` stops on an autograder without tests)
        chapters = argv[1:] or sorted(p.name.split("_")[0] for p in SOLUTIONS.glob("*.ipynb")
                                      if _exercise_sources(p))
    failed = 0
    print("| chapter | solutions | untouched | known bug | expected | seconds |")
    print("|---|---:|---:|---:|---|---:|")
    for chapter in chapters:  # the known bug of each notebook, before the long runs
        for source in sorted(SOLUTIONS.glob(f"{chapter}*_*.ipynb")):
            bug = known_bug(_exercise_sources(source))
            if bug:
                print(f"<!-- {source.stem}: known bug in {bug[0]}, worth "
                      f"{_expected_bug_score(bug):g} of {SUITES[bug[0]].points:g} -->", flush=True)
    for chapter in chapters:
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as folder:
            found = (nbgrader_round_trip(Path(folder), chapter, feedback=False)
                     if tool == "nbgrader" else otter_round_trip(Path(folder), chapter))
        s, e = found["scores"], found["expected"]
        ok = all(abs(s.get(k, -1) - v) < 1e-3 for k, v in e.items())
        failed += not ok
        print(f"| {chapter} | {s.get('solutions'):g} | {s.get('untouched'):g} | "
              f"{s.get('buggy'):g} | {'as expected' if ok else e} | "
              f"{time.monotonic() - started:.0f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
