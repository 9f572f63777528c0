"""``coursekit export nbgrader DIR``: the course as an nbgrader course directory.

What it writes::

    DIR/nbgrader_config.py            course id, a cell timeout long enough for training cells
    DIR/source/ch03/03_self_attention.ipynb
    DIR/source/ch02/02a_....ipynb, 02b_....ipynb     (one assignment per chapter)

Each chapter notebook is the solutions notebook with, per exercise,

- the exercise cell as an nbgrader **solution cell** (its ``### BEGIN SOLUTION`` / ``### END
  SOLUTION`` region is the one ``coursekit release`` strips; nbgrader's ``generate_assignment``
  strips it the same way);
- right after it, a **graded test cell**, locked, worth the exercise's points, which calls
  :func:`score`: it grades the exercise cell exactly as ``check()`` and ``coursekit grade`` do
  (the cell alone, in the grader's namespace), prints coursekit's feedback (✓/✗ per case, the
  hint) to stdout, and ends with the points earned, which nbgrader reads as partial credit. It
  writes nothing to stderr (nbgrader fails a cell with stderr output): warnings and stray stderr
  of the student's code are kept out of the cell.

Cell metadata follows nbgrader's schema version 3 and holds nothing else (nbgrader rejects
extra keys); coursekit's own metadata (``tags``, ``coursekit``) stays beside it, so ``coursekit
grade`` grades nbgrader submissions too. Hidden cases (``--extra-cases DIR``) sit in the test
cell between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``: nbgrader removes them
from the notebooks students receive and puts them back to autograde.

Unlike ``coursekit grade``, nbgrader runs the submission and its tests in one kernel, without a
sandbox: that is nbgrader's model, and the test cell cannot change it.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import nbformat

from coursekit.export import cell_id, chapter_notebooks, exercise_cells, instructor_notebook
from coursekit.release import NB_VERSION

SCHEMA_VERSION = 3
CELL_TIMEOUT = 900  # seconds per cell when nbgrader executes a notebook (training cells)
ALLOWED_KEYS = {"schema_version", "grade", "locked", "solution", "task", "grade_id", "points",
                "checksum", "cell_type"}  # nbgrader's v3 cell schema ("additionalProperties")

CONFIG = '''"""nbgrader configuration written by `coursekit export nbgrader`."""
c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = {course!r}
# chapters train small models: nbgrader's default of 30 s per cell is too short
c.Execute.timeout = {timeout}
'''


def nbgrader_meta(grade_id: str, *, solution: bool = False, grade: bool = False,
                  locked: bool = False, points: float | None = None) -> dict:
    """A schema-3 nbgrader cell metadata dict, with no key the schema does not know."""
    meta: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "grade": grade, "locked": locked,
                            "solution": solution, "task": False, "grade_id": grade_id}
    if grade:
        meta["points"] = points
    return meta


def test_source(name: str, exercise: str, extra_cases: Path | None) -> str:
    lines = [f"# Graded by coursekit: the number this cell ends with is your score for exercise "
             f"{exercise}.", "from coursekit.export.nbgrader import score", ""]
    if extra_cases is None:
        return "\n".join([*lines, f"score({name}, {exercise!r})"])
    return "\n".join([*lines, "extra_cases = None", "### BEGIN HIDDEN TESTS",
                      f"extra_cases = {str(Path(extra_cases).resolve())!r}",
                      "### END HIDDEN TESTS", f"score({name}, {exercise!r}, extra_cases)"])


def course_notebook(path: Path, extra_cases: Path | None = None):
    """One chapter notebook in nbgrader's source format."""
    nb = instructor_notebook(path)
    cells = []
    found = dict(exercise_cells(nb, path.name))
    for index, cell in enumerate(nb.cells):
        cells.append(cell)
        meta = found.get(index)
        if meta is None:
            continue
        key = cell_id(meta.exercise)
        cell.metadata["nbgrader"] = nbgrader_meta(f"exercise_{key}", solution=True)
        test = nbformat.v4.new_code_cell(test_source(meta.name, meta.exercise, extra_cases))
        test.metadata = {"nbgrader": nbgrader_meta(f"test_{key}", grade=True, locked=True,
                                                   points=float(meta.points))}
        cells.append(test)
    nb.cells = cells
    return nb


def export(out: Path | str, solutions: Path | str = "solutions", chapter: str | None = None,
           extra_cases: Path | str | None = None, course: str = "attention-transformers"
           ) -> list[Path]:
    """Write the nbgrader course into ``out``; return the notebooks written."""
    out = Path(out)
    extra = Path(extra_cases) if extra_cases else None
    if extra is not None and not extra.is_dir():
        raise ValueError(f"the extra cases folder {extra} does not exist")
    written = []
    for number, paths in chapter_notebooks(Path(solutions), chapter).items():
        folder = out / "source" / f"ch{number}"
        folder.mkdir(parents=True, exist_ok=True)
        for path in paths:
            target = folder / path.name
            target.write_text(nbformat.writes(course_notebook(path, extra), version=NB_VERSION)
                              + "\n", encoding="utf-8")
            written.append(target)
    config = out / "nbgrader_config.py"
    config.write_text(CONFIG.format(course=course, timeout=CELL_TIMEOUT), encoding="utf-8")
    return written


def check_metadata(nb) -> list[str]:
    """What nbgrader's schema-3 validation would refuse in a notebook's cell metadata (the
    required keys, no others, types, unique ids, points only on graded cells)."""
    problems, seen = [], set()
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        where = f"cell {index}"
        extra = set(meta) - ALLOWED_KEYS
        missing = {"schema_version", "grade", "locked", "solution"} - set(meta)
        if extra or missing:
            problems.append(f"{where}: extra keys {sorted(extra)}, missing {sorted(missing)}")
        if meta.get("schema_version") != SCHEMA_VERSION:
            problems.append(f"{where}: schema_version {meta.get('schema_version')}")
        if meta.get("grade") != ("points" in meta):
            problems.append(f"{where}: points without grade, or grade without points")
        if meta.get("grade_id") in seen:
            problems.append(f"{where}: grade_id {meta['grade_id']} used twice")
        seen.add(meta.get("grade_id"))
    return problems


# ----------------------------------------------------------------------------- in the kernel


def score(fn: Any, exercise: str, extra_cases: str | None = None) -> float:
    """Grade ``fn`` for nbgrader's test cell: print coursekit's feedback, return the points.

    The exercise cell that defined ``fn`` is graded as ``coursekit grade`` grades it (alone, in
    the grader's namespace; see :mod:`coursekit.grading.cells`); ``extra_cases`` adds the
    instructor's hidden cases, counted but not shown. Whatever happens, nothing reaches stderr
    and the value is a number between 0 and the exercise's points.
    """
    from coursekit.grading.check import cell_source, format_result, notebook_provided
    from coursekit.grading.registry import all_suites
    from coursekit.grading.suite import describe_exception, grade_outputs, not_run, run_case

    suites, hidden = all_suites(), {}
    if extra_cases:
        from coursekit.grading.batch import load_extra_cases

        suites, hidden = load_extra_cases(Path(extra_cases), suites)
    suite = next((s for s in suites.values() if exercise in (s.exercise, s.name)), None)
    if suite is None:
        print(f"coursekit has no exercise {exercise}: 0 points.")
        return 0.0
    secret = hidden.get(suite.name, set())
    swallowed = io.StringIO()
    with contextlib.redirect_stderr(swallowed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from coursekit.grading.cells import load_exercise

            source = cell_source(fn)
            found, error = fn, ""
            if source is not None and getattr(fn, "__name__", None) == suite.name:
                found, error = load_exercise(suite, source, notebook_provided(fn), suites)
            result = not_run(suite, error) if error else grade_outputs(
                suite, [run_case(suite, found, i) for i in range(len(suite.cases))], secret)
        except Exception as err:  # never let the test cell fail with a traceback on stderr
            result = not_run(suite, f"not graded: {describe_exception(err)}")
    print(format_result(result, secret))
    return float(min(round(result.earned, 4), suite.points))


def gradebook_scores(course: Path | str, assignment: str) -> dict[str, float]:
    """``{student: score}`` for one assignment, read back from the course's nbgrader
    gradebook (``gradebook.db``); needs nbgrader."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{Path(course).resolve() / 'gradebook.db'}") as gb:
        return {s.student.id: float(s.score)
                for s in gb.find_assignment(assignment).submissions}

