"""solutions/ -> notebooks/: the student edition is generated, never edited by hand.

In solutions/, an exercise is a code cell tagged ``exercise`` whose metadata names it
(``{"coursekit": {"exercise": "01.2", "name": "lstm_cell", "points": 3}}``) and whose answer sits
between ``### BEGIN SOLUTION`` and ``### END SOLUTION``. Release replaces each such region with a
``raise NotImplementedError``, clears every output except those of cells marked
``# NBVAL_CHECK_OUTPUT``, and normalises metadata so that the files are stable under git.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CHECK_OUTPUT = "# NBVAL_CHECK_OUTPUT"
EXERCISE_TAG = "exercise"
KEEP_CELL_METADATA = ("tags", "coursekit", "mystnb")  # mystnb: a figure's alt text
NB_VERSION = 4


# The set-up cell of every notebook starts with this block: where the book's package is missing
# (Colab, a fresh Jupyter), it installs coursekit from the book's repository at the version of the
# book the notebook came from. The repository is the one setting `repository.url` in
# _config.yml; `coursekit release` writes the block into both editions from it.
INSTALL_FIRST_LINE = "try:  # the book's package; where it is missing (Colab), install it"
_INSTALL_BLOCK = re.compile(re.escape(INSTALL_FIRST_LINE) + r"\n(?:    .*\n|except ImportError:\n)*\n?")


def install_block(url: str, version: str) -> str:
    """The set-up cell's first lines, for a book published at ``url`` (a git repository whose
    tag ``v<version>`` holds this book). ``COURSEKIT_SOURCE`` overrides what pip installs (a
    wheel, for the test that plays a fresh Colab)."""
    source = f"coursekit @ git+{url.rstrip('/')}@v{version}"
    return (f"{INSTALL_FIRST_LINE}\n"
            "    import coursekit\n"
            "except ImportError:\n"
            "    import os\n"
            f'    source = os.environ.get("COURSEKIT_SOURCE", "{source}")\n'
            '    print(f"coursekit is not installed: installing it from {source}")\n'
            '    %pip install --quiet "{source}"\n'
            "\n")


def configured_install_block(root: Path) -> str | None:
    """:func:`install_block` for the book whose ``_config.yml`` is in ``root`` (None without one)."""
    config = root / "_config.yml"
    if not config.is_file():
        return None
    import yaml

    from coursekit import __version__

    url = ((yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("repository") or {}).get("url")
    if not url:
        raise ReleaseError(f"{config}: repository.url is not set (the notebooks install coursekit "
                           "from it)")
    return install_block(str(url), __version__)


def with_install_block(nb, block: str) -> bool:
    """Put ``block`` at the start of the notebook's first code cell (replacing an older one);
    return whether the cell changed."""
    cell = next((c for c in nb.cells if c.cell_type == "code"), None)
    if cell is None:
        return False
    found = _INSTALL_BLOCK.match(cell.source)
    rest = cell.source[found.end():] if found else cell.source
    if cell.source == block + rest:
        return False
    cell.source = block + rest
    return True


class ReleaseError(ValueError):
    """A solutions notebook that cannot be released; the message names the file and cell."""


@dataclass(frozen=True)
class Exercise:
    exercise: str
    name: str
    points: float
    cell_index: int


def exercise_meta(cell, where: str) -> Exercise | None:
    """The exercise a cell declares, or None; malformed declarations raise ReleaseError."""
    tags = cell.get("metadata", {}).get("tags", [])
    if cell.get("cell_type") != "code" or EXERCISE_TAG not in tags:
        return None
    meta = cell.get("metadata", {}).get("coursekit")
    if not isinstance(meta, dict):
        raise ReleaseError(f"{where}: an exercise cell needs metadata "
                           '{"coursekit": {"exercise": "NN.M", "name": ..., "points": ...}}')
    try:
        exercise = Exercise(str(meta["exercise"]), str(meta["name"]), float(meta["points"]), -1)
    except (KeyError, TypeError, ValueError) as err:
        raise ReleaseError(f"{where}: coursekit metadata {meta!r} lacks a valid {err}") from None
    if not re.fullmatch(r"\d\d\.\d+", exercise.exercise):
        raise ReleaseError(f"{where}: exercise id {exercise.exercise!r} is not of the form 'NN.M'")
    return exercise


def exercises(nb) -> list[Exercise]:
    """The exercises a notebook declares, in order (used by release, check and the grader)."""
    found = []
    for index, cell in enumerate(nb.cells):
        meta = exercise_meta(cell, f"cell {index}")
        if meta is not None:
            found.append(Exercise(meta.exercise, meta.name, meta.points, index))
    return found


def strip_solution(source: str, exercise: str, where: str) -> str:
    """Replace every BEGIN/END SOLUTION region with a stub that raises NotImplementedError."""
    out, inside = [], False
    for lineno, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ReleaseError(f"{where}, line {lineno}: {BEGIN} inside another solution")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}# YOUR CODE HERE", f'{indent}raise NotImplementedError("Exercise {exercise}")']
        elif stripped == END:
            if not inside:
                raise ReleaseError(f"{where}, line {lineno}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ReleaseError(f"{where}: {BEGIN} is never closed by {END}")
    return "\n".join(out)


def normalise(nb, keep_outputs: bool) -> None:
    """Stable metadata; outputs only where a cell is marked NBVAL_CHECK_OUTPUT."""
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    code_index = 0
    for cell in nb.cells:
        cell.metadata = {k: cell.metadata[k] for k in KEEP_CELL_METADATA if k in cell.metadata}
        if cell.cell_type != "code":
            continue
        code_index += 1
        if not (keep_outputs and CHECK_OUTPUT in cell.source):
            cell.outputs = []
        # nbval only compares cells it believes were run: give checked cells a stable count
        cell.execution_count = code_index if cell.outputs else None
        for output in cell.outputs:
            if "execution_count" in output:
                output["execution_count"] = cell.execution_count


def student_edition(solution_path: Path):
    """The student notebook for one solutions notebook, as an in-memory nbformat object."""
    import nbformat

    try:
        nb = nbformat.read(solution_path, as_version=NB_VERSION)
    except Exception as err:
        raise ReleaseError(f"{solution_path}: not a readable notebook ({err})") from None
    names = set()
    for index, cell in enumerate(nb.cells):
        where = f"{solution_path.name}, cell {index}"
        meta = exercise_meta(cell, where)
        has_markers = BEGIN in cell.source or END in cell.source
        if meta is None:
            if has_markers and cell.cell_type == "code":
                raise ReleaseError(f"{where}: solution markers in a cell not tagged 'exercise'")
            continue
        if not has_markers:
            raise ReleaseError(f"{where}: exercise {meta.exercise} has no {BEGIN} region")
        if meta.name in names:
            raise ReleaseError(f"{where}: exercise name {meta.name!r} is used twice")
        names.add(meta.name)
        cell.source = strip_solution(cell.source, meta.exercise, where)
    normalise(nb, keep_outputs=True)
    return nb


def render(nb) -> str:
    import nbformat

    return nbformat.writes(nb, version=NB_VERSION) + "\n"


def release(solutions: Path, notebooks: Path, check: bool = False) -> list[str]:
    """Write (or, with ``check``, compare) the student edition. Returns the stale/changed paths.

    When the book's ``_config.yml`` sits beside ``solutions``, the set-up cell of every solutions
    notebook is first given the install block for its ``repository.url`` (written in place, or
    reported as stale with ``check``)."""
    import nbformat

    if not solutions.is_dir():
        raise ReleaseError(f"{solutions} is not a folder of solution notebooks")
    changed = []
    block = configured_install_block(solutions.resolve().parent)
    if block is not None:
        for path in sorted(solutions.glob("*.ipynb")):
            nb = nbformat.read(path, as_version=NB_VERSION)
            if with_install_block(nb, block):
                changed.append(f"{path} (the install cell)")
                if not check:
                    tmp = path.with_suffix(".ipynb.tmp")
                    tmp.write_text(render(nb), encoding="utf-8")
                    tmp.replace(path)
    wanted = {}
    for path in sorted(solutions.glob("*.ipynb")):
        wanted[notebooks / path.name] = render(student_edition(path))
    for target, text in wanted.items():
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            changed.append(str(target))
            if not check:
                notebooks.mkdir(parents=True, exist_ok=True)
                tmp = target.with_suffix(".ipynb.tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.replace(target)
    for extra in sorted(set(notebooks.glob("*.ipynb")) - set(wanted)) if notebooks.is_dir() else []:
        changed.append(f"{extra} (no solutions notebook)")
        if not check:
            extra.unlink()
    return changed


def store_checked_outputs(path: Path, timeout: int = 600) -> int:
    """Execute a solutions notebook and keep outputs only in cells marked NBVAL_CHECK_OUTPUT.

    This is how the expected outputs that nbval compares are (re)generated. Returns how many
    cells kept an output.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=NB_VERSION)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    normalise(nb, keep_outputs=True)
    path.write_text(render(nb), encoding="utf-8")
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.outputs)
