"""``coursekit validate``: every chapter, both editions, under nbval, in one profile and any seeds.

The README's ``pytest`` proves the quick profile under the book's own seed on every commit. This
command proves the rest:

- ``coursekit validate --profile full`` runs every notebook of both editions with the full
  profile's budgets, on whatever device torch finds (the GPU runner runs exactly this);
- ``coursekit validate --seeds 0-4`` runs them under five draws of every seeded experiment
  (``COURSEKIT_SEED``, see :func:`coursekit.seed`): an asserted result must hold under each.

Each run is nbval (``--nbval-lax``: every cell must run without error, every assertion must hold,
``# NBVAL_CHECK_OUTPUT`` cells must reproduce their stored output) over one notebook in a fresh
kernel, with a per-cell time limit. One progress line per notebook; a JSON report with, per
notebook, the device, torch version, seed, seconds and cells passed and failed; and, for every
``assert`` that compares numbers, its margin under each seed (:mod:`coursekit.margins`), also as a
Markdown table (``margins.md`` beside the report).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from coursekit import margins
from coursekit.book import ROOT

EDITIONS = {"instructor": "solutions", "student": "notebooks"}
CELL_TIMEOUT = {"quick": 300, "full": 600}  # seconds per cell; the full profile's longest cells


@dataclass
class Run:
    notebook: str
    edition: str
    profile: str
    seed: int
    device: str
    torch: str
    seconds: float
    cells_passed: int
    cells_failed: int
    cells_skipped: int
    failure: str = ""
    assert_log: str = ""
    code_digest: str = ""  # of the notebook's code cells as run (code_digest)

    @property
    def ok(self) -> bool:
        return self.cells_failed == 0 and self.cells_passed > 0


FRESH = 1000  # fresh draws start here: thresholds are tuned on seeds below it


def parse_seeds(text: str, rng: random.Random | None = None) -> list[int]:
    """``"0-4"`` -> [0, 1, 2, 3, 4]; ``"0,2"`` -> [0, 2]; ``"random:10"`` -> ten fresh seeds,
    drawn at random from 1000 up (never the tuning seeds below 1000), to be printed so that a
    failure can be re-run; parts combine (``"0-9,random:10"``)."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if part.startswith("random:"):
            count = part.split(":", 1)[1]
            if not count.isdigit() or not 0 < int(count) <= 1000:
                raise ValueError(f"--seeds {text!r}: random:N takes N between 1 and 1000")
            draw = (rng or random.SystemRandom()).sample(range(FRESH, FRESH + 10**6), int(count))
            seeds.extend(sorted(draw))
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"--seeds {text!r}: expected e.g. 0-4, 0,2,3 or random:10")
        seeds.extend(range(int(lo), int(hi or lo) + 1))
    return list(dict.fromkeys(seeds))


def device_description() -> tuple[str, str]:
    """(device, torch version) as the notebooks will see them."""
    import torch

    if torch.cuda.is_available():
        device = f"cuda: {torch.cuda.get_device_name(0)}"
    else:
        device = f"cpu: {os.cpu_count()} cores, {platform.processor() or platform.machine()}"
    return device, torch.__version__


def notebooks(only: list[str] | None, editions: list[str], root: Path = ROOT) -> list[Path]:
    """The chapters in book order, each in the chosen editions; ``only`` keeps name prefixes."""
    names = sorted(p.name for p in (root / "solutions").glob("*.ipynb"))
    if only:
        names = [n for n in names if any(n.startswith(o) for o in only)]
        if not names:
            raise ValueError(f"no chapter matches {' '.join(only)}")
    return [root / EDITIONS[e] / n for n in names for e in editions]


def code_digest(path: Path) -> str:
    """A fingerprint of a notebook's code cells (not its prose or outputs): two runs with the same
    digest ran the same code, so the margins of their assertions can be pooled."""
    return code_digest_of(path.read_text(encoding="utf-8"))


def code_digest_of(text: str) -> str:
    """:func:`code_digest` of a notebook's JSON text."""
    cells = json.loads(text).get("cells", [])
    code = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c.get("cell_type") == "code"]
    return hashlib.sha256(json.dumps(code).encode("utf-8")).hexdigest()[:12]


def run_one(path: Path, profile: str, seed: int, cell_timeout: int, device: tuple[str, str],
            assert_log: Path | None = None, threads: int | None = None) -> Run:
    """nbval over one notebook in a fresh kernel; the verdict per cell from its JUnit XML. With
    ``assert_log``, the margins of its assertions are appended there (JSON lines). ``threads``
    caps the kernel's CPU threads (OMP_NUM_THREADS), so that notebooks run side by side share the
    cores instead of fighting over them."""
    env = dict(os.environ, COURSEKIT_PROFILE=profile, COURSEKIT_SEED=str(seed), TQDM_DISABLE="1")
    if threads is not None and "OMP_NUM_THREADS" not in os.environ:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as tmp:
        if assert_log is not None:
            assert_log.parent.mkdir(parents=True, exist_ok=True)
            assert_log.write_text("")
            env.update(IPYTHONDIR=str(margins.ipython_dir(Path(tmp) / "ipython")),
                       **{margins.LOG_ENV: str(assert_log), margins.NOTEBOOK_ENV: path.stem})
        xml = Path(tmp) / "cells.xml"
        command = [sys.executable, "-m", "pytest", str(path), "-o", "addopts=", "-q",
                   "-p", "no:cacheprovider", "--nbval-lax", f"--nbval-cell-timeout={cell_timeout}",
                   "--nbval-kernel-startup-timeout=300", f"--junitxml={xml}"]
        digest = code_digest(path)
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        passed = failed = skipped = 0
        failure = ""
        if xml.exists():
            for case in ET.parse(xml).getroot().iter("testcase"):
                bad = case.find("failure")
                if bad is None:
                    bad = case.find("error")
                if bad is not None:
                    failed += 1
                    if not failure:
                        failure = f"{case.get('name')}: " + _reason(bad.text or bad.get("message") or "")
                elif case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
        if not xml.exists() or (passed + failed == 0):
            failed = max(failed, 1)
            failure = failure or "nbval did not run: " + _tail(proc.stdout + proc.stderr)
    edition = next(e for e, folder in EDITIONS.items() if path.parent.name == folder)
    return Run(path.stem, edition, profile, seed, device[0], device[1], round(seconds, 1),
               passed, failed, skipped, failure, str(assert_log or ""), digest)


COLOURS = re.compile(r"(\x1b|#x1B)\[[0-9;]*m")  # terminal colours, raw or as JUnit XML escapes them


def _tail(text: str, lines: int = 6) -> str:
    text = COLOURS.sub("", text)
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _reason(text: str) -> str:
    """What nbval says of a failed cell: its verdict ("Cell execution caused an exception",
    "Timeout of 5 seconds exceeded waiting for output.", ...) and the traceback's last lines, or
    the last lines of the report where it has no traceback. Not the cell's source: that is in
    the notebook."""
    plain = COLOURS.sub("", text)
    verdict = re.search(r"^Cell \d+: (.+)$", plain, re.MULTILINE)
    if verdict is None:
        return _tail(plain)
    _, _, traceback = plain.partition("\nTraceback:")
    return verdict.group(1).strip() + ("\n" + _tail(traceback) if traceback.strip() else "")


def validate(profile: str, seeds: list[int], editions: list[str], only: list[str] | None = None,
             cell_timeout: int | None = None, jobs: int = 1, report: Path | None = None,
             stream=None) -> list[Run]:
    """Run every chosen notebook under every seed; print a line each; write the JSON report."""
    stream = stream or sys.stdout
    cell_timeout = cell_timeout or CELL_TIMEOUT[profile]
    device = device_description()
    todo = [(seed, path) for path in notebooks(only, editions) for seed in seeds]  # notebook by notebook
    print(f"coursekit validate: {len(todo)} notebook run(s), profile {profile}, seeds "
          f"{','.join(map(str, seeds))}, {cell_timeout} s per cell, on {device[0]} "
          f"(torch {device[1]})", file=stream, flush=True)
    runs: list[Run] = []
    start = time.perf_counter()

    logs = (report or Path(tempfile.mkdtemp())).resolve().parent / "asserts"  # kernels run elsewhere
    # side by side, each kernel gets its share of the cores (a PyTorch that starts a thread per
    # core in each of two kernels on two cores runs several times slower than one at a time)
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None

    lock = threading.Lock()
    order = {(s, p.stem, p.parent.name): i for i, (s, p) in enumerate(todo)}

    def in_order(run: Run) -> int:
        return order[(run.seed, run.notebook, EDITIONS[run.edition])]

    def write_report(total: float) -> None:
        """The report as it stands: written after every notebook, so that a run stopped part-way
        (a time limit, Ctrl-C) keeps what it measured."""
        done = sorted(runs, key=in_order)
        table = assert_margins(done)
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps({
            "profile": profile, "seeds": seeds, "cell_timeout_s": cell_timeout,
            "device": device[0], "torch": device[1], "python": platform.python_version(),
            "libraries": libraries(), "commit": commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "total_seconds": round(total, 1), "complete": len(done) == len(todo),
            "passed": len(done) == len(todo) and all(r.ok for r in done),
            "runs": [asdict(r) | {"ok": r.ok} for r in done], "margins": table}, indent=1) + "\n")
        (report.parent / "margins.md").write_text(margins_markdown(table, profile))
        (report.parent / "summary.md").write_text(summary_markdown(done))

    def one(item: tuple[int, Path]) -> Run:
        seed, path = item
        log = logs / f"{profile}-{path.parent.name}-{path.stem}-seed{seed}.jsonl"
        run = run_one(path, profile, seed, cell_timeout, device, log, threads)
        with lock:
            runs.append(run)
            total = run.cells_passed + run.cells_failed + run.cells_skipped
            cells = f"{run.cells_passed}/{total} cells passed" + (
                f", {run.cells_skipped} skipped" if run.cells_skipped else "")
            print(f"[{len(runs):>3}/{len(todo)}] seed {run.seed}  {run.notebook:<34} {run.edition:<10} "
                  f"{run.seconds:7.1f} s  {cells}" + ("" if run.ok else "  FAILED"),
                  file=stream, flush=True)
            if not run.ok:
                print("      " + run.failure.replace("\n", "\n      "), file=stream, flush=True)
            if report is not None:
                write_report(time.perf_counter() - start)
        return run

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, todo))
    total = time.perf_counter() - start
    failed = [r for r in runs if not r.ok]
    print(f"{len(runs) - len(failed)} passed, {len(failed)} failed ({total:.0f} s in all)",
          file=stream, flush=True)
    if report is not None:
        write_report(total)
    runs.sort(key=in_order)
    return runs


def summary_markdown(runs: list[Run]) -> str:
    """One row per notebook and edition: runs passed over the seeds, and their times."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.notebook, run.edition), []).append(run)
    lines = ["| notebook | edition | seeds passed | seconds (min–max) |", "| --- | --- | ---: | ---: |"]
    for (notebook, edition), group in groups.items():
        ok = sum(r.ok for r in group)
        times = [r.seconds for r in group]
        lines.append(f"| {notebook} | {edition} | {ok}/{len(group)} | {min(times):.0f}–{max(times):.0f} |")
    return "\n".join(lines) + "\n"


def libraries() -> dict[str, str | None]:
    """The versions of the libraries the book supports a range of (None: not installed)."""
    from importlib import metadata

    from coursekit.environment import SUPPORTED

    found = {}
    for name in SUPPORTED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def commit() -> str | None:
    """The commit of the repository the notebooks come from, with '+' when it has changes
    (None outside a git checkout)."""
    try:
        here = ROOT
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("+" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def assert_margins(runs: list[Run]) -> list[dict]:
    """Every numeric assertion of every notebook and edition, with its margin under each seed."""
    by_notebook: dict[tuple[str, str], dict[int, Path]] = {}
    for run in runs:
        if run.assert_log:
            by_notebook.setdefault((run.notebook, run.edition), {})[run.seed] = Path(run.assert_log)
    rows = []
    for (_, edition), logs in sorted(by_notebook.items()):
        rows += [row | {"edition": edition} for row in margins.summarise(logs)]
    return rows


def margins_markdown(table: list[dict], profile: str) -> str:
    """One row per assertion: its tightest and loosest margin over the seeds, their spread (the
    largest minus the smallest: how much the draw moves it), and the values compared under the
    seed with the tightest margin. ‡ marks a margin under a tenth of the spread, with five seeds
    or more: a fresh draw may well cross the threshold (issue 56)."""
    lines = [f"| notebook | edition | assertion ({profile} profile) | seeds | smallest margin | "
             "mean margin | largest margin | spread | values at the smallest |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in table:
        tight = min(row["per_seed"].values(), key=lambda v: v["margin"])
        shown = " ".join(f"{v:.4g}" if v is not None else "?" for v in tight["values"])
        text = row["assert"].replace("|", "\\|")
        spread = row["max_margin"] - row["min_margin"]
        flag = " ‡" if tight_margin(row) else ""
        margins = [v["margin"] for v in row["per_seed"].values()]
        mean = sum(margins) / len(margins)
        lines.append(f"| {row['notebook']} | {row['edition']} | `{text}` | {len(row['seeds'])} | "
                     f"{row['min_margin']:.4g}{flag} | {mean:.4g} | {row['max_margin']:.4g} | "
                     f"{spread:.4g} | {shown} |")
    return "\n".join(lines) + "\n"


def tight_margin(row: dict, seeds: int = 5) -> bool:
    """Whether an assertion's smallest margin over at least ``seeds`` draws is under a tenth of
    its spread over them (or negative): the draws put the threshold within reach."""
    spread = row["max_margin"] - row["min_margin"]
    return len(row["seeds"]) >= seeds and (row["min_margin"] < 0 or
                                           row["min_margin"] < 0.1 * spread)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=["quick", "full"], default="quick")
    parser.add_argument("--seeds", default="0", help="draws of every seeded experiment, e.g. 0-4 "
                        "(COURSEKIT_SEED; 0 is the book's own run), or random:10 for ten fresh "
                        "draws from 1000 up (printed, to re-run a failure)")
    parser.add_argument("--edition", choices=["both", *EDITIONS], default="both")
    parser.add_argument("--only", nargs="*", metavar="NN", help="chapter prefixes, e.g. 02b 07")
    parser.add_argument("--cell-timeout", type=int, default=None,
                        help=f"seconds per cell (default: {CELL_TIMEOUT['quick']} quick, "
                             f"{CELL_TIMEOUT['full']} full)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="notebooks run at once (timings are only comparable at 1)")
    parser.add_argument("--report", type=Path, default=Path("_build/validate/report.json"),
                        help="the JSON report (default _build/validate/report.json)")


def main(args: argparse.Namespace) -> int:
    try:
        seeds = parse_seeds(args.seeds)
        editions = list(EDITIONS) if args.edition == "both" else [args.edition]
        runs = validate(args.profile, seeds, editions, args.only, args.cell_timeout, args.jobs,
                        args.report)
    except ValueError as err:
        print(f"coursekit validate: {err}", file=sys.stderr)
        return 2
    print(f"report: {args.report}")
    return 0 if all(r.ok for r in runs) else 1
