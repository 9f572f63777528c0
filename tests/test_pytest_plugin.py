"""The suite's own plugin (coursekit.pytest_plugin): how nbval's executions become the
notebooks the book is built from, and how the work is split between the xdist workers. The
whole path (nbval, cache, build, browser) is exercised by tests/test_book_browser.py."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from coursekit import pytest_plugin
from coursekit.book import ROOT, execution_cache


def _received(kind: str, **fields) -> nbformat.NotebookNode:
    """One output as nbval records it from the kernel's messages."""
    return nbformat.from_dict({"output_type": kind, **fields})


def test_an_execution_keeps_the_order_outputs_came_in_and_joins_back_to_back_streams(tmp_path):
    path = tmp_path / "nb.ipynb"
    nb = new_notebook(cells=[new_markdown_cell("# T"), new_code_cell("print(1)"),
                             new_code_cell("x", metadata={"tags": ["exercise"]})])
    nbformat.write(nb, path)
    run = pytest_plugin._Execution(path, "instructor", n_code_cells=2)
    figure = {"image/png": "iVBOR", "text/plain": "<Figure>"}
    run.outputs[0] = [_received("stream", name="stdout", text="a\n"),
                      _received("stream", name="stdout", text="b\n"),
                      _received("display_data", data=figure, metadata={}),
                      _received("stream", name="stdout", text="after the figure\n"),
                      _received("stream", name="stderr", text="warn\n")]
    run.outputs[1] = [_received("execute_result", data={"text/plain": "3"}, metadata={},
                                execution_count=7)]
    executed = run.notebook()
    nbformat.validate(executed)
    first, second = (c for c in executed.cells if c.cell_type == "code")
    assert [(o.output_type, o.get("name")) for o in first.outputs] == [
        ("stream", "stdout"), ("display_data", None), ("stream", "stdout"), ("stream", "stderr")]
    assert first.outputs[0].text == "a\nb\n" and first.outputs[2].text == "after the figure\n"
    assert (first.execution_count, second.execution_count) == (1, 2)
    assert second.outputs[0].execution_count == 2 and second.outputs[0].data == {"text/plain": "3"}
    assert second.metadata["tags"] == ["exercise"]  # the book reads exercise cells by their tags
    assert executed.cells[0].cell_type == "markdown"


def test_the_instructor_edition_and_the_browser_test_are_one_unit_of_work():
    book = pytest_plugin._in_book_group
    assert book("solutions/01_rnn_recap.ipynb::Cell 3")
    assert book("tests/test_book_browser.py::test_the_book_builds_without_warnings")
    assert not book("notebooks/01_rnn_recap.ipynb::Cell 3")
    assert not book("tests/test_book_build.py::test_editions_are_checked_and_built_in_separate_folders")


def test_executions_go_where_each_edition_builds_from():
    assert execution_cache("instructor") == ROOT / "_build" / ".jupyter_cache"
    assert execution_cache("student") == ROOT / "_build" / "student" / ".jupyter_cache"


def test_an_instructor_check_that_falls_back_fails_its_cell():
    """check() prints; nbval's lax mode compares no output. The plugin fails the cell when the
    book's own solution did not earn full marks (check fell back to coursekit's version)."""
    class Report:
        outcome, longrepr = "passed", None

    def stream(text):
        return nbformat.v4.new_output("stream", name="stdout", text=text)

    full = [stream("Exercise 03.1 · scaled_dot_product_attention: 3 / 3 points (5/5 cases)\n")]
    lost = [stream("Exercise 06.3 · EncoderBlock: 0 / 4 points (0/9 cases)\n"),
            stream("The rest of the chapter uses coursekit's EncoderBlock.\n")]
    kept, failed = Report(), Report()
    pytest_plugin._fail_when_a_solution_loses_points(kept, full)
    pytest_plugin._fail_when_a_solution_loses_points(failed, lost)
    assert kept.outcome == "passed" and kept.longrepr is None
    assert failed.outcome == "failed" and "0 / 4 points" in failed.longrepr


def test_a_chapter_without_exercises_is_the_same_notebook_in_both_editions():
    """What lets the suite run such a chapter once (pytest_collection_modifyitems): coursekit
    release writes it unchanged. A chapter with exercises differs, so both of its copies run."""
    from coursekit.release import exercises

    without, with_ = [], []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        (with_ if exercises(nbformat.read(path, 4)) else without).append(path.name)
        same = pytest_plugin.same_notebook(path, ROOT / "notebooks" / path.name)
        assert same == (path.name in without), path.name
    assert without and with_, (without, with_)


def test_same_notebook_compares_every_cell_source_and_metadata(tmp_path):
    cells = [new_markdown_cell("# T"), new_code_cell("x = 1", metadata={"tags": ["a"]})]
    paths = []
    for name, change in [("a", None), ("b", None), ("c", ("source", "x = 2")),
                         ("d", ("metadata", {"tags": []}))]:
        nb = new_notebook(cells=[nbformat.from_dict(dict(c)) for c in cells])
        if change:
            nb.cells[1][change[0]] = change[1]
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
        paths.append(tmp_path / f"{name}.ipynb")
    a, b, c, d = paths
    assert pytest_plugin.same_notebook(a, b)
    assert not pytest_plugin.same_notebook(a, c) and not pytest_plugin.same_notebook(a, d)


def test_the_instructor_execution_of_a_twin_is_cached_for_both_editions(tmp_path, monkeypatch):
    from jupyter_cache import get_cache

    monkeypatch.setattr(pytest_plugin, "execution_cache", lambda edition: tmp_path / edition)
    instructor, student = tmp_path / "solutions.ipynb", tmp_path / "notebooks.ipynb"
    for path in (instructor, student):
        nbformat.write(new_notebook(cells=[new_code_cell("print(1)")]), path)
    monkeypatch.setattr(pytest_plugin, "twins", {instructor: student})
    monkeypatch.setattr(pytest_plugin, "cached", {"instructor": [], "student": []})
    run = pytest_plugin._Execution(instructor, "instructor", n_code_cells=1,
                                   outputs={0: [_received("stream", name="stdout", text="1\n")]})
    pytest_plugin._cache(run)
    assert pytest_plugin.cached == {"instructor": [instructor], "student": [student]}
    for edition, path in [("instructor", instructor), ("student", student)]:
        record, = get_cache(str(tmp_path / edition)).list_cache_records()
        assert record.uri == str(path)
        cell = get_cache(str(tmp_path / edition)).get_cache_bundle(record.pk).nb.cells[0]
        assert cell.outputs[0].text == "1\n"
