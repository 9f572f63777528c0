"""The book's Validation page, written from the validation reports kept in the repository.

``coursekit validate`` writes ``_build/validate/report.json``; ``python benchmarks/pages.py
--record _build/validate/report.json --as NAME`` keeps a compact copy of it as
``benchmarks/validation/NAME.json`` (every run's verdict and seconds, every assertion's margins;
no local paths), and ``python benchmarks/pages.py`` writes ``book/validation.md`` from all of
them, beside the Performance page. A test regenerates the page and compares, so no figure on it
can drift from the reports.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAGE = ROOT / "book" / "validation.md"
FOLDER = "benchmarks/validation"
GENERATED = ("% Written by `python benchmarks/pages.py` from the reports in `benchmarks/validation/`: "
             "record a run there, never edit this page.")
EDITION_NAMES = {"instructor": "instructor", "student": "student"}
LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes")
TIGHTEST = 12  # assertions listed on the page; the rest are in the JSON


def report_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / FOLDER).glob("*.json"))


def _tight(row: dict, seeds: int = 5) -> bool:
    spread = row["max_margin"] - row["min_margin"]
    return len(row["seeds"]) >= seeds and (row["min_margin"] < 0 or row["min_margin"] < 0.1 * spread)


def compact(report: dict, name: str, modified: float | None = None) -> dict:
    """What the page and a maintainer need from a report, without its local paths: the run's
    setting, each notebook run's verdict, seconds and the last line of its failure, and each
    assertion's margin under every seed with the values at the tightest."""
    date = report.get("date") or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(modified or 0))
    runs = []
    for run in report["runs"]:
        failure = (run.get("failure") or "").strip().splitlines()
        runs.append({key: run[key] for key in ("notebook", "edition", "seed", "seconds",
                                               "cells_passed", "cells_failed", "cells_skipped")}
                    | {"ok": run["ok"], "failure": failure[-1][:300] if failure else ""})
    margins = []
    for row in report.get("margins", []):
        per_seed = {seed: round(v["margin"], 6) for seed, v in row["per_seed"].items()}
        tight = min(row["per_seed"].values(), key=lambda v: v["margin"])
        margins.append({"notebook": row["notebook"], "edition": row["edition"],
                        "assert": row["assert"], "seeds": row["seeds"],
                        "min_margin": row["min_margin"], "max_margin": row["max_margin"],
                        "margin_per_seed": per_seed, "values_at_smallest": tight["values"]})
    keep = ("profile", "seeds", "cell_timeout_s", "device", "torch", "python", "libraries",
            "commit", "total_seconds", "complete", "passed")
    return {"name": name, "date": date} | {k: report.get(k) for k in keep} | {
        "runs": runs, "margins": margins}


def record(report_path: Path, name: str, root: Path = ROOT) -> Path:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    out = root / FOLDER / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(compact(report, name, os.path.getmtime(report_path))), encoding="utf-8")
    return out


def dumps(kept: dict) -> str:
    """JSON with one line per key, and one line per run and per assertion: small, and a new
    report's diff shows what changed."""
    def one(value) -> str:
        return json.dumps(value, ensure_ascii=False)
    lines = ["{"]
    items = list(kept.items())
    for k, (key, value) in enumerate(items):
        end = "," if k < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f" {one(key)}: [")
            lines += [f"  {one(v)}{',' if j < len(value) - 1 else ''}" for j, v in enumerate(value)]
            lines.append(f" ]{end}")
        else:
            lines.append(f" {one(key)}: {one(value)}{end}")
    return "\n".join(lines + ["}"]) + "\n"


# ---------------------------------------------------------------------------------------------


def _versions(report: dict) -> str:
    libs = report.get("libraries") or {"torch": report.get("torch")}
    shown = [f"{name} {libs[name]}" for name in LIBRARIES if libs.get(name)]
    return ", ".join(shown) + f"; Python {report['python']}" if report.get("python") else ", ".join(shown)


def _seeds(seeds: list[int]) -> str:
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _editions(report: dict) -> list[str]:
    return sorted({run["edition"] for run in report["runs"]})


def _command(report: dict) -> str:
    editions = _editions(report)
    edition = "both" if len(editions) == 2 else editions[0] if editions else "both"
    seeds = report.get("seeds") or []
    fresh = seeds and min(seeds) >= 1000
    seed_arg = f"random:{len(seeds)}" if fresh else _seeds(seeds).replace("–", "-").replace(", ", ",")
    return (f"coursekit validate --profile {report['profile']} --seeds {seed_arg} "
            f"--edition {edition}")


def summary_rows(reports: list[tuple[str, dict]], url=lambda path: path) -> list[str]:
    lines = ["| run | profile, seeds | editions | device, versions | date, commit | result |",
             "| --- | --- | --- | --- | --- | --- |"]
    for source, r in reports:
        runs = r["runs"]
        passed = sum(run["ok"] for run in runs)
        fresh = r["seeds"] and min(r["seeds"]) >= 1000
        seeds = (f"{len(r['seeds'])} fresh draws ({_seeds(r['seeds'])})" if fresh else
                 f"seed{'s' if len(r['seeds']) > 1 else ''} {_seeds(r['seeds'])}")
        result = f"{passed} of {len(runs)} runs passed" + (
            "" if r.get("complete", True) else " (stopped before the end)")
        lines.append(f"| [`{r['name']}`]({url(source)}) | {r['profile']}, {seeds} | "
                     f"{', '.join(_editions(r))} | {r['device']}; {_versions(r)} | "
                     f"{r['date']}, `{r.get('commit') or '?'}` | {result} |")
    return lines


def notebook_rows(reports: list[tuple[str, dict]], notebooks: list[str]) -> list[str]:
    """Notebooks × runs: every run of the notebook in that report, per edition."""
    head = "| notebook | " + " | ".join(f"`{r['name']}`" for _, r in reports) + " |"
    lines = [head, "| --- |" + " --- |" * len(reports)]
    for nb in notebooks:
        cells = []
        for _, r in reports:
            said = []
            for edition in ("instructor", "student"):
                runs = [run for run in r["runs"] if run["notebook"] == nb and run["edition"] == edition]
                if not runs:
                    continue
                ok = sum(run["ok"] for run in runs)
                secs = [run["seconds"] for run in runs]
                time_said = (f"{secs[0]:.0f} s" if len(secs) == 1 else
                             f"{min(secs):.0f}–{max(secs):.0f} s")
                verdict = ("passed" if ok == len(runs) and len(runs) == 1 else
                           f"{ok} of {len(runs)} passed" if ok < len(runs) or len(runs) > 1 else "")
                if ok < len(runs):
                    verdict = f"**{verdict}**"
                said.append(f"{edition[0]}: {verdict}, {time_said}")
            cells.append("; ".join(said) or "not run")
        lines.append(f"| {nb} | " + " | ".join(cells) + " |")
    return lines


def failure_lines(reports: list[tuple[str, dict]]) -> list[str]:
    lines = []
    for _, r in reports:
        for run in r["runs"]:
            if not run["ok"]:
                lines.append(f"- `{r['name']}`, {run['notebook']} ({run['edition']}, seed "
                             f"{run['seed']}): {run['failure'] or 'failed'}")
    return lines


def tightest_rows(reports: list[tuple[str, dict]], seeds: int = 5) -> list[str]:
    """The assertions closest to failing over runs of ``seeds`` or more draws (one draw says
    nothing of the spread): those whose smallest margin is under a tenth of their spread first
    (‡), then the smallest margins relative to the compared value; each assertion once per run,
    at its tightest edition."""
    rows = {}
    for _, r in reports:
        for m in r["margins"]:
            if len(m["seeds"]) < seeds:
                continue
            values = [abs(v) for v in m["values_at_smallest"] if isinstance(v, (int, float))]
            scale = max(values) if values and max(values) > 0 else 1.0
            row = (not _tight(m, seeds), m["min_margin"] / scale, r["name"], m)
            key = (r["name"], m["notebook"], m["assert"])
            if key not in rows or row[:2] < rows[key][:2]:
                rows[key] = row
    if not rows:
        return [f"No kept report has an assertion under {seeds} or more seeds yet."]
    lines = ["| run | notebook | assertion | seeds | smallest margin | mean margin | spread | "
             "values at the smallest |", "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for flag, _, name, m in sorted(rows.values(), key=lambda row: row[:2])[:TIGHTEST]:
        text = m["assert"].replace("|", "\\|")
        shown = " ".join(f"{v:.4g}" if isinstance(v, (int, float)) else "?"
                         for v in m["values_at_smallest"])
        spread = m["max_margin"] - m["min_margin"]
        mean = sum(m["margin_per_seed"].values()) / len(m["margin_per_seed"])
        lines.append(f"| `{name}` | {m['notebook']} | `{text}` | {len(m['seeds'])} | "
                     f"{m['min_margin']:.4g}{'' if flag else ' ‡'} | {mean:.4g} | {spread:.4g} | "
                     f"{shown} |")
    return lines


def never_run(reports: list[tuple[str, dict]], notebooks: list[str]) -> list[str]:
    """Kinds of run no kept report covers, for the notebooks as they are now."""
    done = {(r["profile"], "gpu" if "cuda" in r["device"].lower() or "gpu" in r["device"].lower()
             else "cpu", run["edition"], run["notebook"])
            for _, r in reports for run in r["runs"]}
    lines = []
    for profile in ("quick", "full"):
        for device in ("cpu", "gpu"):
            for edition in ("instructor", "student"):
                missing = [nb for nb in notebooks if (profile, device, edition, nb) not in done]
                if not missing:
                    continue
                which = ("any notebook" if len(missing) == len(notebooks) else
                         ", ".join(missing))
                lines.append(f"- the {profile} profile on a {device.upper()}, {edition} edition: "
                             f"{which}")
    return lines


def render(reports: list[tuple[str, dict]], notebooks: list[str], url=lambda path: path) -> str:
    """The page, from (repository path, compact report) pairs; ``url`` makes a repository path
    a link (the repository's site in the book)."""
    lines = ["# Validation", "", GENERATED, "",
             "Does every chapter run, and does every result it asserts hold, on a CPU and on a "
             "GPU, in both editions, in both profiles (`quick` for a 2-core CPU, `full` with the "
             "longer budgets), under other draws of its random seeds and under the oldest and "
             "newest libraries the book supports? This page gives what the reports kept in "
             f"[`{FOLDER}/`]({url(FOLDER)}) say, one report per run. The history of earlier runs, "
             "failures and their causes is the maintainers' record, "
             f"[`benchmarks/HISTORY.md`]({url('benchmarks/HISTORY.md')}).", "",
             "```bash",
             "coursekit validate --seeds 0 --edition both          # what `pytest` runs on every commit",
             "coursekit validate --seeds random:10 --edition instructor  # fresh draws, printed to re-run",
             "coursekit validate --profile full                     # the longer budgets, on any device",
             "python benchmarks/pages.py --record _build/validate/report.json --as NAME",
             "```", ""]
    if not reports:
        return "\n".join(lines + ["No report is kept yet.", ""])
    lines += ["## The runs", ""] + summary_rows(reports, url) + [""]
    lines += ["Each run's command: " + "; ".join(f"`{r['name']}`: `{_command(r)}`"
                                                  for _, r in reports) + ".", ""]
    lines += ["## Every notebook", "",
              "Per run: i for the instructor edition, s for the student edition; the seconds a "
              "notebook took in that run (`validate --jobs` runs notebooks side by side, and "
              "other work may share the machine, so these are not its time alone; the "
              "Performance page has those).", ""]
    lines += notebook_rows(reports, notebooks) + [""]
    failures = failure_lines(reports)
    if failures:
        lines += ["### The failures", ""] + failures + [""]
    lines += ["## The tightest assertions", "",
              "Every numeric assertion's margin under each seed is in the reports. Below, over "
              "runs of five or more seeds, the closest to failing: first those whose smallest "
              "margin is under a tenth of how far the seeds move it (‡: a fresh draw may cross), "
              "then the smallest margins relative to the compared value.", ""]
    lines += tightest_rows(reports) + [""]
    missing = never_run(reports, notebooks)
    if missing:
        lines += ["## Not run", "", "No kept report covers these, for the notebooks as they are "
                  "now:", ""] + missing + [""]
    return "\n".join(lines).rstrip() + "\n"


def page_text(root: Path, url) -> str:
    reports = [(f"{FOLDER}/{p.name}", json.loads(p.read_text(encoding="utf-8")))
               for p in report_files(root)]
    reports.sort(key=lambda item: item[1]["date"])
    notebooks = sorted(p.stem for p in (root / "solutions").glob("*.ipynb"))
    return render(reports, notebooks, url)
