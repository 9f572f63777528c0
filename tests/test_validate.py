"""``coursekit validate``: seeds parsed, nbval run per notebook, a cell that fails is reported."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from coursekit import validate


def test_parse_seeds():
    assert validate.parse_seeds("0-4") == [0, 1, 2, 3, 4]
    assert validate.parse_seeds("0,2, 5-6") == [0, 2, 5, 6]
    fresh = validate.parse_seeds("random:10", random.Random(7))
    assert len(set(fresh)) == 10 and min(fresh) >= validate.FRESH, "fresh draws, never tuning seeds"
    assert fresh == validate.parse_seeds("random:10", random.Random(7)), "a draw can be re-run"
    assert validate.parse_seeds("0-1,random:2", random.Random(1))[:2] == [0, 1]
    for bad in ("random:0", "random:x"):
        with pytest.raises(ValueError):
            validate.parse_seeds(bad)
    with pytest.raises(ValueError, match="--seeds"):
        validate.parse_seeds("a-b")


def test_every_chapter_in_both_editions_in_book_order():
    paths = validate.notebooks(None, ["instructor", "student"])
    assert len(paths) == 2 * len(list((validate.ROOT / "solutions").glob("*.ipynb")))
    assert [p.parent.name for p in paths[:2]] == ["solutions", "notebooks"]
    assert [p.name for p in validate.notebooks(["02b"], ["student"])] == [
        "02b_attention_length_and_images.ipynb"]
    with pytest.raises(ValueError, match="no chapter"):
        validate.notebooks(["99"], ["student"])


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_run_one_counts_cells_and_sees_the_seed(tmp_path):
    folder = tmp_path / "solutions"
    folder.mkdir()
    good = _notebook(folder / "good.ipynb", "import os, coursekit",
                     "assert coursekit.seed(1) == 3001, coursekit.seed(1)")
    run = validate.run_one(good, "quick", 3, 60, ("cpu", "x"))
    assert (run.cells_passed, run.cells_failed, run.ok) == (2, 0, True), run.failure
    assert (run.notebook, run.edition, run.seed) == ("good", "instructor", 3)

    bad = _notebook(folder / "bad.ipynb", "x = 1", "assert x == 2, 'the claim is false'", "y = 3")
    run = validate.run_one(bad, "quick", 0, 60, ("cpu", "x"))
    assert not run.ok and run.cells_failed >= 1
    assert "the claim is false" in run.failure


MANY_BARS = """import torch
from coursekit.train import fit
model = torch.nn.Linear(2, 1)
for run in range(800):   # each training's progress bar is a widget: a dozen messages or more
    fit(model, lambda m, x: m(x).pow(2).mean(), lambda step: torch.ones(1, 2), steps=2)"""


def test_a_cell_with_many_trainings_passes(tmp_path):
    # nbval reads a cell's messages only once the cell has finished. Thousands of progress-bar
    # messages overflow the queue between the kernel and nbval, the kernel's 'idle' is dropped,
    # and nbval fails the cell and skips the rest: how 06a's 44-training grid failed beside
    # another kernel. validate's kernels run with TQDM_DISABLE=1, which coursekit's fit honours
    folder = tmp_path / "solutions"
    folder.mkdir()
    nb = _notebook(folder / "bars.ipynb", MANY_BARS, "print('the next cell runs')")
    with_bars = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    plain = subprocess.run([sys.executable, "-m", "pytest", str(nb), "-o", "addopts=", "-q",
                            "-p", "no:cacheprovider", "--nbval-lax"],
                           capture_output=True, text=True, cwd=tmp_path, env=with_bars)
    assert "exceeded waiting for output" in plain.stdout, plain.stdout[-2000:]
    assert "1 failed, 1 xfailed" in plain.stdout, plain.stdout[-2000:]

    run = validate.run_one(nb, "quick", 0, 120, ("cpu", "x"))
    assert (run.cells_passed, run.cells_failed, run.cells_skipped) == (2, 0, 0), run.failure


def test_a_failure_says_what_nbval_saw():
    # the verdict and the traceback's end, without the cell's source
    report = ("#x1B[91mNotebook cell execution failed#x1B[0m\n#x1B[94mCell 17: Timeout of 5 seconds "
              "exceeded waiting for output.\n\nInput:\n#x1B[0mx = 1\nassert learns(False), 'no'\n")
    assert validate._reason(report) == "Timeout of 5 seconds exceeded waiting for output."
    report = ("Notebook cell execution failed\nCell 3: Cell execution caused an exception\n\nInput:\n"
              "assert x == 2\n\nTraceback:\n----\nAssertionError   Traceback\n----> 1 assert x == 2\n\n"
              "AssertionError: the claim is false\n")
    reason = validate._reason(report)
    assert reason.startswith("Cell execution caused an exception\n")
    assert reason.endswith("AssertionError: the claim is false") and "Input" not in reason


def test_validate_writes_the_report(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "solutions"
    folder.mkdir()
    nb = _notebook(folder / "one.ipynb", "import coursekit; print(coursekit.profile())",
                   "acc = 0.9 - 0.1 * coursekit.seed(0) / 1000\nassert acc > 0.5 and acc <= 1, acc",
                   "def f(n):\n    assert n < 3\n[f(n) for n in range(3)]")
    monkeypatch.setattr(validate, "notebooks", lambda only, editions: [nb])
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    seen_before_each_run = []  # the report as the second run starts: the first one is in it
    real_run_one = validate.run_one

    def run_one(*args, **kwargs):
        seen_before_each_run.append(json.loads(report.read_text()) if report.exists() else None)
        return real_run_one(*args, **kwargs)

    monkeypatch.setattr(validate, "run_one", run_one)
    runs = validate.validate("full", [0, 1], ["instructor"], report=Path("report.json"))
    assert [r.ok for r in runs] == [True, True]
    first, second = seen_before_each_run
    assert first is None and second is not None, "the report is not written after each notebook"
    assert [r["seed"] for r in second["runs"]] == [0] and not second["complete"]
    data = json.loads(report.read_text())
    assert data["complete"] and data["passed"] and data["profile"] == "full" and data["seeds"] == [0, 1]
    assert [r["seed"] for r in data["runs"]] == [0, 1]
    assert {"device", "torch", "seconds", "cells_passed", "cells_failed"} <= set(data["runs"][0])
    assert "[  2/2]" in capsys.readouterr().out
    # every numeric assertion's margin, per seed: the tightest of a repeated one
    rows = {row["assert"]: row for row in data["margins"]}
    assert set(rows) == {"acc > 0.5", "acc <= 1", "n < 3"}
    assert rows["acc > 0.5"]["per_seed"]["1"]["values"] == pytest.approx([0.8, 0.5])
    assert rows["acc > 0.5"]["min_margin"] == pytest.approx(0.3)
    assert rows["acc > 0.5"]["max_margin"] == pytest.approx(0.4)
    assert rows["n < 3"]["min_margin"] == pytest.approx(1)
    assert "`acc > 0.5`" in (tmp_path / "margins.md").read_text()
    assert "| one | instructor | 2/2 |" in (tmp_path / "summary.md").read_text()


def test_margins_do_not_change_what_an_assertion_decides():
    import ast

    from coursekit import margins

    source = "x = 2\nassert x > 1 and x < 3, 'ok'\nassert 0 < x <= 1, 'x is out of range'\n"
    tree = ast.fix_missing_locations(margins._Rewrite().visit(ast.parse(source)))
    with pytest.raises(AssertionError, match="x is out of range"):
        exec(compile(tree, "cell", "exec"), {"__coursekit_record": margins.record})
    assert margins.margin([2.0, 1.0], [">"]) == 1.0
    assert margins.margin([0.0, 2.0, 1.0], ["<", "<="]) == -1.0


def test_the_code_digest_follows_the_code_not_the_prose(tmp_path):
    """Runs are pooled by it (benchmarks/validation_page.py): prose and outputs may change, code
    may not."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A"),
                                         nbformat.v4.new_code_cell("assert 1 < 2")])
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    before = validate.code_digest(path)
    nb.cells[0].source = "# A, reworded"
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="printed")]
    nbformat.write(nb, path)
    assert validate.code_digest(path) == before
    nb.cells[1].source = "assert 1 < 3"
    nbformat.write(nb, path)
    assert validate.code_digest(path) != before
