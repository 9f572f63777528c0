"""Build the oldest or the newest supported environment and run the book in it.

    python benchmarks/environments.py oldest     # or: newest
    python benchmarks/environments.py oldest --no-notebooks   # the unit tests only

It makes a virtual environment in ``_build/env-<end>/venv`` from ``requirements.txt`` with the
versions of ``benchmarks/env-<end>.txt`` in place of the pins (torch, transformers, peft,
bitsandbytes, accelerate), installs coursekit from this checkout, and runs

1. the unit, fidelity and grading tests (``tests/`` without the book, browser, PDF and Colab
   tests, which exercise the book builder rather than the libraries), and
2. ``coursekit validate --profile quick --edition both`` over every notebook.

It writes ``_build/env-<end>/result.json`` (the versions installed, the test counts, the
validation report) and prints one line per step. The fidelity tests compare coursekit with
whichever Hugging Face release is installed. ``.github/workflows/environments.yml`` runs both
ends on a schedule and on each release; the Validation page records the latest result.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOK_ONLY = ["test_book_browser.py", "test_book_build.py", "test_pdf.py", "test_colab.py"]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, **kw)


def requirements(end: str) -> Path:
    """requirements.txt with the end's versions in place of the pins it overrides."""
    pins = {}
    for line in (ROOT / "benchmarks" / f"env-{end}.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pins[re.split(r"[=<>!~ ]", line, maxsplit=1)[0].lower()] = line.strip()
    out = []
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name = re.split(r"[=<>!~ ]", line.strip(), maxsplit=1)[0].lower()
        out.append(pins.pop(name, line) if name else line)
    out += list(pins.values())
    path = ROOT / "_build" / f"env-{end}" / "requirements.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("end", choices=["oldest", "newest"])
    parser.add_argument("--no-notebooks", action="store_true", help="run the unit tests only")
    args = parser.parse_args(argv)
    out = ROOT / "_build" / f"env-{args.end}"
    venv = out / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(venv)], check=True)
    uv = shutil.which("uv")
    install = ([uv, "pip", "install", "--python", str(python)] if uv
               else [str(python), "-m", "pip", "install"])
    env = dict(os.environ, UV_CONSTRAINT="", PIP_CONSTRAINT="")  # the end's pins, not a cap
    run([*install, "-q", "-r", str(requirements(args.end))], check=True, env=env)
    versions = json.loads(subprocess.run(
        [str(python), "-c", "import json, importlib.metadata as m; print(json.dumps({n: m.version(n) "
         "for n in ('torch', 'transformers', 'peft', 'bitsandbytes', 'accelerate')}))"],
        capture_output=True, text=True, check=True).stdout)
    print("versions:", versions, flush=True)
    result = {"end": args.end, "date": time.strftime("%Y-%m-%d"), "versions": versions}

    start = time.perf_counter()
    unit = run([str(python), "-m", "pytest", "-q", "-p", "no:coursekit.pytest_plugin", "-n", "auto",
                "tests", *[f"--ignore=tests/{name}" for name in BOOK_ONLY], "--junitxml",
                str(out / "unit.xml")], env=dict(os.environ, COURSEKIT_REQUIRE_ISOLATION="0"))
    counts = {}
    if (out / "unit.xml").exists():
        head = (out / "unit.xml").read_text()[:2000]
        for key in ("tests", "failures", "errors", "skipped"):
            found = re.search(rf'{key}="(\d+)"', head)
            counts[key] = int(found.group(1)) if found else None
    result["unit"] = {"exit": unit.returncode, "seconds": round(time.perf_counter() - start), **counts}
    print("unit tests:", result["unit"], flush=True)

    if not args.no_notebooks:
        start = time.perf_counter()
        report = out / "validate" / "report.json"
        notebooks = run([str(venv / "bin" / "coursekit"), "validate", "--profile", "quick",
                         "--edition", "both", "--jobs", str(min(4, os.cpu_count() or 1)),
                         "--report", str(report)])
        result["notebooks"] = {"exit": notebooks.returncode,
                               "seconds": round(time.perf_counter() - start),
                               "report": str(report.relative_to(ROOT))}
        print("notebooks:", result["notebooks"], flush=True)
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if unit.returncode == 0 and result.get("notebooks", {}).get("exit", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
