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
import tokenize
from collections import Counter
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


def code_span(text: object) -> str:
    """Student-influenced text inside a Markdown line, shown as code: nothing in it is read as
    Markdown or HTML (no heading, image, link or tag), whatever it holds."""
    text = re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", str(text))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) or not text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")


def plain(text: object) -> str:
    """Text that may hold a submission's words (a hint quoting its exception), for a Markdown
    line: on one line, and outside its code spans the characters that start a tag, an entity,
    an image or a link escaped, so that it shows as written and nothing in it is fetched."""
    text, parts, last = flat(text), [], 0
    for match in _SPAN.finditer(text):
        parts += [re.sub(r"([\\<>\[\]!&])", r"\\\1", text[last:match.start()]), match.group(0)]
        last = match.end()
    parts.append(re.sub(r"([\\<>\[\]!&])", r"\\\1", text[last:]))
    return "".join(parts)


def one_line(text: str) -> str:
    """Student-influenced text for a table cell: no line breaks, no cell separators."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text)).replace("|", "/")


def flat(text: str) -> str:
    """Student-influenced text for a Markdown paragraph or list item: on one line."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text))


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
    sources: dict[str, str] = field(default_factory=dict)  # exercise name -> the code graded
    # the concept checks answered in the notebook (coursekit.concepts.grade_sources): ungraded,
    # or each asked question worth "points" when the instructor gives them (--concept-points)
    concepts: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    worker_peak_mib: float = 0.0  # peak resident memory of its workers (shared pages included)
    # the names under the folder or zip the instructor gave, outermost first: where the
    # learning platform's names are (see lms_identity)
    lms_path: tuple[str, ...] = ()

    @property
    def score(self) -> float:
        return round(sum(r.earned for r in self.exercises)
                     + sum(c.get("earned", 0.0) for c in self.concepts), PRECISION)

    @property
    def max_score(self) -> float:
        return round(sum(r.points for r in self.exercises)
                     + sum(c.get("points", 0.0) for c in self.concepts), PRECISION)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace", newline="") as f:
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


IN_PLACE = ("Your code modifies its argument", "Your code changes its argument")
_RAISED = re.compile(r"^(?:raised|the cell did not run(?: when re-run)?:) "
                     r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning))\b")
CODE_LINES = 40  # lines of an example's code shown in the class report


def anonymised(source: str | None) -> str:
    """A student's exercise code with its comments removed (they may name the student), blank
    runs squeezed, at most :data:`CODE_LINES` lines. Parsed as tokens only, never run."""
    if not source:
        return ""
    # only what can be shown is read: the first lines, 400 characters each, 16 KiB in all (a
    # pasted output in a comment must not cost the grader memory or time)
    source = "\n".join(line[:400] for line in source[:16 << 10].splitlines()[:4 * CODE_LINES])
    try:
        kept = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type != tokenize.COMMENT]
        text = tokenize.untokenize(kept)
    except (tokenize.TokenError, IndentationError, SyntaxError, ValueError):
        text = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    lines = [line.rstrip() for line in text.splitlines()]
    squeezed = [line for i, line in enumerate(lines) if line or (i and lines[i - 1])]
    while squeezed and not squeezed[-1]:
        squeezed.pop()
    if len(squeezed) > CODE_LINES:
        squeezed = [*squeezed[:CODE_LINES], "..."]
    return "\n".join(squeezed)


def diagnosis(r: SuiteResult, hidden: set[int] = frozenset(), source: str | None = None) -> dict:
    """What the class report needs to know of one exercise of one submission, from its visible
    cases only: the hint, the diagnosis it names (a suite mutant's name; "modifies its arguments
    in place"; "raises TypeError"; "did not run: ..."; "no known bug matched"), the exception
    types its cases raised, the first failing case and the code (comments removed)."""
    visible = [c for i, c in enumerate(r.cases) if i not in hidden]
    failing = [c for c in visible if c.earned < c.points]
    errors = sorted({m.group(1) for c in visible if (m := _RAISED.match(c.message))
                     and m.group(1) != "NotImplementedError"})
    label = None
    if r.status not in ("passed", "not attempted") and failing:
        mutant = next((m for m in r.suite.mutants if m.hint == r.hint), None) if r.hint else None
        raised = next((m.group(1) for c in failing if (m := _RAISED.match(c.message))), None)
        if mutant is not None:
            label = mutant.name
        elif r.hint.startswith(IN_PLACE):
            label = "modifies its arguments in place"
        elif not r.hint:  # the exercise could not run at all (suite.not_run)
            text = re.sub(r"^(not run|not graded): ", "", failing[0].message)
            label = (f"did not run ({raised})" if raised else
                     "did not run: " + re.split(r"[:(`]", text, maxsplit=1)[0].strip())
        elif raised:
            label = f"raises {raised}"
        elif any(c.message.startswith("returned the wrong type") for c in failing):
            label = "returns the wrong type"
        else:
            label = "no known bug matched"
    example = f"in the case '{failing[0].name}', {failing[0].message}" if failing else ""
    return {"hint": r.hint, "diagnosis": label, "errors": errors,
            "example": example[:500], "code": anonymised(source) if label else ""}


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
                "output_format": "text",
                "visibility": "after_published" if i in hidden else "visible",
            })
    for c in result.concepts:
        if "points" in c:
            tests.append({
                "name": f"concept check {c['id']}",
                "number": c["id"],
                "score": c["earned"],
                "max_score": c["points"],
                "status": "passed" if c["right"] else "failed",
                "output": f"{ {True: '✓', False: '✗', None: '·'}[c['right']]} {c['message']}",
                "output_format": "text",
                "visibility": "visible",
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
            "lms_path": list(result.lms_path),
            "sha256": result.sha256,
            "fingerprint": result.fingerprint,
            "chapter": result.chapter,
            "exercises": {r.suite.exercise: {
                "name": r.suite.name, "score": round(r.earned, PRECISION),
                "max_score": round(r.points, PRECISION), "status": r.status,
                **diagnosis(r, result.hidden.get(r.suite.name, set()),
                            result.sources.get(r.suite.name))} for r in result.exercises},
            "problems": problems,
            "concepts": result.concepts,
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
             f"(file: {code_span(_basename(result.origin))})", ""]
    if result.problem:
        lines += ["This submission could not be graded:", "", fence(flat(result.problem)), ""]
    for r in result.exercises:
        block = format_result(r, result.hidden.get(r.suite.name, set()))
        lines += [f"## Exercise {r.suite.exercise} · {r.suite.name}: "
                  f"{points(r.earned)} / {points(r.points)}", "", fence(block), ""]
    if result.concepts:
        right = sum(1 for c in result.concepts if c["right"])
        answered = sum(1 for c in result.concepts if c["right"] is not None)
        graded = [c for c in result.concepts if "points" in c]
        status = (f"{points(sum(c['earned'] for c in graded))} / "
                  f"{points(sum(c['points'] for c in graded))} points" if graded else "ungraded")
        lines += [f"## Concept checks ({status}): {right} of {len(result.concepts)} right, "
                  f"{answered} answered", "",
                  fence("\n".join(f"{ {True: '✓', False: '✗', None: '·'}[c['right']]} {c['id']}: "
                                  f"{c['message']}" for c in result.concepts)), ""]
    if result.notes:
        lines += ["## Notes", "", fence("\n".join(f"- {flat(n)}" for n in result.notes)), ""]
    if result.output.strip():
        lines += ["## What your code printed (the start of it)", "", fence(result.output.rstrip()),
                  ""]
    if result.isolation:
        lines += ["---", f"Graded by `coursekit grade` in a sandboxed worker "
                         f"(isolation {result.isolation['summary']})."]
    return "\n".join(lines) + "\n"


def _basename(origin: str) -> str:
    """The file's own name from an origin such as ``dir/export.zip:folder/03_x.ipynb``."""
    return re.split(r"[/\\:]", origin)[-1] or origin


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


def concept_status(records: list[dict]) -> str:
    """"ungraded", or the points each concept check was worth in this batch."""
    each = sorted({c["points"] for r in records for c in meta(r).get("concepts", [])
                   if "points" in c})
    return f"graded, {' or '.join(map(points, each))} point(s) each" if each else "ungraded"


def class_csv(records: list[dict]) -> str:
    exercises = sorted({(k, v["name"]) for r in records for k, v in meta(r)["exercises"].items()})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    graded = concept_status(records) != "ungraded"
    writer.writerow(["submission", "file", "chapter", "score", "max_score",
                     *(f"{k} {name}" for k, name in exercises),
                     *(["concept checks"] if graded else []), "problems", "sha256"])
    for r in records:
        m = meta(r)
        concept_score = round(sum(c.get("earned", 0.0) for c in m.get("concepts", [])), PRECISION)
        writer.writerow([_csv_cell(v) for v in [
            m["submission"], m["origin"], m["chapter"] or "", r["score"], r["max_score"],
            *(m["exercises"].get(k, {}).get("score", "") for k, _ in exercises),
            *([concept_score] if graded else []),
            one_line("; ".join(m["problems"])), m["sha256"] or ""]])
    return buffer.getvalue()


BINS = ("0", "1–24%", "25–49%", "50–74%", "75–99%", "100%")


def _bin(score: float, max_score: float) -> int:
    """Which of :data:`BINS` a score falls in (0, four quarters of partial credit, full)."""
    if max_score <= 0 or score <= 0:
        return 0
    if score >= max_score:
        return 5
    return 1 + min(3, int(4 * score / max_score))


@dataclass
class Finding:
    """One diagnosis (or exception type) of one exercise, counted over the class."""

    label: str
    count: int
    hint: str = ""
    example: str = ""  # the first failing case of one submission: "case: message"
    code: str = ""  # that submission's code, comments removed


@dataclass
class ExerciseStats:
    key: str
    name: str
    max_score: float
    scores: list[float]
    statuses: list[str]
    wrong: list[Finding]  # what went wrong, most frequent first
    exceptions: list[Finding]

    @property
    def bins(self) -> list[int]:
        counts = [0] * len(BINS)
        for score in self.scores:
            counts[_bin(score, self.max_score)] += 1
        return counts


def _findings(entries: list[dict], key) -> list[Finding]:
    """Group exercise entries by ``key(entry)`` (None: not counted); one example per group,
    the one with the shortest code (the easiest to read), ties to the first submission."""
    groups: dict[str, list[dict]] = {}
    for entry in entries:
        for label in key(entry):
            groups.setdefault(label, []).append(entry)
    found = []
    for label, members in groups.items():
        shown = min(members, key=lambda e: len(e.get("code") or "") or 10**9)
        found.append(Finding(label, len(members), shown.get("hint", ""),
                             shown.get("example", ""), shown.get("code", "")))
    return sorted(found, key=lambda f: (-f.count, f.label))


def exercise_stats(group: list[dict]) -> list[ExerciseStats]:
    """Per exercise of a chapter's submissions: scores, what went wrong, exceptions."""
    exercises = sorted({(k, v["name"], v["max_score"]) for r in group
                        for k, v in meta(r)["exercises"].items()})
    stats = []
    for key, name, max_score in exercises:
        got = [meta(r)["exercises"][key] for r in group if key in meta(r)["exercises"]]
        wrong = _findings(got, lambda e: [e["diagnosis"]] if e.get("diagnosis") else [])
        raised = _findings(got, lambda e: e.get("errors", []))
        for finding in raised:  # the example of an exception is a case that raised it
            finding.example = next(
                (e["example"] for e in got if finding.label in e.get("errors", [])
                 and finding.label in e.get("example", "")), finding.example)
        stats.append(ExerciseStats(key, name, max_score, [g["score"] for g in got],
                                   [g["status"] for g in got], wrong, raised))
    return stats


def _chapters(records: list[dict]) -> list[tuple[str, list[dict]]]:
    by_chapter: dict[str, list[dict]] = {}
    for r in records:
        by_chapter.setdefault(meta(r)["chapter"] or "?", []).append(r)
    return sorted(by_chapter.items())


def _troubled(records: list[dict]) -> list[tuple[dict, str]]:
    return [(r, "; ".join(meta(r)["problems"] + [f"grader error: {e}"
                                                for e in meta(r).get("harness_errors", [])]))
            for r in records if meta(r)["problems"] or meta(r).get("harness_errors")]


def summary_text(records: list[dict], isolation: dict | None, seconds: float | None = None,
                 jobs: int | None = None, lms_note: str = "") -> str:
    """A Markdown summary for the class: per chapter a table of the exercises and the
    distribution of their scores, then per exercise what went wrong (the diagnoses the hints
    name, counted over the class, with one anonymised example each) and the exceptions raised;
    the submissions to look at, timing and isolation."""
    lines = [f"# Grading summary · {len(records)} submission(s)", ""]
    if not records:
        return "\n".join(lines + ["No submissions were found (notebooks, .py files or zips).", ""])
    lines += ["The same report with histograms: `summary.html` (self-contained, opens offline).",
              ""]
    if seconds is not None:
        times = [meta(r).get("seconds", 0) for r in records]
        lines += [f"Run time {seconds:.1f} s with {jobs} job(s); per submission "
                  f"{statistics.mean(times):.2f} s on average, {max(times):.2f} s at most "
                  "(submissions unchanged since a previous run count with their old time).", ""]
    if lms_note:
        lines += [lms_note, ""]
    for chapter, group in _chapters(records):
        stats = exercise_stats(group)
        lines += [f"## Chapter {chapter} · {len(group)} submission(s)", "",
                  "| exercise | points | mean | full marks | attempted |",
                  "|---|---:|---:|---:|---:|"]
        for ex in stats:
            n = len(ex.scores)
            lines.append(
                f"| {ex.key} {ex.name} | {points(ex.max_score)} | "
                f"{statistics.mean(ex.scores):.2f} | "
                f"{sum(sc == ex.max_score for sc in ex.scores) / n:.0%} | "
                f"{sum(st != 'not attempted' for st in ex.statuses) / n:.0%} |")
        scores = [r["score"] for r in group]
        max_score = max((r["max_score"] for r in group), default=0)
        lines += [f"| **total** | {points(max_score)} | {statistics.mean(scores):.2f} | "
                  f"{sum(r['score'] == r['max_score'] > 0 for r in group) / len(group):.0%} | |",
                  "", f"Median {statistics.median(scores):g}, lowest {min(scores):g}, "
                      f"highest {max(scores):g}.", "",
                  "Scores per exercise (number of submissions per share of the points):", "",
                  "| exercise | " + " | ".join(BINS) + " |",
                  "|---|" + "---:|" * len(BINS)]
        for ex in stats:
            lines.append(f"| {ex.key} {ex.name} | " + " | ".join(map(str, ex.bins)) + " |")
        lines.append("")
        for ex in stats:
            if not ex.wrong and not ex.exceptions:
                continue
            n = len(ex.scores)
            lines += [f"### {ex.key} {ex.name} · what went wrong", ""]
            for f in ex.wrong:
                label = (code_span(f.label) if f.label.startswith("did not run:")
                         else plain(f.label))
                lines += [f"- **{f.count} of {n}: {label}.** {plain(f.hint)}"]
                if f.example:
                    lines += [f"  Example (one submission, anonymised): {code_span(f.example)}"]
                if f.code:
                    lines += ["", *("  " + line for line in
                                    fenced(f.code).replace("```text", "```python")
                                    .splitlines()), ""]
            if ex.exceptions:
                lines += ["Exceptions, by type: " + "; ".join(
                    f"{plain(f.label)} in {f.count} of {n}" + (f" (e.g. {code_span(f.example)})"
                                                        if f.example else "")
                    for f in ex.exceptions) + "."]
            lines.append("")
    asked: dict[str, list[dict]] = {}
    for r in records:
        for c in meta(r).get("concepts", []):
            asked.setdefault(c["id"], []).append(c)
    if asked:
        lines += [f"## Concept checks ({concept_status(records)})", "",
                  "| question | answered | right | most common wrong answer |", "|---|---:|---:|---|"]
        for qid in sorted(asked):
            rows = asked[qid]
            wrong = Counter(c["given"] for c in rows if c["right"] is False)
            common = (f"{code_span(one_line(wrong.most_common(1)[0][0]))} "
                      f"({wrong.most_common(1)[0][1]})" if wrong else "")
            lines.append(f"| {qid} | {sum(c['right'] is not None for c in rows)} of {len(rows)} | "
                         f"{sum(bool(c['right']) for c in rows)} | {common} |")
        lines.append("")
    troubled = _troubled(records)
    if troubled:
        lines += ["## Submissions to look at", "", "| submission | score | problem |",
                  "|---|---:|---|"]
        for r, what in troubled:
            lines.append(f"| {code_span(one_line(meta(r)['submission']))} | "
                         f"{points(r['score'])} / {points(r['max_score'])} | "
                         f"{code_span(one_line(what))} |")
        lines.append("")
    if isolation:
        lines += [f"Isolation: {isolation['summary']}. Limits: {isolation['limits']}.", "",
                  "Checked from inside a worker: " + "; ".join(
                      f"{k}: {v}" for k, v in isolation["checks"].items()) + ".", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- summary.html


def histogram_png(ex: ExerciseStats) -> bytes:
    """A small bar chart of an exercise's score distribution (PNG; matplotlib's Agg canvas,
    no pyplot, so the grader's process keeps no figure state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3.6, 1.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.06, 0.24, 0.92, 0.7))
    counts = ex.bins
    colours = ["#c0392b", "#e67e22", "#e6b422", "#9bbf3b", "#5aa469", "#2e7d32"]
    ax.bar(range(len(BINS)), counts, color=colours, width=0.8)
    for i, c in enumerate(counts):
        if c:
            ax.text(i, c, str(c), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(BINS)), BINS, fontsize=6.5)
    ax.set_yticks([])
    ax.set_ylim(0, max(counts + [1]) * 1.25)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


CSS = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#222;line-height:1.45}table{border-collapse:collapse;margin:.5rem 0}
td,th{border:1px solid #ccc;padding:.2rem .5rem}td.n{text-align:right}
pre{background:#f6f6f6;padding:.5rem;overflow-x:auto;font-size:.85rem}
.exercise{border-top:1px solid #ddd;margin-top:1.2rem}.count{font-weight:bold}
img{display:block}details{margin:.2rem 0 .6rem 1rem}"""


def summary_html(records: list[dict], isolation: dict | None, lms_note: str = "") -> str:
    """``summary.md``'s content as one self-contained page: histograms are embedded PNGs, no
    script, no style sheet or font from elsewhere, so it opens offline like the book."""
    import base64
    from html import escape

    def e(text: object) -> str:
        return escape(str(text), quote=True)

    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>Grading summary · {len(records)} submission(s)</title>",
             f"<style>{CSS}</style></head><body>",
             f"<h1>Grading summary · {len(records)} submission(s)</h1>"]
    if lms_note:
        parts.append(f"<p>{e(lms_note)}</p>")
    for chapter, group in _chapters(records):
        stats = exercise_stats(group)
        scores = [r["score"] for r in group]
        parts += [f'<h2 id="chapter-{e(chapter)}">Chapter {e(chapter)} · {len(group)} '
                  "submission(s)</h2>",
                  f"<p>Total: mean {statistics.mean(scores):.2f}, median "
                  f"{statistics.median(scores):g}, lowest {min(scores):g}, highest "
                  f"{max(scores):g}.</p>",
                  "<table><tr><th>exercise</th><th>points</th><th>mean</th><th>full marks</th>"
                  "<th>attempted</th></tr>"]
        for ex in stats:
            n = len(ex.scores)
            parts.append(
                f'<tr><td><a href="#ex-{e(ex.key)}">{e(ex.key)} {e(ex.name)}</a></td>'
                f'<td class="n">{points(ex.max_score)}</td>'
                f'<td class="n">{statistics.mean(ex.scores):.2f}</td>'
                f'<td class="n">{sum(sc == ex.max_score for sc in ex.scores) / n:.0%}</td>'
                f'<td class="n">{sum(st != "not attempted" for st in ex.statuses) / n:.0%}</td>'
                "</tr>")
        parts.append("</table>")
        for ex in stats:
            n = len(ex.scores)
            png = base64.b64encode(histogram_png(ex)).decode()
            parts += [f'<section class="exercise" id="ex-{e(ex.key)}">',
                      f"<h3>{e(ex.key)} {e(ex.name)} · {points(ex.max_score)} point(s)</h3>",
                      f'<img src="data:image/png;base64,{png}" width="360" height="150" '
                      f'alt="scores of {e(ex.key)}: ' + ", ".join(
                          f"{b} {c}" for b, c in zip(BINS, ex.bins, strict=True)) + '">']
            if ex.wrong:
                parts.append("<h4>What went wrong</h4><ul>")
                for f in ex.wrong:
                    parts.append(f'<li><span class="count">{f.count} of {n}: {e(f.label)}.'
                                 f"</span> {e(f.hint)}")
                    if f.example or f.code:
                        parts.append("<details><summary>Example (one submission, anonymised)"
                                     f"</summary><p>{e(f.example)}</p>"
                                     + (f"<pre><code>{e(f.code)}</code></pre>" if f.code else "")
                                     + "</details>")
                    parts.append("</li>")
                parts.append("</ul>")
            if ex.exceptions:
                parts.append("<h4>Exceptions, by type</h4><ul>" + "".join(
                    f'<li><span class="count">{e(f.label)}: {f.count} of {n}</span>'
                    + (f" (e.g. {e(f.example)})" if f.example else "") + "</li>"
                    for f in ex.exceptions) + "</ul>")
            parts.append("</section>")
    troubled = _troubled(records)
    if troubled:
        parts += ["<h2>Submissions to look at</h2>",
                  "<table><tr><th>submission</th><th>score</th><th>problem</th></tr>"]
        parts += [f"<tr><td>{e(meta(r)['submission'])}</td><td class=\"n\">"
                  f"{points(r['score'])} / {points(r['max_score'])}</td><td>{e(what)}</td></tr>"
                  for r, what in troubled]
        parts.append("</table>")
    if isolation:
        parts.append(f"<p>Isolation: {e(isolation['summary'])}. Limits: "
                     f"{e(isolation['limits'])}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- LMS gradebooks

LMS = ("canvas", "moodle")
# Canvas "Download Submissions": lastfirst[_LATE]_<user id>_<attachment id>_<file name>
_CANVAS = re.compile(r"^(?P<name>[^_/]+?)(?:_LATE)?_(?P<id>\d+)_\d+_.+$")
# Moodle "Download all submissions": "<Full name>_<participant id>_assignsubmission_file_" as a
# folder, or as the prefix of each file name ("Participant" for blind marking)
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_[a-z]+_?")


def lms_identity(origin: str | dict, lms: str) -> tuple[str, str] | None:
    """(name, id) of the student a submission belongs to, from the names the LMS's bulk download
    gives, or None when it is not named so. ``origin`` is a results record (its ``lms_path``:
    the names under the folder or zip the instructor gave, outermost first) or an origin string.

    The OUTERMOST name that matches decides: the platform names the file or folder it received
    from a student, and anything inside it (a zip member, a file in that student's folder) was
    named by the student, who could name it after someone else.
    """
    if isinstance(origin, dict):
        data = meta(origin)
        parts = data.get("lms_path") or [p for p in re.split(r"[/\\:]", data["origin"]) if p]
    else:
        parts = [p for p in re.split(r"[/\\:]", origin) if p]
    pattern = _CANVAS if lms == "canvas" else _MOODLE
    for part in parts:
        match = pattern.match(str(part))
        if match:
            return match.group("name").strip(), match.group("id")
    return None


def lms_csv(records: list[dict], lms: str, assignment: str | None = None,
            chapter: str | None = None) -> tuple[str, list[str]]:
    """The class's grades in the import format of ``lms`` and the submissions it leaves out
    (not named by the platform's download, or, for Moodle, of another chapter).

    Canvas (Grades › Import): ``Student, ID, SIS User ID, SIS Login ID, Section``, then one
    column per chapter graded (``assignment`` or "Chapter NN", matched by title), a "Points
    Possible" row first; ID is the Canvas user id. Moodle (the assignment's "Upload grading
    worksheet"): ``Identifier`` ("Participant N"), ``Full name``, ``Grade``, ``Maximum Grade``,
    ``Last modified (grade)``, ``Feedback comments``: ONE assignment, so one chapter (``chapter``,
    else the one most submissions were graded as); a submission of another chapter is left out,
    never added. A student with several submissions of one chapter keeps the best.
    """
    if lms not in LMS:
        raise ValueError(f"--lms must be one of {', '.join(LMS)}, not {lms!r}")
    named, unnamed = [], []
    for r in records:
        who = lms_identity(r, lms)
        if who is None:
            unnamed.append(meta(r)["submission"])
        else:
            named.append((who, r))
    if lms == "moodle" and named:
        chapter = chapter or Counter(meta(r)["chapter"] or "?" for _, r in named).most_common(1)[0][0]
        unnamed += [meta(r)["submission"] for _, r in named if (meta(r)["chapter"] or "?") != chapter]
        named = [(who, r) for who, r in named if (meta(r)["chapter"] or "?") == chapter]
    best: dict[tuple[str, str], dict] = {}
    names: dict[str, str] = {}
    for who, r in named:
        names.setdefault(who[1], who[0])
        key = (who[1], meta(r)["chapter"] or "?")
        if key not in best or r["score"] > best[key]["score"]:
            best[key] = r
    chapters = sorted({c for _, c in best})
    maxima = {c: max(r["max_score"] for (_, k), r in best.items() if k == c) for c in chapters}
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    students = sorted(names, key=lambda i: (names[i].lower(), i))
    if lms == "canvas":
        titles = [assignment if assignment and len(chapters) == 1 else
                  f"{assignment or 'Chapter'} {c}" for c in chapters]
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *titles])
        writer.writerow(["Points Possible", "", "", "", "", *(maxima[c] for c in chapters)])
        for sid in students:
            writer.writerow([_csv_cell(names[sid]), sid, "", "", "", *(
                best[(sid, c)]["score"] if (sid, c) in best else "" for c in chapters)])
    else:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        writer.writerow(["Identifier", "Full name", "Grade", "Maximum Grade",
                         "Last modified (grade)", "Feedback comments"])
        for sid in students:
            (mine,) = [best[(sid, c)] for c in chapters if (sid, c) in best]
            feedback = "; ".join(
                f"{k} {v['name']} {points(v['score'])}/{points(v['max_score'])}"
                for k, v in sorted(meta(mine)["exercises"].items()))
            writer.writerow([f"Participant {sid}", _csv_cell(names[sid]), mine["score"],
                             maxima[chapters[0]], stamp, _csv_cell(feedback)])
    return buffer.getvalue(), unnamed


def _by_id(records: list[dict], submission: str) -> dict:
    return next(r for r in records if meta(r)["submission"] == submission)


def write_class(out: Path, records: list[dict], isolation: dict | None,
                seconds: float | None = None, jobs: int | None = None, *, html: bool = True,
                lms: str | None = None, assignment: str | None = None,
                chapter: str | None = None) -> str:
    """Write ``grades.csv``, ``summary.md`` and (``html``) ``summary.html``; with ``lms``,
    also ``grades-<lms>.csv`` in that LMS's import format. Returns the summary."""
    isolation = isolation or next((meta(r)["isolation"] for r in records
                                   if meta(r).get("isolation")), None)
    note = ""
    if lms and records:
        table, left_out = lms_csv(records, lms, assignment, chapter)
        _atomic_write(Path(out) / f"grades-{lms}.csv", table)
        unnamed = [m for m in left_out if lms_identity(_by_id(records, m), lms) is None]
        other = [m for m in left_out if m not in unnamed]
        note = (f"grades-{lms}.csv: the grades in {lms.capitalize()}'s import format, "
                f"{len(records) - len(unnamed)} of {len(records)} submission(s) named by "
                f"{lms.capitalize()}'s download." + (
                    f" Not named like one, so not in it: {', '.join(unnamed[:10])}"
                    + (f" and {len(unnamed) - 10} more" if len(unnamed) > 10 else "") + "."
                    if unnamed else "") + (
                    f" A Moodle worksheet is one assignment, so one chapter: {len(other)} "
                    f"submission(s) graded as another chapter are not in it "
                    f"({', '.join(other[:10])}" + (" ..." if len(other) > 10 else "") + ")."
                    if other else ""))
    summary = summary_text(records, isolation, seconds, jobs, note)
    if records:
        _atomic_write(Path(out) / "grades.csv", class_csv(records))
    _atomic_write(Path(out) / "summary.md", summary)
    if html:
        _atomic_write(Path(out) / "summary.html", summary_html(records, isolation, note))
    return summary
