"""The student edition is generated from solutions/ and must never be stale."""

import ast
import json
import re
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


def test_every_mechanism_of_the_modern_half_is_a_graded_exercise():
    """Chapters 7-9: the central mechanisms of each notebook are exercises, each with a suite
    whose points the notebook's metadata repeats: three per notebook where a notebook builds
    three (BERT, T5, the modern decoder, ViT, CLIP, LoRA, QLoRA), and at least one in each part
    of Chapter 7's GPT that builds one (tokens and the loss; the nucleus filter; DPO's loss).
    07d_in_context studies models shipped with the package and 07e_scale counts parameters and
    operations: they build nothing, and their checks are concept checks."""
    from coursekit.grading.registry import all_suites
    from coursekit.release import exercises

    suites = all_suites()
    counts = {}
    for path in sorted((ROOT / "solutions").glob("0[7-9]*.ipynb")):
        found = exercises(nbformat.read(path, as_version=4))
        counts[path.stem[:3]] = len(found)
        for ex in found:
            assert ex.name in suites and suites[ex.name].points == ex.points, (path.name, ex.name)
    assert counts == {"07a": 2, "07b": 1, "07c": 1, "07d": 0, "07e": 0, "07f": 3, "07g": 3,
                      "07h": 3, "08a": 3, "08b": 3, "09a": 3, "09b": 3}, counts


def test_every_notebook_installs_coursekit_from_the_configured_repository():
    """Both editions' set-up cells start with the install block for _config.yml's repository."""
    from coursekit.release import configured_install_block

    block = configured_install_block(ROOT)
    assert "git+https://github.com/" in block and "@v" in block
    for edition in ("solutions", "notebooks"):
        for path in sorted((ROOT / edition).glob("*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            first = next(c for c in nb.cells if c.cell_type == "code")
            assert first.source.startswith(block), f"{edition}/{path.name}: run coursekit release"


def test_release_rewrites_the_install_block_when_the_repository_changes(tmp_path):
    from coursekit.release import INSTALL_FIRST_LINE, install_block

    (tmp_path / "solutions").mkdir()
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://example.org/me/book\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter"),
                nbformat.v4.new_code_cell("import torch\n"),
                nbformat.v4.new_code_cell("x = 1\n")]
    path = tmp_path / "solutions" / "01_x.ipynb"
    nbformat.write(nb, path)
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    assert f"{path} (the install cell)" in release(solutions, notebooks, check=True)
    release(solutions, notebooks)
    from coursekit import __version__
    want = install_block("https://example.org/me/book", __version__)
    for edition in (solutions, notebooks):
        cells = nbformat.read(edition / "01_x.ipynb", as_version=4).cells
        assert cells[1].source == want + "import torch\n" and cells[2].source == "x = 1\n"
    assert release(solutions, notebooks, check=True) == []
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://example.org/you/book/\n")
    release(solutions, notebooks)
    source = nbformat.read(notebooks / "01_x.ipynb", as_version=4).cells[1].source
    assert source.count(INSTALL_FIRST_LINE) == 1 and "git+https://example.org/you/book@v" in source
    assert source.endswith("\nimport torch\n")
    (tmp_path / "_config.yml").write_text("title: no repository\n")
    with pytest.raises(ReleaseError, match="repository.url"):
        release(solutions, notebooks)


DRAWS = re.compile(r"plt\.show\(\)|plt\.subplots\(|plt\.figure\(|attention_heatmap\(|plot_history\(")


def _explorer_calls(source: str) -> list:
    tree = ast.parse(re.sub(r"(?m)^\s*[%!].*$", "", source))
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Explorer"]


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_figure_has_an_authored_text_alternative(path):
    """A cell that draws a figure carries its text alternative (cell metadata mystnb.image.alt,
    which myst-nb puts on the image); an explorer says what its frames show (description=).
    The same metadata reaches the student edition."""
    student = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        where = f"{path.name}, cell {index}: {cell.source.splitlines()[0][:60]!r}"
        calls = _explorer_calls(cell.source)
        for call in calls:
            description = next((k.value for k in call.keywords if k.arg == "description"), None)
            assert isinstance(description, ast.Constant) and len(description.value) > 30, where
        alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
        if DRAWS.sub("", cell.source) != cell.source and not calls:
            assert len(alt) > 40 and not alt.lower().startswith(("image of", "figure showing")), where
        if alt:
            assert student.cells[index].metadata.get("mystnb") == cell.metadata["mystnb"], where


def test_exercise_ids_and_names_are_unique_across_the_book():
    """check("09.3") and the exports find a suite by its id: two exercises may not share one."""
    from coursekit.grading.registry import all_suites

    suites = list(all_suites().values())
    ids = [s.exercise for s in suites]
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)
    seen = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        from coursekit.release import exercises

        for ex in exercises(nbformat.read(path, as_version=4)):
            assert seen.setdefault(ex.exercise, path.name) == path.name, (ex.exercise, path.name)
