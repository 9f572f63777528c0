"""The test suite's plugin (``-p coursekit.pytest_plugin`` in pyproject.toml): every chapter is
executed once per edition, by nbval, and the book is built from those executions.

nbval runs each notebook's cells in a fresh kernel and keeps the outputs it received on the
item (``IPyNbCell.test_outputs``). When every code cell of a chapter has passed, this plugin
writes the executed notebook into the edition's jupyter-cache (``_build/.jupyter_cache``, or
``_build/student/.jupyter_cache``), keyed like jupyter-book keys it: on the code cells. The book
build that the browser test runs then takes every chapter from that cache instead of executing
it a third time.

For that to work the instructor edition's notebooks must have run before the book is built, and
under pytest-xdist on the same worker: this plugin's scheduler makes ``solutions/*.ipynb`` and
the browser test one unit of work, the chapters first, the build after them. That unit starts
first; the other worker takes the student edition and the unit tests.

A chapter without exercises (02b, 06b) is the same notebook in both editions: when both are
collected, the student edition's copy is not run a second time (it is deselected, and pytest's
summary counts it), and the instructor edition's execution is cached for both editions' books.
The comparison is made afresh in every session, cell by cell: a copy that differs in anything
runs.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import nbformat
import pytest

from coursekit.book import ROOT, execution_cache

BOOK_GROUP = "book"
BROWSER_TEST = "tests/test_book_browser.py"
EDITIONS = {"solutions": "instructor", "notebooks": "student"}


def _notebook_edition(item: pytest.Item) -> str | None:
    """``instructor``/``student`` for an nbval cell of a chapter, else None."""
    if type(item).__name__ != "IPyNbCell":
        return None
    path = Path(str(item.parent.fspath)).resolve()
    if path.parent.parent != ROOT:
        return None
    return EDITIONS.get(path.parent.name)


def _in_book_group(nodeid: str) -> bool:
    return nodeid.startswith("solutions/") or nodeid.split("::", 1)[0] == BROWSER_TEST


def same_notebook(a: Path, b: Path) -> bool:
    """Whether two notebooks have the same cells: type, source and metadata, in order."""
    def cells(path: Path) -> list:
        return [(c.cell_type, c.source, c.get("metadata", {}))
                for c in nbformat.read(path, as_version=4).cells]
    return cells(a) == cells(b)


twins: dict[Path, Path] = {}  # instructor chapter -> its identical student copy, this session


def pytest_collection_modifyitems(session, config, items: list[pytest.Item]) -> None:
    """The book group first (the longest unit of work starts first): the instructor edition's
    chapters, then the browser test that builds the book from their executions. Then the
    student edition (long units) and the other tests, as collected. A student chapter identical
    to its collected instructor chapter is deselected (see the module's docstring)."""
    collected = {Path(str(item.parent.fspath)).resolve() for item in items
                 if _notebook_edition(item) == "instructor"}
    twins.clear()
    students = {Path(str(item.parent.fspath)).resolve() for item in items
                if _notebook_edition(item) == "student"}
    for path in sorted(students):  # each notebook once, not once per cell
        instructor = ROOT / "solutions" / path.name
        if instructor in collected and same_notebook(instructor, path):
            twins[instructor] = path
    if twins:
        copies = set(twins.values())
        dropped = [i for i in items if _notebook_edition(i) == "student"
                   and Path(str(i.parent.fspath)).resolve() in copies]
        items[:] = [i for i in items if i not in dropped]
        config.hook.pytest_deselected(items=dropped)

    def rank(item: pytest.Item) -> int:
        file = item.nodeid.split("::", 1)[0]
        return (0 if file.startswith("solutions/") else 1 if file == BROWSER_TEST
                else 2 if file.startswith("notebooks/") else 3)

    items.sort(key=rank)  # stable: the cells of a notebook keep their order


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Units of work for pytest-xdist: the book group is one unit, every other file another (a
    notebook's cells share one kernel, a module its fixtures), handed out in collection order.
    (xdist's own ``--dist loadgroup`` would do the grouping, but it renames node ids in a way
    pytest 9 ignores.)"""
    from xdist.scheduler import LoadScopeScheduling

    class BookScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return BOOK_GROUP if _in_book_group(nodeid) else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False
    return BookScheduling(config, log)


class _Execution:
    """The outputs nbval has collected so far for one notebook."""

    def __init__(self, path: Path, edition: str, n_code_cells: int,
                 outputs: dict[int, list] | None = None, seconds: float = 0.0) -> None:
        self.path, self.edition, self.n_code_cells = path, edition, n_code_cells
        self.outputs: dict[int, list] = dict(outputs or {})
        self.seconds = seconds

    def notebook(self) -> nbformat.NotebookNode:
        nb = nbformat.read(self.path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        for count, cell in enumerate(code, start=1):
            cell.execution_count = count
            cell.outputs = []
            for out in self.outputs[count - 1]:
                last = cell.outputs[-1] if cell.outputs else None
                if (out["output_type"] == "stream" and last and last.output_type == "stream"
                        and last.name == out["name"]):
                    last.text += out["text"]  # as nbclient stores back-to-back stream messages
                else:
                    cell.outputs.append(_output(out, count))
        return nb


def _output(out: nbformat.NotebookNode, count: int) -> nbformat.NotebookNode:
    """nbval's record of one output as nbformat stores it."""
    kind = out["output_type"]
    if kind == "stream":
        return nbformat.v4.new_output("stream", name=out["name"], text=out["text"])
    if kind == "execute_result":
        return nbformat.v4.new_output("execute_result", data=out["data"],
                                      metadata=out.get("metadata", {}), execution_count=count)
    return nbformat.v4.new_output("display_data", data=out["data"], metadata=out.get("metadata", {}))


_executions: dict[Path, _Execution] = {}
cached: dict[str, list[Path]] = {"instructor": [], "student": []}  # this process, this session
_received: list[list] = []  # what nbval received for the running cell, in order (see below)


def pytest_configure(config) -> None:
    """nbval merges a cell's stream outputs into one per stream before comparing (text printed
    after a figure moves above it) and keeps only the merged list. The book shows the outputs
    in the order they came, as a notebook does, so the plugin records nbval's list before the
    merge: every list nbval merges during a cell passes through here, the received outputs
    first.

    It also sets ``TQDM_DISABLE=1`` (unless set), which the kernels nbval starts inherit: no
    progress bars under nbval (:func:`coursekit.train.bars_off` says why)."""
    import nbval.plugin

    os.environ.setdefault("TQDM_DISABLE", "1")

    merge = nbval.plugin.coalesce_streams
    if getattr(merge, "records_for_the_book", False):
        return

    def recording_merge(outputs):
        _received.append([nbformat.from_dict(dict(o)) for o in outputs or []])
        return merge(outputs)

    recording_merge.records_for_the_book = True
    nbval.plugin.coalesce_streams = recording_merge


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    if call.when == "call":
        received = _received[0] if _received else None
        _received.clear()
    outcome = yield
    report = outcome.get_result()
    edition = _notebook_edition(item)
    if edition is None or report.when != "call":
        return
    path = Path(str(item.parent.fspath)).resolve()
    if edition == "instructor" and report.passed and received:
        _fail_when_a_solution_loses_points(report, received)
    if not report.passed or item.test_outputs is None or received is None:
        _executions.pop(path, None)  # a failed or skipped cell: this execution is not cached
        return
    run = _executions.get(path)
    if run is None or item.cell_num == 0:
        n_code = sum(c.cell_type == "code" for c in item.parent.nb.cells)
        run = _executions[path] = _Execution(path, edition, n_code)
    run.outputs[item.cell_num] = received
    run.seconds += report.duration
    if len(run.outputs) == run.n_code_cells:
        del _executions[path]
        try:
            _cache(run)
        except Exception as err:  # the book build will execute the chapter itself
            warnings.warn(f"{path.name}: its execution was not cached for the book ({err!r})",
                          stacklevel=1)


FELL_BACK = "The rest of the chapter uses coursekit's"  # check()'s line for a failed exercise


def _fail_when_a_solution_loses_points(report, received: list) -> None:
    """In the instructor edition every ``check(...)`` grades the book's own solution: a cell
    whose check fell back to coursekit's implementation fails, with what check printed.
    (nbval in lax mode compares no output, and check prints rather than raises.)"""
    printed = "".join(o.get("text", "") for o in received if o.get("output_type") == "stream")
    if FELL_BACK in printed:
        report.outcome = "failed"
        report.longrepr = ("the solution in this cell did not earn full marks from its own "
                           "check(); check printed:\n" + printed[-3000:])


def _cache(run: _Execution) -> None:
    from filelock import FileLock
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    nb = run.notebook()
    nbformat.validate(nb)
    folder = execution_cache(run.edition)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        get_cache(str(folder)).cache_notebook_bundle(
            CacheBundleIn(nb, str(run.path),
                          data={"execution_seconds": run.seconds,
                                "executed_by": "nbval"}),
            check_validity=False, overwrite=True)
    cached[run.edition].append(run.path)
    twin = twins.get(run.path) if run.edition == "instructor" else None
    if twin is not None:  # the same notebook in the student edition: the same execution
        _cache(_Execution(twin, "student", run.n_code_cells, outputs=run.outputs,
                          seconds=run.seconds))
