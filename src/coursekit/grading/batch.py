"""``coursekit grade``: the batch grader for a class's submissions.

Who does what (DESIGN.md §7):

- the **grader** (this process) reads and parses the submissions (:mod:`submissions`), chooses
  every case's inputs, runs the references, compares, and writes the reports (:mod:`report`).
  It never runs student code.
- a **worker** (:mod:`sandbox_worker`, inside the sandbox, one per submission, forked from a
  pre-imported fork server and confined by :mod:`sandbox`; :mod:`worker_pool` is the grader's
  end of it) runs the exercise cells and the calls the grader asks for; plain
  tensors and numbers come back by value (:mod:`protocol`, no pickle).
- a :class:`~coursekit.grading.session.Session` holds one submission's conversation with its
  worker: remote handles for suites' ``call`` adapters, the upstream references, restarts; the
  batch's shared :class:`~coursekit.grading.session.Context` lives there too, so this module
  imports the session and never the other way round.

This module is the driver: find the submissions, skip what is already graded, probe the
sandbox, grade in parallel, write each result as it finishes, then the class reports.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from pathlib import Path
from typing import TextIO

from coursekit import concepts
from coursekit.grading import protocol, report
from coursekit.grading.cells import provided_names
from coursekit.grading.registry import all_suites
from coursekit.grading.session import UID_BASE, Context, Session
from coursekit.grading.submissions import (
    PARSING,
    Submission,
    SubmissionError,
    chapter_from_filename,
    discover,
    looks_like_submission,
    parse,
    plan,
)
from coursekit.grading.suite import Case, Suite, grade_outputs, not_run
from coursekit.grading.worker_pool import HarnessError, Limits, Output, WorkerLost, Zygote, clean

__all__ = ["BatchResult", "HarnessError", "Limits", "grade", "grade_submission"]


# ----------------------------------------------------------------------------- the batch


def load_extra_cases(folder: Path, suites: dict[str, Suite]) -> tuple[dict[str, Suite],
                                                                      dict[str, set[int]]]:
    """Merge an instructor's hidden cases into the suites.

    Each ``*.py`` file in ``folder`` defines ``CASES = {"exercise name or id": [Case(...), ...]}``
    (``Case`` from ``coursekit.grading.suite``). The cases join the exercise's suite: its points
    are spread over all its cases by weight, and hidden cases are reported with visibility
    ``after_published``. The files are run here, in the grader, never in a worker.
    """
    if not Path(folder).is_dir():
        raise ValueError(f"the extra cases folder {folder} does not exist")
    merged, hidden = dict(suites), {}
    for path in sorted(Path(folder).glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_coursekit_extra_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for key, cases in getattr(module, "CASES", {}).items():
            suite = merged.get(key) or next((s for s in merged.values() if s.exercise == key),
                                            None)
            if suite is None:
                raise ValueError(f"{path}: no exercise is called {key!r}")
            if not all(isinstance(c, Case) for c in cases):
                raise ValueError(f"{path}: CASES[{key!r}] must be a list of Case objects")
            names = [c.name for c in suite.cases] + [c.name for c in cases]
            if len(names) != len(set(names)):
                raise ValueError(f"{path}: a case name of {key!r} is used twice")
            start = len(suite.cases)
            merged[suite.name] = dataclasses.replace(suite, cases=[*suite.cases, *cases])
            hidden.setdefault(suite.name, set()).update(range(start, start + len(cases)))
    return merged, hidden


def fingerprint(suites: dict[str, Suite], limits: Limits, extra: Path | None,
                concept_points: float = 0.0) -> str:
    """What a grade depends on besides the submission: grader code, suites, cases, limits, the
    concept checks' points."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in sorted([*here.glob("*.py"), *here.glob("suites/*.py"),
                        *(Path(extra).glob("*.py") if extra else [])]):
        digest.update(path.name.encode() + path.read_bytes())
    for suite in suites.values():
        digest.update(repr((suite.exercise, suite.name, suite.points, suite.atol, suite.rtol,
                            [(c.name, c.points, c.atol, c.rtol) for c in suite.cases])).encode())
    digest.update(json.dumps(dataclasses.asdict(limits), sort_keys=True).encode())
    if concept_points:
        digest.update(f"concept points {concept_points!r}".encode())
    return digest.hexdigest()[:16]


def hidden_paths(paths: Iterable[Path], out: Path, extra: Path | None) -> list[str]:
    """What the workers must not see: coursekit and its project, submissions, results, cases."""
    import coursekit

    package = Path(coursekit.__file__).resolve().parent
    hidden = [package, Path.cwd().resolve(), out.resolve(), *(Path(p).resolve() for p in paths)]
    if extra:
        hidden.append(Path(extra).resolve())
    for parent in package.parents:  # the project an editable install points into
        if (parent / "pyproject.toml").exists() or (parent / ".git").exists():
            hidden.append(parent)
            break
    return sorted({str(p) for p in hidden if str(p) != "/"})


def probe_isolation(ctx: Context, paths: list[str]) -> dict:
    """Check, from inside a worker, what the sandbox actually holds; describe it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    output = Output()
    uid = UID_BASE + 999 if os.geteuid() == 0 else None
    worker, facts = ctx.zygote.spawn(uid, ctx.limits, output, stop_fd=ctx.stop_r,
                                     started=ctx.started)
    identity = worker.identity()
    if identity is not None:
        ctx.workers.add(identity)
    try:
        worker.send({"op": "probe", "paths": paths, "port": listener.getsockname()[1]}, [],
                    time.monotonic() + 30)
        reply, blobs = worker.receive(time.monotonic() + 30, "timed out")
        found = protocol.Decoder(blobs)(reply.get("value")) if reply.get("op") == "ok" else {}
    except WorkerLost as lost:
        found = {"error": lost.reason}
    finally:
        with ctx.lock:
            ctx.live.discard(worker)
        worker.close()
        listener.close()
    if uid is not None and facts.get("privileges", "").startswith(f"uid {uid},"):
        facts["privileges"] = facts["privileges"].replace(
            f"uid {uid}", f"uid {UID_BASE} + job number")
    return describe_isolation(facts, found, ctx.limits)


def describe_isolation(facts: dict, found: dict, limits: Limits) -> dict:
    namespaces = facts.get("namespaces", [])
    checks = {
        "import coursekit": found.get("import coursekit", "unknown"),
        "read coursekit, submissions, results": (
            "blocked" if found.get("paths") and all(v.startswith("hidden")
                                                    for v in found["paths"].values())
            else "ALLOWED: " + ", ".join(p for p, v in found.get("paths", {}).items()
                                         if not v.startswith("hidden"))),
        "connect to 127.0.0.1": found.get("network", "unknown"),
        "fork a process": found.get("fork", "unknown"),
        "other processes visible": max(0, found.get("processes visible", 1) - 1),
    }
    blocked = [checks["import coursekit"] == "blocked",
               checks["read coursekit, submissions, results"] == "blocked",
               str(checks["connect to 127.0.0.1"]).startswith("blocked")]
    level = "strong" if all(blocked) else "partial" if any(blocked) else "weak"
    parts = [f"worker process ({facts.get('privileges', 'same user as the grader')})",
             ("namespaces: " + ", ".join(namespaces)) if namespaces else "no namespaces",
             "private root file system" if facts.get("filesystem") == "private"
             else "shared file system", "seccomp filter" if facts.get("seccomp") else "no seccomp"]
    return {"level": level, "summary": f"{level}: " + "; ".join(parts),
            "namespaces": namespaces, "filesystem": facts.get("filesystem"),
            "privileges": facts.get("privileges"), "seccomp": bool(facts.get("seccomp")),
            "rlimits": facts.get("limits", {}), "limits": limits.describe(), "checks": checks}


def _chapter_for(ctx: Context, parsed, filename: str, default: str | None,
                 forced: str | None) -> str | None:
    """What to grade a submission as: ``--chapter``, else the notebook or chapter its tagged
    exercise cells belong to, else its file name (``07f_bert.ipynb``), else the class's."""
    if forced:
        return forced
    declared = ctx.key_for(parsed.exercise_ids()) if parsed else None
    if declared:
        return declared
    named = chapter_from_filename(filename)
    return named if named and ctx.chapter(named) else default


def _has_no_exercises(ctx: Context, key: str | None) -> bool:
    """A later notebook of a chapter that keeps all its exercises in its first one (02b, 06b):
    graded by its file name, it would answer its chapter's exercises, which live elsewhere."""
    return (key is not None and len(key) == 3 and key[2] != "a"
            and not any(s.notebook == key for s in ctx.suites.values()))


def grade_submission(ctx: Context, sub: Submission, digest: str | None, parsed,
                     problem: str | None, chapter: str | None,
                     slot: int) -> report.SubmissionResult:
    """Grade one submission (already read, hashed and parsed) in a fresh worker."""
    start = time.monotonic()
    suites = ctx.chapter(chapter)
    result = report.SubmissionResult(
        id=sub.id, origin=sub.origin, filename=sub.filename, sha256=digest,
        chapter=chapter, fingerprint=ctx.fingerprint, hidden=ctx.hidden,
        isolation=ctx.isolation, lms_path=sub.lms_path)
    if problem is not None:
        result.problem = problem
        result.exercises = [not_run(s, f"not graded: {problem}") for s in suites]
        result.seconds = time.monotonic() - start
        return result
    if not suites:
        result.problem = "not recognised as a chapter of the book (no known exercises)"
        result.notes.append("Use --chapter NN to grade it as a given chapter.")
        return result
    result.notes += parsed.notes
    with PARSING:  # CPython 3.11's ast is not safe across threads (the workers' threads parse)
        result.concepts, concept_notes = concepts.grade_sources(
            [c.source for c in parsed.cells], concepts.asked_in(chapter), ctx.concept_points)
    result.notes += concept_notes
    codes, missing = plan(parsed, [(s.exercise, s.name) for s in suites])
    if _has_no_exercises(ctx, chapter) and len(missing) == len(suites):
        result.notes.append(
            f"This notebook ({chapter}) has no exercises of its own: chapter {chapter[:2]}'s "
            f"exercises are in {chapter[:2]}a. Nothing was graded and no score is given; "
            f"`--chapter {chapter[:2]}` grades it as the whole chapter.")
        result.seconds = time.monotonic() - start
        return result
    result.notes += [c.note for c in codes.values() if c.note]
    result.sources = {name: c.source for name, c in codes.items()}  # for the class report
    provided = provided_names([c.source for c in parsed.cells], ctx.suites)
    session = Session(ctx, slot, start + ctx.limits.timeout, provided)
    try:
        session.load(sorted(codes.items(), key=lambda item: item[1].cell))
        for suite in suites:
            if suite.name in missing:
                result.exercises.append(not_run(suite, "not run: " + missing[suite.name]))
            elif suite.name in session.load_errors:
                result.exercises.append(not_run(suite, session.load_errors[suite.name]))
            else:
                result.exercises.append(grade_outputs(suite, session.run_cases(suite),
                                                      ctx.hidden.get(suite.name, set())))
    except HarnessError as err:
        session.harness_errors.append(str(err))
        done = {r.suite.name for r in result.exercises}
        result.exercises += [not_run(s, f"grader error: {err}") for s in suites
                             if s.name not in done]
    finally:
        session.close()
    result.events = sorted(set(session.events))
    result.harness_errors = session.harness_errors
    if any(ctx.hidden.get(s.name) for s in suites):  # it could print a hidden case's inputs
        result.notes.append("What your code printed is not shown: this grading has hidden cases.")
    else:
        result.output = session.output.text()
    result.worker_peak_mib = session.peak_kib / 1024
    result.seconds = time.monotonic() - start
    return result


def could_not_grade(ctx: Context, sub: Submission, digest: str | None, chapter: str | None,
                    err: BaseException, doing: str = "grading it") -> report.SubmissionResult:
    """The result of a submission the grader failed on (a last resort, so that one file never
    stops a batch): no points, and a problem the class report lists as a grader error."""
    message = f"{type(err).__name__}: {clean(str(err), 300)}"
    result = report.SubmissionResult(
        id=sub.id, origin=sub.origin, filename=sub.filename, sha256=digest, chapter=chapter,
        fingerprint=ctx.fingerprint, hidden=ctx.hidden, isolation=ctx.isolation,
        lms_path=sub.lms_path)
    result.problem = f"could not be graded: the grader failed while {doing} ({message})"
    result.harness_errors = [result.problem]
    result.exercises = [not_run(s, "not graded: the grader failed on this submission")
                        for s in ctx.chapter(chapter)]
    return result


@dataclasses.dataclass
class BatchResult:
    records: list[dict]  # the results.json of every submission, fresh or kept
    graded: int
    skipped: int
    seconds: float
    isolation: dict | None
    summary: str
    # (pid, start time in clock ticks) of every worker this batch started: which processes
    # were this batch's, however many other batches share the machine and its worker uids
    workers: list[tuple[int, int]] = dataclasses.field(default_factory=list)


def grade(paths: Iterable[Path | str], out: Path | str, *, jobs: int | None = None,
          limits: Limits | None = None, force: bool = False, extra_cases: Path | str | None = None,
          chapter: str | None = None, suites: dict[str, Suite] | None = None,
          stream: TextIO | None = sys.stderr, hide: Iterable[Path | str] = (),
          namespaces: bool = True, seccomp: bool = True, lms: str | None = None,
          lms_assignment: str | None = None, concept_points: float = 0.0) -> BatchResult:
    """Grade every submission under ``paths`` into ``out`` (see the module docstring).

    Writes ``out/<id>/results.json`` (Gradescope format) and ``out/<id>/feedback.md`` as each
    submission finishes, and ``out/grades.csv`` and ``out/summary.md`` for the class, and at
    the end ``out/summary.html`` (:mod:`report`); with ``lms`` ("canvas" or "moodle") also
    ``out/grades-<lms>.csv``, that LMS's import format (``lms_assignment``: the column title). A
    submission whose content and grading set-up are unchanged since its results were written is
    skipped unless ``force``. ``hide`` names more paths the workers must not see (the grader
    always hides coursekit, its project, the submissions, ``out`` and the extra cases).
    ``namespaces`` and ``seccomp`` switch those sandbox layers off (to test the fallbacks).
    ``concept_points`` > 0 grades the concept checks the submission's notebook asks, that many
    points each (all or nothing), on top of the exercises; 0 records them ungraded.
    """
    started = time.monotonic()
    limits = limits or Limits()
    if lms is not None and lms not in report.LMS:
        raise ValueError(f"--lms must be one of {', '.join(report.LMS)}, not {lms!r}")
    write_class = functools.partial(report.write_class, lms=lms, assignment=lms_assignment)
    paths, out = [Path(p) for p in paths], Path(out)
    out.mkdir(parents=True, exist_ok=True)
    extra = Path(extra_cases) if extra_cases else None
    suites = dict(suites if suites is not None else all_suites())
    hidden: dict[str, set[int]] = {}
    if extra:
        suites, hidden = load_extra_cases(extra, suites)
    jobs = max(1, jobs or os.cpu_count() or 1)
    secret = sorted({*hidden_paths(paths, out, extra), *(str(Path(p).resolve()) for p in hide)})
    if not (math.isfinite(concept_points) and concept_points >= 0):
        raise ValueError(f"--concept-points must be a number >= 0, not {concept_points!r}")
    ctx = Context(suites, hidden, limits, None,
                  fingerprint(suites, limits, extra, concept_points), concept_points=concept_points)
    say = (lambda text: print(text, file=stream, flush=True)) if stream else (lambda text: None)
    try:
        submissions = discover(paths, exclude=[out],
                               is_submission=looks_like_submission(suites))
        # Read and parse everything first: the class's chapter is the most common one.
        loaded = []
        for sub in submissions:
            digest = parsed = None
            problem = sub.problem
            if problem is None:
                try:
                    data = sub.read()
                    digest = hashlib.sha256(data).hexdigest()
                    parsed = parse(data, sub.filename)
                except SubmissionError as err:
                    problem = str(err)
            loaded.append((sub, digest, parsed, problem))
        votes = Counter(_chapter_for(ctx, parsed, sub.filename, None, None)
                        for sub, _, parsed, _ in loaded)
        votes.pop(None, None)
        default = chapter or (votes.most_common(1)[0][0] if votes else None)
        write_class = functools.partial(write_class, chapter=default)  # Moodle's one chapter
        records: dict[str, dict] = {}
        todo = []
        for sub, digest, parsed, problem in loaded:
            which = _chapter_for(ctx, parsed, sub.filename, default, chapter)
            previous = None if force else report.load_record(out, sub.id)
            if (previous is not None and digest is not None
                    and report.meta(previous).get("sha256") == digest
                    and report.meta(previous).get("chapter") == which
                    and report.meta(previous).get("fingerprint") == ctx.fingerprint):
                records[sub.id] = previous
            else:
                todo.append((sub, digest, parsed, problem, which))
        skipped = len(records)
        say(f"coursekit grade: {len(submissions)} submission(s) found, {len(todo)} to grade"
            + (f", {skipped} unchanged since last time (use --force to re-grade)" if skipped
               else "") + f"; {jobs} job(s)")
        if todo:
            ctx.zygote = Zygote(secret, namespaces=namespaces, seccomp=seccomp)
            ctx.isolation = probe_isolation(ctx, _probe_paths(secret, paths, out))
            say(f"isolation: {ctx.isolation['summary']}")
            if ctx.isolation["level"] != "strong":
                say("WARNING: the workers are not fully isolated: " + json.dumps(
                    ctx.isolation["checks"]))
        lock = threading.Lock()
        slots = list(range(jobs))
        done = [0]
        graded_start = time.monotonic()

        def work(item) -> None:
            sub, digest, parsed, problem, which = item
            with lock:
                slot = slots.pop()
            try:
                if ctx.stopping:
                    return
                try:
                    result = grade_submission(ctx, sub, digest, parsed, problem, which, slot)
                except Exception as err:  # noqa: BLE001 (the last resort: the batch goes on)
                    result = could_not_grade(ctx, sub, digest, which, err)
            finally:
                with lock:
                    slots.append(slot)
            if ctx.stopping:  # interrupted: its results would be wrong, so write none
                return
            try:
                record = report.write_submission(out, result)
            except Exception as err:  # noqa: BLE001 (e.g. a disk full: the others go on)
                result = could_not_grade(ctx, sub, digest, which, err, "writing its results")
                try:
                    record = report.write_submission(out, result)
                except Exception:  # noqa: BLE001
                    record = report.results_json(result)
                    say(f"could not write the results of {clean(sub.id, 60)}: {clean(str(err))}")
            with lock:
                records[sub.id] = record
                done[0] += 1
                write_class(out, list(records.values()), ctx.isolation, html=False)
                elapsed = time.monotonic() - graded_start
                eta = elapsed / done[0] * (len(todo) - done[0])
                say(f"[{done[0]:>{len(str(len(todo)))}}/{len(todo)}] {clean(sub.id, 60):<30} "
                    f"{report.points(result.score):>5} / {report.points(result.max_score):<5}"
                    f" {result.seconds:5.1f} s   elapsed {_clock(elapsed)}  ETA {_clock(eta)}"
                    + (f"   ({clean(result.problem or ', '.join(result.events), 200)})"
                       if result.problem or result.events else ""))

        # Ctrl-C must reach the main thread, which alone runs Python's signal handlers; a main
        # thread blocked on a lock wakes for a signal only if the kernel delivers it to that
        # thread. So the pool threads block SIGINT and SIGTERM, and the main thread waits in short
        # slices, letting its handler run within half a second. (A grader started with SIGINT
        # ignored, as a background job of a non-interactive shell is, keeps ignoring it.)
        pool = ThreadPoolExecutor(max_workers=jobs, initializer=_block_interrupts)
        try:
            for future in [pool.submit(work, item) for item in todo]:
                while not future.done():
                    futures_wait([future], timeout=0.5)
                future.result()
        except BaseException:  # Ctrl-C (or a grader bug): stop the workers, keep what is done
            ctx.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            if records:  # quickly: summary.html (matplotlib) waits for the next run
                write_class(out, list(records.values()), ctx.isolation, html=False)
            say(f"stopped: {len(records) - skipped} of {len(todo)} graded; run the same command "
                "again to grade the rest")
            raise
        pool.shutdown()
        ordered = [records[s.id] for s in submissions if s.id in records]
        summary = write_class(out, ordered, ctx.isolation,
                              seconds=time.monotonic() - started, jobs=jobs)
        say(summary)
        return BatchResult(ordered, len(todo), skipped, time.monotonic() - started,
                           ctx.isolation, summary, sorted(ctx.workers))
    finally:
        if ctx.zygote is not None:
            ctx.zygote.close(wait=2 if ctx.stopping else 10)
        ctx.close()


def _block_interrupts() -> None:
    """In a grading thread: leave SIGINT and SIGTERM to the main thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def _probe_paths(secret: list[str], paths: list[Path], out: Path) -> list[str]:
    """Files a worker must not be able to open: coursekit's source, a suite, submissions."""
    import coursekit

    package = Path(coursekit.__file__).resolve().parent
    probes = [package / "__init__.py", package / "grading" / "suite.py", out]
    for path in paths:
        probes.append(path if path.is_file() else next(
            (p for p in sorted(path.rglob("*")) if p.is_file()), path))
    return [str(p.resolve()) for p in probes if p.exists()]


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"
