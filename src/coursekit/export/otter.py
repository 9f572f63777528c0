"""``coursekit export otter DIR``: the course as Otter-Grader master notebooks.

What it writes, per chapter notebook (Otter grades one notebook per assignment)::

    DIR/03_self_attention/03_self_attention.ipynb   the master notebook for `otter assign`
    DIR/03_self_attention/requirements.txt          what the grading image installs

The master notebook is the solutions notebook in Otter Assign's format: a first raw cell
``# ASSIGNMENT CONFIG`` (exception-based tests, an autograder zip), and per exercise a question
(``# BEGIN QUESTION`` ... ``# END QUESTION`` raw cells) holding the exercise cell between ``#
BEGIN SOLUTION`` / ``# END SOLUTION`` and its tests between ``# BEGIN TESTS`` / ``# END TESTS``.
In the exercise cell, coursekit's ``### BEGIN SOLUTION`` region becomes Otter's solution block,
and the stub students receive is coursekit's own (``raise NotImplementedError``), given as an
Otter prompt.

Each case of the exercise's suite is one ``@test_case`` with the case's points (a hidden case, from
``--extra-cases``, with ``hidden: true``); the test calls :func:`case`, which grades the exercise
once with coursekit's suite and fails with coursekit's message and hint when that case failed. So
Otter's score is the sum of the cases passed: the score of ``coursekit grade``.

Otter tests the notebook's final variables, and each check cell (``f = check(f)``) rebinds an
unfinished exercise to coursekit's implementation so that the chapter can go on. The export
therefore keeps the student's own definition first: ``submitted_f = f`` in the check cell, which
is what the tests grade.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat

from coursekit.export import cell_id, chapter_notebooks, exercise_cells, instructor_notebook
from coursekit.release import BEGIN, END, NB_VERSION

CONFIG = """# ASSIGNMENT CONFIG
name: {name}
requirements: requirements.txt
run_tests: false
export_cell: false
tests:
  ok_format: false
generate: true
"""

REQUIREMENTS = """# What Otter's grading image installs (besides Otter's own requirements). coursekit must be
# importable there: replace the last line with where your copy of the course lives, for example
#   coursekit @ git+https://github.com/<you>/<course>.git
torch=={torch}
numpy=={numpy}
coursekit
"""

CHECK = re.compile(r"^(\s*)(\w+)\s*=\s*check\(\2\)\s*$", re.MULTILINE)


def raw(text: str):
    return nbformat.v4.new_raw_cell(text)


def solution_source(source: str, exercise: str) -> str:
    """coursekit's solution region as Otter's: the stub students get is Otter's prompt."""
    out = []
    for line in source.splitlines():
        stripped, indent = line.strip(), line[: len(line) - len(line.lstrip())]
        if stripped == BEGIN:
            out += [f'{indent}""" # BEGIN PROMPT', f"{indent}# YOUR CODE HERE",
                    f'{indent}raise NotImplementedError("Exercise {exercise}")',
                    f'{indent}""" # END PROMPT', f"{indent}# BEGIN SOLUTION NO PROMPT"]
        elif stripped == END:
            out.append(f"{indent}# END SOLUTION")
        else:
            out.append(line)
    return "\n".join(out)


def test_cells(exercise: str, points: list[float], hidden: set[int],
               extra_cases: Path | None = None) -> list:
    """One exception-based Otter test per case of the exercise's suite."""
    extra = f", {str(Path(extra_cases).resolve())!r}" if extra_cases else ""
    cells = []
    for i, value in enumerate(points):
        function = f"test_{cell_id(exercise)}_case_{i + 1}"
        cells.append(nbformat.v4.new_code_cell("\n".join([
            '""" # BEGIN TEST CONFIG', f"points: {value!r}",
            f"hidden: {'true' if i in hidden else 'false'}", '""" # END TEST CONFIG',
            f"def {function}(env):",
            "    from coursekit.export.otter import case",
            f"    case(env, {exercise!r}, {i}{extra})", "", f"{function}(globals())"])))
    return cells


def master_notebook(path: Path, suites: dict, hidden: dict[str, set[int]],
                    extra_cases: Path | None = None):
    nb = instructor_notebook(path)
    found = dict(exercise_cells(nb, path.name))
    cells = [raw(CONFIG.format(name=path.stem))]
    for index, cell in enumerate(nb.cells):
        meta = found.get(index)
        if cell.cell_type == "code" and CHECK.search(cell.source):
            cell.source = CHECK.sub(lambda m: f"{m.group(1)}submitted_{m.group(2)} = "
                                              f"{m.group(2)}  # what you wrote, for the grader\n"
                                              f"{m.group(0)}", cell.source)
        if meta is None:
            cells.append(cell)
            continue
        suite = suites.get(meta.name)
        if suite is None:
            raise ValueError(f"{path.name}: exercise {meta.exercise} `{meta.name}` has no suite")
        cell.source = solution_source(cell.source, meta.exercise)
        points = [suite.case_points(i) for i in range(len(suite.cases))]
        cells += [raw(f"# BEGIN QUESTION\nname: q{cell_id(meta.exercise)}"),
                  raw("# BEGIN SOLUTION"), cell, raw("# END SOLUTION"), raw("# BEGIN TESTS"),
                  *test_cells(meta.exercise, points, hidden.get(meta.name, set()), extra_cases),
                  raw("# END TESTS"), raw("# END QUESTION")]
    nb.cells = cells
    return nb


def export(out: Path | str, solutions: Path | str = "solutions", chapter: str | None = None,
           extra_cases: Path | str | None = None) -> list[Path]:
    """Write an Otter master notebook (and requirements.txt) per chapter notebook into ``out``;
    return the notebooks written. Hidden cases need the extra-cases folder where Otter grades
    (the test calls :func:`case` with it)."""
    import numpy
    import torch

    from coursekit.grading.registry import all_suites

    suites, hidden = all_suites(), {}
    if extra_cases:
        from coursekit.grading.batch import load_extra_cases

        suites, hidden = load_extra_cases(Path(extra_cases), suites)
    requirements = REQUIREMENTS.format(torch=torch.__version__.split("+")[0],
                                       numpy=numpy.__version__)
    written = []
    for paths in chapter_notebooks(Path(solutions), chapter).values():
        for path in paths:
            folder = Path(out) / path.stem
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / path.name
            master = master_notebook(path, suites, hidden, extra_cases)
            target.write_text(nbformat.writes(master, version=NB_VERSION) + "\n",
                              encoding="utf-8")
            (folder / "requirements.txt").write_text(requirements, encoding="utf-8")
            written.append(target)
    return written


# ----------------------------------------------------------------------------- in the grader

_RESULTS: dict[tuple[int, str], Any] = {}


def case(env: dict, exercise: str, index: int, extra_cases: str | None = None) -> None:
    """Otter's test of one case: raise ``AssertionError`` with coursekit's message and hint
    when case ``index`` of ``exercise`` fails for the notebook's (submitted) definition."""
    import contextlib
    import io
    import warnings

    from coursekit.grading.check import format_result
    from coursekit.grading.registry import all_suites
    from coursekit.grading.suite import describe_exception, grade_outputs, not_run, run_case

    suites, hidden = all_suites(), {}
    if extra_cases:
        from coursekit.grading.batch import load_extra_cases

        suites, hidden = load_extra_cases(Path(extra_cases), suites)
    suite = next(s for s in suites.values() if exercise in (s.exercise, s.name))
    fn = env.get(f"submitted_{suite.name}", env.get(suite.name))
    key = (id(fn), suite.name)
    if key not in _RESULTS:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                _RESULTS[key] = grade_outputs(
                    suite, [run_case(suite, fn, i) for i in range(len(suite.cases))],
                    hidden.get(suite.name, set()))
            except Exception as err:
                _RESULTS[key] = not_run(suite, f"not graded: {describe_exception(err)}")
    result = _RESULTS[key]
    got = result.cases[index]
    if got.earned < got.points:
        shown = "" if index in hidden.get(suite.name, set()) else format_result(result)
        raise AssertionError(shown or f"hidden case {index + 1} failed")
