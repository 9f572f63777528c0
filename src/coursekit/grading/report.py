"""What the batch grader writes: per submission a Gradescope ``results.json`` and a readable
``feedback.md``; for the class ``grades.csv`` and ``summary.md``. Every file is written
atomically (a temporary file, then ``os.replace``), so an interrupted run leaves whole files.

``results.json`` follows Gradescope's autograder format (``score``, ``tests`` with ``name``,
``score``, ``max_score``, ``status``, ``output``, ``visibility``) plus ``max_score``; what the
class reports need is kept under ``extra_data.coursekit`` so a later run can rebuild them (and
skip unchanged submissions) from the files alone.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.grading.check import format_result
from coursekit.grading.suite import SuiteResult

PRECISION = 4


def points(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.2f}"


def fenced(text: str) -> str:
    """A Markdown code block that no backtick run inside ``text`` can close early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def one_line(text: str) -> str:
    """Student-influenced text for a table cell: no line breaks, no cell separators."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text)).replace("|", "/")


def _csv_cell(value: object) -> object:
    """Keep a spreadsheet from reading a cell as a formula (CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


@dataclass
class SubmissionResult:
    id: str
    origin: str
    filename: str
    sha256: str | None
    chapter: str | None
    fingerprint: str
    hidden: dict[str, set[int]] = field(default_factory=dict)
    isolation: dict | None = None
    exercises: list[SuiteResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: str | None = None  # why it could not be graded at all
    events: list[str] = field(default_factory=list)  # "timeout", "crash", "output"
    harness_errors: list[str] = field(default_factory=list)
    output: str = ""  # the start of what the student's code printed
    seconds: float = 0.0
    worker_peak_mib: float = 0.0  # peak resident memory of its workers (shared pages included)

    @property
    def score(self) -> float:
        return round(sum(r.earned for r in self.exercises), PRECISION)

    @property
    def max_score(self) -> float:
        return round(sum(r.points for r in self.exercises), PRECISION)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- one submission


def _case_output(result: SuiteResult, index: int) -> str:
    case = result.cases[index]
    if result.status == "not attempted":
        return "✗ not attempted yet (the exercise still raises NotImplementedError)"
    if case.earned == case.points:
        return f"✓ {case.message}"
    text = f"✗ {case.message}"
    return text + (f"\nHint: {result.hint}" if result.hint else "")


def _shares(values: list[float]) -> list[float]:
    """Round each value, then fix the last so that the shares add up to the rounded total."""
    rounded = [round(v, PRECISION) for v in values]
    if rounded:
        rounded[-1] = round(round(sum(values), PRECISION) - sum(rounded[:-1]), PRECISION)
    return rounded


def results_json(result: SubmissionResult) -> dict:
    """The Gradescope results for one submission."""
    tests = []
    for r in result.exercises:
        hidden = result.hidden.get(r.suite.name, set())
        scores = _shares([c.earned for c in r.cases])
        maxima = _shares([c.points for c in r.cases])
        for i, case in enumerate(r.cases):
            tests.append({
                "name": f"{r.suite.exercise} {r.suite.name} · {case.name}",
                "number": f"{r.suite.exercise}.{i + 1}",
                "score": scores[i],
                "max_score": maxima[i],
                "status": "passed" if case.earned == case.points else "failed",
                "output": _case_output(r, i),
                "visibility": "after_published" if i in hidden else "visible",
            })
    problems = ([f"unreadable: {result.problem}"] if result.problem else []) + [
        {"timeout": "timed out", "crash": "crashed the worker", "output": "printed too much",
         "protocol": "sent malformed messages"}.get(e, e) for e in result.events]
    return {
        "score": result.score,
        "max_score": result.max_score,
        "execution_time": round(result.seconds, 3),
        "output": feedback_text(result, markdown=True),
        "output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"coursekit": {
            "submission": result.id,
            "origin": result.origin,
            "sha256": result.sha256,
            "fingerprint": result.fingerprint,
            "chapter": result.chapter,
            "exercises": {r.suite.exercise: {"name": r.suite.name,
                                             "score": round(r.earned, PRECISION),
                                             "max_score": round(r.points, PRECISION),
                                             "status": r.status} for r in result.exercises},
            "problems": problems,
            "harness_errors": result.harness_errors,
            "notes": result.notes,
            "seconds": round(result.seconds, 3),
            "worker_peak_mib": round(result.worker_peak_mib, 1),
            "graded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "isolation": result.isolation,
        }},
    }


def feedback_text(result: SubmissionResult, markdown: bool = True) -> str:
    """The feedback a student reads: the same per-case lines and hints as ``check()``; hidden
    cases only as a count."""
    fence = fenced if markdown else (lambda text: text)
    chapter = f"Chapter {result.chapter}" if result.chapter else "Submission"
    lines = [f"# {chapter} · feedback for {result.id}", "",
             f"**Score: {points(result.score)} / {points(result.max_score)}** "
             f"(file: `{Path(result.origin).name}`)", ""]
    if result.problem:
        lines += [f"This submission could not be graded: {result.problem}.", ""]
    for r in result.exercises:
        block = format_result(r, result.hidden.get(r.suite.name, set()))
        lines += [f"## Exercise {r.suite.exercise} · {r.suite.name}: "
                  f"{points(r.earned)} / {points(r.points)}", "", fence(block), ""]
    if result.notes:
        lines += ["## Notes", "", *(f"- {n}" for n in result.notes), ""]
    if result.output.strip():
        lines += ["## What your code printed (the start of it)", "", fence(result.output.rstrip()),
                  ""]
    if result.isolation:
        lines += ["---", f"Graded by `coursekit grade` in a sandboxed worker "
                         f"(isolation {result.isolation['summary']})."]
    return "\n".join(lines) + "\n"


def write_submission(out: Path, result: SubmissionResult) -> dict:
    """Write ``out/<id>/results.json`` and ``feedback.md``; returns the results dict."""
    record = results_json(result)
    folder = Path(out) / result.id
    _atomic_write(folder / "feedback.md", feedback_text(result))
    _atomic_write(folder / "results.json", json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return record


def load_record(out: Path, submission_id: str) -> dict | None:
    """A previously written results.json, or None."""
    path = Path(out) / submission_id / "results.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "coursekit" in record.get("extra_data", {}) \
        else None


def meta(record: dict) -> dict:
    return record.get("extra_data", {}).get("coursekit", {})


# ----------------------------------------------------------------------------- the class


def class_csv(records: list[dict]) -> str:
    exercises = sorted({(k, v["name"]) for r in records for k, v in meta(r)["exercises"].items()})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["submission", "file", "chapter", "score", "max_score",
                     *(f"{k} {name}" for k, name in exercises), "problems", "sha256"])
    for r in records:
        m = meta(r)
        writer.writerow([_csv_cell(v) for v in [
            m["submission"], m["origin"], m["chapter"] or "", r["score"], r["max_score"],
            *(m["exercises"].get(k, {}).get("score", "") for k, _ in exercises),
            one_line("; ".join(m["problems"])), m["sha256"] or ""]])
    return buffer.getvalue()


def summary_text(records: list[dict], isolation: dict | None, seconds: float | None = None,
                 jobs: int | None = None) -> str:
    """A Markdown summary for the class: per-exercise table, problems, timing, isolation."""
    lines = [f"# Grading summary · {len(records)} submission(s)", ""]
    if not records:
        return "\n".join(lines + ["No submissions were found (notebooks, .py files or zips).", ""])
    if seconds is not None:
        times = [meta(r).get("seconds", 0) for r in records]
        lines += [f"Run time {seconds:.1f} s with {jobs} job(s); per submission "
                  f"{statistics.mean(times):.2f} s on average, {max(times):.2f} s at most "
                  "(submissions unchanged since a previous run count with their old time).", ""]
    by_chapter: dict[str, list[dict]] = {}
    for r in records:
        by_chapter.setdefault(meta(r)["chapter"] or "?", []).append(r)
    for chapter, group in sorted(by_chapter.items()):
        exercises = sorted({(k, v["name"], v["max_score"]) for r in group
                            for k, v in meta(r)["exercises"].items()})
        lines += [f"## Chapter {chapter} · {len(group)} submission(s)", "",
                  "| exercise | points | mean | full marks | attempted |",
                  "|---|---:|---:|---:|---:|"]
        for key, name, max_score in exercises:
            got = [meta(r)["exercises"][key] for r in group if key in meta(r)["exercises"]]
            lines.append(
                f"| {key} {name} | {points(max_score)} | "
                f"{statistics.mean(g['score'] for g in got):.2f} | "
                f"{sum(g['score'] == g['max_score'] for g in got) / len(got):.0%} | "
                f"{sum(g['status'] != 'not attempted' for g in got) / len(got):.0%} |")
        scores = [r["score"] for r in group]
        max_score = max((r["max_score"] for r in group), default=0)
        lines += [f"| **total** | {points(max_score)} | {statistics.mean(scores):.2f} | "
                  f"{sum(r['score'] == r['max_score'] > 0 for r in group) / len(group):.0%} | |",
                  "", f"Median {statistics.median(scores):g}, lowest {min(scores):g}, "
                      f"highest {max(scores):g}.", ""]
    troubled = [r for r in records if meta(r)["problems"] or meta(r).get("harness_errors")]
    if troubled:
        lines += ["## Submissions to look at", "", "| submission | score | problem |",
                  "|---|---:|---|"]
        for r in troubled:
            m = meta(r)
            what = "; ".join(m["problems"] + [f"grader error: {e}" for e in m["harness_errors"]])
            lines.append(f"| {m['submission']} | {points(r['score'])} / "
                         f"{points(r['max_score'])} | {one_line(what)} |")
        lines.append("")
    if isolation:
        lines += [f"Isolation: {isolation['summary']}. Limits: {isolation['limits']}.", "",
                  "Checked from inside a worker: " + "; ".join(
                      f"{k}: {v}" for k, v in isolation["checks"].items()) + ".", ""]
    return "\n".join(lines)


def write_class(out: Path, records: list[dict], isolation: dict | None,
                seconds: float | None = None, jobs: int | None = None) -> str:
    """Write ``grades.csv`` and ``summary.md``; returns the summary."""
    isolation = isolation or next((meta(r)["isolation"] for r in records
                                   if meta(r).get("isolation")), None)
    summary = summary_text(records, isolation, seconds, jobs)
    if records:
        _atomic_write(Path(out) / "grades.csv", class_csv(records))
    _atomic_write(Path(out) / "summary.md", summary)
    return summary
