"""Finding and reading submissions: notebooks, ``.py`` files, folders and zips.

Everything here reads untrusted files in the grader's own process, so it reads defensively:
sizes are capped before anything is decompressed or parsed, a zip is never extracted to disk
(members are read in memory, each with a cap, so a lying header cannot blow it up), symlinks in
folders are not followed, and every failure becomes a :class:`SubmissionError` whose message is
shown to the student. Student Python is parsed (``ast``), never compiled or run, here.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import threading
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from coursekit.release import EXERCISE_TAG, ReleaseError, exercise_meta

MAX_FILE = 32 << 20  # bytes: a notebook with figures is a few MiB
MAX_ZIP_MEMBERS = 10_000
MAX_ZIP_TOTAL = 1 << 30  # bytes, all members together
MAX_RATIO = 100  # uncompressed / compressed, beyond which a large member is a zip bomb
MAX_SOURCE = 1 << 20  # characters of one cell that the grader will analyse
MAX_CODE = 64 << 10  # of which characters outside comment lines
MAX_NESTING = 2  # zips inside zips: a student's archive inside the platform's export, and one more
SUFFIXES = (".ipynb", ".py")


# CPython 3.11's ast.parse is not safe in concurrent threads (gh-106905: "AST constructor
# recursion depth mismatch"); the batch grader parses in its worker threads.
PARSING = threading.Lock()


class SubmissionError(Exception):
    """A submission that cannot be graded; the message says why, for the student."""


@dataclass
class Submission:
    """One file to grade. ``id`` names its results folder; ``read`` returns its bytes.
    ``lms_path``: the names under the folder or zip the instructor gave, outermost first (the
    learning platform's own names come first; the student's own names inside them later)."""

    id: str
    origin: str
    filename: str
    read: Callable[[], bytes]
    problem: str | None = None  # refused before reading (e.g. a zip bomb)
    lms_path: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- discovery

# Names that a submission's results folder may not take: its own files (``a.ipynb`` and
# ``a/results.json.ipynb`` would otherwise both write ``a/results.json``).
RESULT_FILES = {"results.json", "feedback.md"}


def _clean(part: str) -> str:
    part = re.sub(r"[^A-Za-z0-9._@+-]", "_", part)[:100].lstrip(".")
    part = part or "_"
    return part + "_" if part in RESULT_FILES else part


def _ident(parts: Iterable[str]) -> str:
    parts = [_clean(p) for p in parts]
    # a folder named like a class file (grades.csv/...) would collide with it
    parts = [p + "_" if p in RESERVED and i < len(parts) - 1 else p for i, p in enumerate(parts)]
    return "/".join(parts)


def display(name: str) -> str:
    """A file or member name as text: a name that is not UTF-8 (what ``unzip`` leaves from an
    export written without the UTF-8 flag) has its undecodable bytes replaced."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _read_file(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as err:
        raise SubmissionError(f"the file could not be read ({err.strerror or err})") from None
    if len(data) > MAX_FILE:
        raise SubmissionError(f"the file is larger than {MAX_FILE >> 20} MiB")
    return data


Opener = Callable[[], "str | Path | io.BytesIO"]


def _read_member(opener: Opener, info: zipfile.ZipInfo) -> bytes:
    try:
        with zipfile.ZipFile(opener()) as zf, zf.open(info) as member:
            data = member.read(MAX_FILE + 1)
    except SubmissionError:
        raise
    except Exception as err:  # corrupt, encrypted, unsupported compression ...
        raise SubmissionError(f"the zip member could not be unpacked ({type(err).__name__}: "
                              f"{err})") from None
    if len(data) > MAX_FILE:
        raise SubmissionError(f"the zip member unpacks to more than {MAX_FILE >> 20} MiB: refused "
                              "as a possible zip bomb")
    return data


def _is(is_submission: Callable[[bytes], bool], path: Path) -> bool:
    try:
        return is_submission(_read_file(path))
    except SubmissionError:
        return True  # unreadable: report it rather than skip it


def _nested(opener: Opener, info: zipfile.ZipInfo) -> Opener:
    """Open a zip that is a member of another, in memory, each time it is needed (nothing is
    kept between reads, nothing written to disk)."""
    return lambda: io.BytesIO(_read_member(opener, info))


def _zip_entries(archive: Path | Opener, prefix: tuple[str, ...], origin: str,
                 is_submission: Callable[[bytes], bool], lms: tuple[str, ...] = (),
                 depth: int = 0) -> list[Submission]:
    """The submissions in a zip (``archive``: its path, or an opener for a zip inside a zip);
    a zip inside it is opened in turn, up to :data:`MAX_NESTING` levels."""
    opener: Opener = archive if callable(archive) else (lambda: archive)
    name = prefix[-1] if prefix else "archive"
    try:
        with zipfile.ZipFile(opener()) as zf:
            infos = zf.infolist()
    except SubmissionError as err:
        return [Submission(_ident(prefix), origin, display(name), lambda: b"", str(err), lms)]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
        return [Submission(_ident(prefix), origin, display(name), lambda: b"",
                           f"not a readable zip file ({err})", lms)]
    if len(infos) > MAX_ZIP_MEMBERS:
        return [Submission(_ident(prefix), origin, display(name), lambda: b"",
                           f"the zip holds {len(infos)} files (limit {MAX_ZIP_MEMBERS})", lms)]
    found, total = [], 0
    for info in infos:
        member = display(info.filename)
        parts = PurePosixPath(member.replace("\\", "/")).parts
        parts = tuple(p for p in parts if p not in ("", "/", ".."))
        is_zip = bool(parts) and parts[-1].lower().endswith(".zip")
        if (info.is_dir() or not parts or any(p.startswith((".", "__MACOSX")) for p in parts)
                or not (parts[-1].endswith(SUFFIXES) or is_zip)):
            continue
        total += info.file_size
        problem = None
        if info.file_size > MAX_FILE:
            problem = (f"the zip member unpacks to {info.file_size >> 20} MiB (the limit is "
                       f"{MAX_FILE >> 20} MiB): refused as a possible zip bomb")
        elif info.file_size > 1 << 20 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            problem = (f"the zip member is compressed {info.file_size // max(info.compress_size, 1)}"
                       f":1: refused as a possible zip bomb")
        elif total > MAX_ZIP_TOTAL:
            problem = (f"the zip unpacks to more than {MAX_ZIP_TOTAL >> 30} GiB in total: refused "
                       "as a possible zip bomb")
        elif is_zip and depth >= MAX_NESTING:
            problem = (f"a zip inside a zip inside a zip ({MAX_NESTING + 1} levels): not opened; "
                       "submit the notebook itself")
        elif is_zip:
            stem = (*parts[:-1], parts[-1][:-4])
            found += _zip_entries(_nested(opener, info), prefix + stem,
                                  f"{origin}:{member}", is_submission, lms + parts, depth + 1)
            continue
        elif parts[-1].endswith(".py"):
            try:
                if not is_submission(_read_member(opener, info)):
                    continue
            except SubmissionError as err:
                problem = str(err)
        stem = (*parts[:-1], parts[-1].rsplit(".", 1)[0])
        found.append(Submission(_ident(prefix + stem), f"{origin}:{member}", parts[-1],
                                lambda info=info: _read_member(opener, info), problem,
                                lms + parts))
    return found


def looks_like_submission(names: Iterable[str]) -> Callable[[bytes], bool]:
    """For ``.py`` files found in folders and zips: does it hold an exercise (a tagged
    ``# %%`` cell or a top-level ``def``/``class`` named after one), or is it a helper?"""
    pattern = re.compile(rb"^(?:def|class)\s+(?:" + b"|".join(
        re.escape(n.encode()) for n in sorted(names)) + rb")\b", re.M)
    return lambda data: b'"exercise"' in data or bool(pattern.search(data))


def discover(paths: Iterable[Path], exclude: Iterable[Path] = (),
             is_submission: Callable[[bytes], bool] = lambda data: True) -> list[Submission]:
    """Every submission under ``paths``: notebooks, ``.py`` files, folders (walked without
    following symlinks), zips (one level). A ``.py`` file inside a folder or zip counts only when
    ``is_submission(its bytes)`` (see :func:`looks_like_submission`); a file named on the command
    line always counts. Ids are unique."""
    exclude = [Path(p).resolve() for p in exclude]
    found: list[Submission] = []
    for path in map(Path, paths):
        origin, name = display(str(path)), display(path.name)
        if not path.exists():
            found.append(Submission(_ident([path.stem]), origin, name, lambda: b"",
                                    "the path does not exist", (name,)))
        elif path.is_file():
            if path.suffix.lower() == ".zip":
                found += _zip_entries(path, (path.stem,), origin, is_submission)
            else:
                found.append(Submission(_ident([path.stem]), origin, name,
                                        lambda p=path: _read_file(p), None, (name,)))
        else:
            found += _walk(path, exclude, is_submission)
    return _unique(found)


def _walk(root: Path, exclude: list[Path], is_submission: Callable[[bytes], bool]
          ) -> list[Submission]:
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__", "__MACOSX"))
                         and (here / d).resolve() not in exclude)
        for name in sorted(files):
            path = here / name
            if name.startswith(".") or path.is_symlink():
                continue
            rel = path.relative_to(root).parts
            lms = tuple(display(p) for p in rel)
            if name.lower().endswith(".zip"):
                found += _zip_entries(path, (*rel[:-1], path.stem), display(str(path)),
                                      is_submission, lms)
            elif name.endswith(".ipynb") or (name.endswith(".py") and _is(is_submission, path)):
                found.append(Submission(_ident((*rel[:-1], path.stem)), display(str(path)),
                                        display(name), lambda p=path: _read_file(p), None, lms))
    return found


RESERVED = {"grades.csv", "summary.md", "summary.html", "grades-canvas.csv",
            "grades-moodle.csv"}  # the class files in the results folder


def _unique(found: list[Submission]) -> list[Submission]:
    seen: set[str] = set(RESERVED)
    for sub in found:
        candidate, n = sub.id, 1
        if candidate in seen:
            candidate = _ident([*sub.id.split("/")[:-1], sub.id.split("/")[-1]
                                + Path(sub.filename).suffix])
        while candidate in seen:
            n += 1
            candidate = f"{sub.id}-{n}"
        seen.add(candidate)
        sub.id = candidate
    return found


# ----------------------------------------------------------------------------- parsing


@dataclass
class CodeCell:
    index: int
    source: str
    exercise: str | None = None  # the exercise id its metadata declares, if tagged
    name: str | None = None


@dataclass
class Parsed:
    cells: list[CodeCell]
    notes: list[str] = field(default_factory=list)

    def exercise_ids(self) -> set[str]:
        """The exercise ids its tagged cells declare (``{"07.4", "07.5"}``)."""
        return {c.exercise for c in self.cells if c.exercise}


def parse(data: bytes, filename: str) -> Parsed:
    """The code cells of a notebook or a ``.py`` file (percent format or plain)."""
    if not data.strip():
        raise SubmissionError("the file is empty")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SubmissionError("the file is not UTF-8 text (is it really a notebook or a .py "
                              "file?)") from None
    if filename.endswith(".py"):
        return _parse_py(text)
    return _parse_notebook(text)


def _exercise(metadata: object, where: str, notes: list[str]) -> tuple[str | None, str | None]:
    if not isinstance(metadata, dict):
        return None, None
    try:
        meta = exercise_meta({"cell_type": "code", "metadata": metadata}, where)
    except (ReleaseError, TypeError, AttributeError) as err:
        notes.append(f"{where}: its exercise metadata is malformed ({err}); "
                     "the grader looked for the exercise's code by name instead.")
        return None, None
    return (meta.exercise, meta.name) if meta else (None, None)


def _parse_notebook(text: str) -> Parsed:
    try:
        nb = json.loads(text)
    except json.JSONDecodeError as err:
        raise SubmissionError(f"not a readable notebook: invalid JSON at line {err.lineno}, "
                              f"column {err.colno} ({err.msg})") from None
    except (RecursionError, ValueError) as err:
        raise SubmissionError(f"not a readable notebook ({type(err).__name__})") from None
    if isinstance(nb, dict) and "worksheets" in nb and "cells" not in nb:  # nbformat 3
        try:
            import nbformat

            nb = nbformat.reads(text, as_version=4)
        except Exception as err:
            raise SubmissionError(f"an nbformat 3 notebook that could not be converted "
                                  f"({err})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise SubmissionError("valid JSON but not a Jupyter notebook (no list of cells)")
    parsed = Parsed([])
    for index, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        if not isinstance(source, str):
            parsed.notes.append(f"cell {index}: its source is not text; skipped.")
            continue
        exercise, name = _exercise(cell.get("metadata"), f"cell {index}", parsed.notes)
        parsed.cells.append(CodeCell(index, source, exercise, name))
    return parsed


_CELL = re.compile(r"^# ?%%(?!%)(.*)$")


def _percent_metadata(header: str) -> dict:
    """``tags=["exercise"] coursekit={...}`` on a jupytext ``# %%`` line, leniently."""
    metadata, decoder = {}, json.JSONDecoder()
    for match in re.finditer(r"([A-Za-z_][\w.-]*)=", header):
        try:
            value, _ = decoder.raw_decode(header, match.end())
        except ValueError:
            continue
        metadata[match.group(1)] = value
    return metadata


def _parse_py(text: str) -> Parsed:
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if _CELL.match(line)]
    if not starts:
        return Parsed([CodeCell(0, text)])
    parsed = Parsed([])
    if any(line.strip() for line in lines[:starts[0]]):
        parsed.cells.append(CodeCell(0, "\n".join(lines[:starts[0]])))
    for n, start in enumerate(starts):
        header = _CELL.match(lines[start]).group(1)
        if re.match(r"\s*\[(markdown|md|raw)\]", header):
            continue
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        exercise, name = _exercise(_percent_metadata(header), f"cell {n + 1}", parsed.notes)
        parsed.cells.append(CodeCell(n + 1, "\n".join(lines[start + 1:end]), exercise, name))
    return parsed


# ----------------------------------------------------------------------------- planning


def _tree(source: str) -> ast.Module | None:
    """The cell's syntax tree, or None when it does not parse or holds more code than the
    grader analyses (comment lines do not count: pasted output in a comment is harmless, while
    a syntax tree costs about 400 bytes a character of dense code)."""
    if len(source) > MAX_SOURCE or sum(
            len(line) for line in source.splitlines()
            if not line.lstrip().startswith("#")) > MAX_CODE:
        return None
    try:
        with PARSING:
            return ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return None


def defined_names(source: str) -> list[str] | None:
    """Top-level functions, classes and assignments of a cell (None when it does not parse)."""
    tree = _tree(source)
    if tree is None:
        return None
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def extract_definition(source: str, name: str) -> str | None:
    """The cell's imports and its top-level ``def``/``class`` called ``name``, if any."""
    tree = _tree(source)
    if tree is None:
        return None
    imports, found = [], None
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.get_source_segment(source, node))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            found = "\n".join(source.splitlines()[start - 1:node.end_lineno])
    if found is None:
        return None
    return "\n".join([*(i for i in imports if i), found])


@dataclass
class ExerciseCode:
    """The code the grader runs for one exercise, and where it came from."""

    cell: int
    source: str
    filename: str
    note: str = ""


def plan(parsed: Parsed, exercises: list[tuple[str, str]]) -> tuple[dict[str, ExerciseCode],
                                                                      dict[str, str]]:
    """Map each expected exercise ``(id, name)`` to the code to run, or to why it is missing.

    The tagged cell wins (the last one, if the student duplicated it); a cell whose tag was lost
    still counts when it defines the exercise's function or class, which is then run alone with
    the cell's imports. Returns ``(code by name, reason by name)``.
    """
    code: dict[str, ExerciseCode] = {}
    missing: dict[str, str] = {}
    for exercise, name in exercises:
        tagged = [c for c in parsed.cells if c.exercise == exercise or c.name == name]
        filename = f"<exercise {exercise}>"
        if tagged:
            cell = tagged[-1]
            note = (f"{len(tagged)} cells are tagged as exercise {exercise}; the last one "
                    f"(cell {cell.index}) was graded." if len(tagged) > 1 else "")
            names = defined_names(cell.source)
            if names is not None and name not in names:
                others = [n for n in names if not n.startswith("_")]
                note = " ".join(filter(None, [note, (
                    f"The exercise cell does not define `{name}`"
                    + (f" (it defines {', '.join(f'`{n}`' for n in others[:5])})" if others else "")
                    + ": keep the name the exercise gives.")]))
            code[name] = ExerciseCode(cell.index, cell.source, filename, note)
            continue
        for cell in reversed(parsed.cells):
            if cell.exercise is None and f"{name}" in cell.source:
                found = extract_definition(cell.source, name)
                if found is not None:
                    code[name] = ExerciseCode(
                        cell.index, found, filename,
                        f"No cell is tagged `{EXERCISE_TAG}` for exercise {exercise}; the grader "
                        f"used the definition of `{name}` in cell {cell.index}. Keep the tag and "
                        "metadata on exercise cells.")
                    break
        else:
            missing[name] = (f"no exercise cell for {exercise} `{name}`: no cell is tagged for it "
                             f"and none defines `{name}`")
    return code, missing


def chapter_from_filename(filename: str) -> str | None:
    """``"03"`` for ``03_self_attention.ipynb``; ``"07b"`` for a chapter's later notebook such as
    ``07f_bert.ipynb`` (graded on that notebook's exercises, or on its chapter's when the chapter
    keeps them all in its first notebook)."""
    match = re.match(r"(\d\d[a-z]?)_", filename)
    return match.group(1) if match else None
