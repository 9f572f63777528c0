"""The student edition is generated from solutions/ and must never be stale."""

import json
from pathlib import Path

import nbformat
import pytest

from coursekit.cli import main
from coursekit.release import ReleaseError, release, strip_solution, student_edition

ROOT = Path(__file__).resolve().parents[1]


def test_notebooks_are_up_to_date():
    stale = release(ROOT / "solutions", ROOT / "notebooks", check=True)
    assert not stale, f"run `coursekit release`: stale {stale}"


def test_every_chapter_has_a_student_edition_without_solutions():
    solutions = sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb"))
    assert solutions and solutions == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    for name in solutions:
        text = (ROOT / "notebooks" / name).read_text()
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text


def test_stored_outputs_only_where_nbval_checks_them():
    for path in [*(ROOT / "solutions").glob("*.ipynb"), *(ROOT / "notebooks").glob("*.ipynb")]:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.outputs:
                assert "# NBVAL_CHECK_OUTPUT" in cell.source, f"{path.name}: stray output"


def test_strip_solution_keeps_indentation_and_code_around():
    source = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n"
    assert strip_solution(source, "09.1", "here") == (
        'def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError("Exercise 09.1")'
    )


def _write(tmp_path: Path, cells, name="01_x.ipynb") -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    folder = tmp_path / "solutions"
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / name)
    return folder


def _exercise(source, meta=None):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata = {"tags": ["exercise"],
                     "coursekit": meta or {"exercise": "01.1", "name": "f", "points": 1}}
    return cell


@pytest.mark.parametrize("source,meta,message", [
    ("def f():\n    ### BEGIN SOLUTION\n    pass\n", None, "never closed"),
    ("def f():\n    pass\n    ### END SOLUTION\n", None, "without"),
    ("def f():\n    pass\n", None, "has no ### BEGIN SOLUTION"),
    ("### BEGIN SOLUTION\n### END SOLUTION\n", {"name": "f"}, "lacks a valid"),
    ("### BEGIN SOLUTION\n### END SOLUTION\n", {"exercise": "1", "name": "f", "points": 1},
     "not of the form"),
])
def test_malformed_exercises_are_refused_with_a_clear_message(tmp_path, source, meta, message):
    folder = _write(tmp_path, [_exercise(source, meta)])
    with pytest.raises(ReleaseError, match=message):
        student_edition(folder / "01_x.ipynb")


def test_markers_outside_an_exercise_cell_are_refused(tmp_path):
    folder = _write(tmp_path, [nbformat.v4.new_code_cell("### BEGIN SOLUTION\n### END SOLUTION")])
    with pytest.raises(ReleaseError, match="not tagged 'exercise'"):
        student_edition(folder / "01_x.ipynb")


def test_release_writes_checks_and_removes_orphans(tmp_path, capsys):
    folder = _write(tmp_path, [
        _exercise("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(1)",
                                  outputs=[nbformat.v4.new_output("stream", text="1\n")]),
        nbformat.v4.new_code_cell("print(2)", outputs=[nbformat.v4.new_output("stream", text="2\n")]),
    ])
    out = tmp_path / "notebooks"
    out.mkdir()
    (out / "99_orphan.ipynb").write_text("{}")
    args = ["--solutions", str(folder), "--notebooks", str(out)]
    assert main(["release", "--check", *args]) == 1
    assert main(["release", *args]) == 0
    assert main(["release", "--check", *args]) == 0
    assert not (out / "99_orphan.ipynb").exists()
    cells = json.loads((out / "01_x.ipynb").read_text())["cells"]
    assert "raise NotImplementedError" in "".join(cells[0]["source"])
    assert cells[0]["metadata"]["coursekit"]["name"] == "f"
    assert cells[1]["outputs"] and not cells[2]["outputs"]
    (folder / "02_bad.ipynb").write_text("{not json")
    assert main(["release", *args]) == 2
    assert "not a readable notebook" in capsys.readouterr().err


def test_every_notebook_of_the_modern_half_has_three_graded_exercises():
    """Chapters 7-9: the central mechanisms of each notebook are exercises, at least three per
    notebook, each with a suite whose points the notebook's metadata repeats."""
    from coursekit.grading.registry import all_suites
    from coursekit.release import exercises

    suites = all_suites()
    counts = {}
    for path in sorted((ROOT / "solutions").glob("0[7-9]*.ipynb")):
        found = exercises(nbformat.read(path, as_version=4))
        counts[path.stem[:3]] = len(found)
        for ex in found:
            assert ex.name in suites and suites[ex.name].points == ex.points, (path.name, ex.name)
    assert set(counts) == {"07a", "07b", "07c", "08a", "08b", "09a", "09b"}, counts
    assert min(counts.values()) >= 3, counts
