"""The same grader inside Gradescope's container: ``coursekit grade --gradescope autograder.zip``.

Gradescope unpacks the autograder zip into ``/autograder/source``, runs ``setup.sh`` once (as
root) to build the image, then, for every submission, runs ``/autograder/run_autograder``, which
must leave ``/autograder/results/results.json``. Ours installs Python, CPU-only PyTorch and a copy
of coursekit, and ``run_autograder`` calls :func:`run`, which grades ``/autograder/submission``
with :func:`coursekit.grading.batch.grade`, sandbox and all, and copies the result into place.

Gradescope's containers may refuse namespaces; the grader then falls back to a separate uid,
rlimits and the seccomp filter, and :func:`run` makes the autograder's own files unreadable to
that uid first. The results say which isolation held (``extra_data.coursekit.isolation``).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

from coursekit.grading.batch import Limits, grade
from coursekit.grading.report import _atomic_write, code_span

ROOT = Path(os.environ.get("COURSEKIT_AUTOGRADER_ROOT", "/autograder"))

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-pip python3-venv
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install --index-url https://download.pytorch.org/whl/cpu "torch=={torch}"
/autograder/venv/bin/pip install "numpy=={numpy}" "nbformat=={nbformat}"
/autograder/venv/bin/pip install /autograder/source/coursekit
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it writes /autograder/results/results.json.
cd /autograder/source
exec /autograder/venv/bin/python -m coursekit.grading.gradescope
"""

PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "coursekit"
version = "{version}"
requires-python = ">=3.10"
dependencies = {dependencies}

[tool.setuptools.packages.find]
where = ["src"]

[tool.setuptools.package-data]
"*" = ["*"]
"""


def _version(package: str) -> str:
    return importlib.metadata.version(package).split("+")[0]


def build_autograder(path: Path, chapter: str | None, extra_cases: str | Path | None = None,
                     limits: Limits | None = None, concept_points: float = 0.0) -> Path:
    """Write the autograder zip: set-up and run scripts, coursekit's source, the chapter,
    the limits and any extra hidden cases."""
    import coursekit

    if not chapter:
        raise ValueError("--gradescope needs --chapter NN: an assignment grades one chapter")
    package = Path(coursekit.__file__).resolve().parent
    try:
        dependencies = [d for d in importlib.metadata.requires("coursekit") or []
                        if "extra ==" not in d]
    except importlib.metadata.PackageNotFoundError:
        dependencies = ["torch", "numpy", "nbformat"]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        def add(name: str, text: str | bytes, executable: bool = False) -> None:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, text)

        add("setup.sh", SETUP.format(torch=_version("torch"), numpy=_version("numpy"),
                                     nbformat=_version("nbformat")), executable=True)
        add("run_autograder", RUN, executable=True)
        add("config.json", json.dumps({"chapter": chapter,
                                       "limits": dataclasses.asdict(limits or Limits()),
                                       "concept_points": concept_points},
                                      indent=1))
        add("coursekit/pyproject.toml", PYPROJECT.format(version=coursekit.__version__,
                                                         dependencies=json.dumps(dependencies)))
        for file in sorted(package.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                add(f"coursekit/src/coursekit/{file.relative_to(package).as_posix()}",
                    file.read_bytes())
        for file in sorted(Path(extra_cases).glob("*.py")) if extra_cases else []:
            add(f"extra_cases/{file.name}", file.read_text(encoding="utf-8"))
    return path


def _restrict(paths: list[Path]) -> None:
    """Make the autograder's own files unreadable to other users (the workers' uids)."""
    for path in paths:
        try:
            path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o077)
        except OSError:
            pass


def run(root: Path = ROOT) -> int:
    """Grade ``root/submission`` and write ``root/results/results.json``."""
    import coursekit

    source, submission, results = root / "source", root / "submission", root / "results"
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    extra = source / "extra_cases"
    if os.geteuid() == 0:
        _restrict([source, results, Path(coursekit.__file__).resolve().parent])
    try:
        with tempfile.TemporaryDirectory(prefix="coursekit-gradescope-") as out:
            batch = grade([submission], out, jobs=1, limits=Limits(**config["limits"]),
                          chapter=config["chapter"],
                          extra_cases=extra if extra.is_dir() else None,
                          stream=sys.stderr, hide=[source, results],
                          concept_points=float(config.get("concept_points", 0.0)))
        records = batch.records
    except Exception as err:  # noqa: BLE001 (Gradescope must always get a results.json)
        records = []
        best = {"score": 0, "output": "The autograder could not grade this submission "
                                      f"({type(err).__name__}); please tell your instructor.",
                "output_format": "text", "tests": []}
    else:
        best = {"score": 0, "output": "No notebook (.ipynb) or Python file (.py) was found in "
                                      "your submission.", "tests": []}
    if records:
        best = max(records, key=lambda r: (r["score"], -len(r["extra_data"]["coursekit"]
                                                            ["problems"])))
        if len(records) > 1:
            graded = ", ".join(code_span(r["extra_data"]["coursekit"]["origin"])
                               for r in records)
            best["output"] = (f"Several files were submitted ({graded}); the best one is "
                              f"shown.\n\n" + best["output"])
    results.mkdir(parents=True, exist_ok=True)
    _atomic_write(results / "results.json", json.dumps(best, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(run())
