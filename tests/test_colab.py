"""A reader on Colab, played locally: a fresh virtual environment holding only what Colab ships
(torch, numpy, matplotlib, scikit-learn, ipywidgets, Jupyter's kernel and client), no coursekit.
Those packages, at requirements.txt's versions, and what they require are linked from this
environment's installed files when it has those versions (what `pip install` would unpack from
the same wheels; `pip check` then confirms nothing is missing), and installed by pip otherwise.
A chapter of the student edition runs top to bottom there: its set-up cell installs coursekit
(here from a wheel built from this checkout, through ``COURSEKIT_SOURCE``: no network), says so
in one line, and the rest of the chapter runs on the installed package.

The install block itself, and that every notebook of both editions starts with it for the
repository configured in ``_config.yml``, is checked in ``tests/test_release.py``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
# What Colab ships that the book uses (versions from requirements.txt).
COLAB = ("torch", "numpy", "matplotlib", "scikit-learn", "scipy", "tqdm", "ipywidgets",
         "ipykernel", "nbclient", "nbformat")
NOTEBOOK = ROOT / "notebooks" / "03_self_attention.ipynb"

RUN = r"""
import json, sys
import nbformat
from nbclient import NotebookClient

nb = nbformat.read(sys.argv[1], as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import coursekit, sys\nprint(coursekit.__file__)\n"
                                          "print(sys.executable)"))
NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": "."}}).execute()
outputs = ["".join(o.get("text", "") for o in c.get("outputs", []) if o.get("output_type") == "stream")
           for c in nb.cells if c.cell_type == "code"]
print(json.dumps(outputs))
"""


def _pins() -> list[str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins[m.group(1).lower()] = line.strip()
    missing = [name for name in COLAB if name not in pins]
    assert not missing, f"requirements.txt pins no version of {missing}"
    return [pins[name] for name in COLAB]


def _closure(names: list[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions of ``names`` and of everything they require (no extras)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found[name] = dist = importlib.metadata.distribution(name)
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(found.values())


def _link_pinned(env_dir: Path, pins: list[str]) -> bool:
    """Put the pinned distributions, and what they require, into the fresh environment as
    `pip install` would from the same wheels, by linking this environment's installed files
    (unpacking torch's wheel again is most of a minute). False, with nothing done, when this
    environment does not have exactly the pinned versions."""
    wanted = {req.name: req.specifier for req in map(Requirement, pins)}
    try:
        if not all(spec.contains(importlib.metadata.version(name), prereleases=True)
                   for name, spec in wanted.items()):  # `==2.13.0` admits 2.13.0+cpu, as in pip
            return False
        dists = _closure(list(wanted))
    except importlib.metadata.PackageNotFoundError:  # a pin or a requirement is not installed
        return False
    [site] = (env_dir / "lib").glob("python*/site-packages")
    for dist in dists:
        for file in dist.files or []:
            if file.parts[0] == "..":  # scripts and data outside site-packages (bin/, share/)
                continue
            source, target = Path(dist.locate_file(file)), site / file
            if not source.is_file() or target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:  # another file system
                shutil.copy2(source, target)
    return True


def test_a_chapter_runs_on_a_fresh_colab_like_environment(tmp_path):
    env_dir = tmp_path / "colab"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    if not _link_pinned(env_dir, _pins()):  # this environment is not at the pins: install them
        install = subprocess.run([python, "-m", "pip", "install", "--quiet", *_pins()],
                                 capture_output=True, text=True, timeout=900)
        assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stdout[-3000:]
    absent = subprocess.run([python, "-c", "import coursekit"], capture_output=True, text=True,
                            cwd=tmp_path)
    assert absent.returncode != 0, "the fresh environment must not have coursekit yet"

    # built from a copy: setuptools writes build/ beside the sources, which must not be the repo
    wheels, source = tmp_path / "wheels", tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                            "--no-build-isolation", "-w", str(wheels), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    [wheel] = wheels.glob("coursekit-*.whl")

    (tmp_path / "run.py").write_text(RUN)
    jupyter = tmp_path / "jupyter"  # no kernel spec of this machine's may stand in for the venv's
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("COURSEKIT", "PYTHON"))},
           "COURSEKIT_SOURCE": str(wheel), "JUPYTER_PATH": str(jupyter),
           "JUPYTER_DATA_DIR": str(jupyter), "JUPYTER_CONFIG_DIR": str(jupyter),
           "IPYTHONDIR": str(tmp_path / "ipython"), "VIRTUAL_ENV": str(env_dir),
           "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run([python, str(tmp_path / "run.py"), str(NOTEBOOK)], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-4000:])
    outputs = json.loads(run.stdout.strip().splitlines()[-1])
    first, last = outputs[0], outputs[-1]
    said = [line for line in first.splitlines() if "coursekit is not installed" in line]
    assert said == [f"coursekit is not installed: installing it from {wheel}"], first
    package, executable = last.split()
    assert Path(package).is_relative_to(env_dir) and Path(executable).is_relative_to(env_dir), last
