"""``coursekit export``: the course for other graders (nbgrader, Otter-Grader).

Both exports start from ``solutions/`` (the one source of a chapter) and keep every cell of the
chapter; what they add is each grader's own markup around the exercise cells and one graded test
cell per exercise that calls coursekit's suite, so a student's score is the one ``coursekit
grade`` gives. The helpers here are shared: which notebooks make which chapter.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from coursekit.release import NB_VERSION, ReleaseError, exercise_meta, normalise


def chapter_notebooks(solutions: Path, chapter: str | None = None) -> dict[str, list[Path]]:
    """``{"03": [solutions/03_self_attention.ipynb], "02": [02a_..., 02b_...], ...}``: the
    notebooks of each chapter (of ``chapter`` only, "02" or one notebook "02b", when given)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(Path(solutions).glob("*.ipynb")):
        match = re.match(r"(\d\d)([a-z]?)_", path.name)
        if not match:
            continue
        if chapter and chapter not in (match.group(1), match.group(1) + match.group(2)):
            continue
        found.setdefault(match.group(1), []).append(path)
    if not found:
        raise ValueError(f"no chapter {chapter} in {solutions}" if chapter
                         else f"no chapter notebooks in {solutions}")
    return found


def instructor_notebook(path: Path):
    """The solutions notebook as the export's source: read, normalised like the student
    edition (stable metadata, no outputs), solutions kept."""
    try:
        nb = nbformat.read(path, as_version=NB_VERSION)
    except Exception as err:
        raise ReleaseError(f"{path}: not a readable notebook ({err})") from None
    normalise(nb, keep_outputs=False)
    return nb


def exercise_cells(nb, where: str) -> list[tuple[int, object]]:
    """``(cell index, exercise metadata)`` of each exercise cell."""
    found = []
    for index, cell in enumerate(nb.cells):
        meta = exercise_meta(cell, f"{where}, cell {index}")
        if meta is not None:
            found.append((index, meta))
    return found


def cell_id(exercise: str) -> str:
    """An identifier both graders accept (letters, digits, ``_``): ``"03.1"`` -> ``"03_1"``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", exercise)
