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
import subprocess
import time
from pathlib import Path

from coursekit.validate import FRESH, code_digest, code_digest_of  # FRESH: fresh draws from here up

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAGE = ROOT / "book" / "validation.md"
FOLDER = "benchmarks/validation"
GENERATED = ("% Written by `python benchmarks/pages.py` from the reports in `benchmarks/validation/`: "
             "record a run there, never edit this page.")
EDITION_NAMES = {"instructor": "instructor", "student": "student"}
LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes")
TIGHTEST = 12  # assertions listed on the page; the rest are in MARGINS
MARGINS = ROOT / FOLDER / "margins.md"  # every assertion, pooled over runs of the current code
EDITION_DIRS = {"instructor": "solutions", "student": "notebooks"}


def report_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / FOLDER).glob("*.json"))


def compact(report: dict, name: str, modified: float | None = None, root: Path = ROOT) -> dict:
    """What the page and a maintainer need from a report, without its local paths: the run's
    setting, each notebook run's verdict, seconds and the last line of its failure, and each
    assertion's margin under every seed with the values at the tightest."""
    date = report.get("date") or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(modified or 0))
    runs = []
    for run in report["runs"]:
        failure = (run.get("failure") or "").strip().splitlines()
        runs.append({key: run[key] for key in ("notebook", "edition", "seed", "seconds",
                                               "cells_passed", "cells_failed", "cells_skipped")}
                    | {"ok": run["ok"], "failure": failure[-1][:300] if failure else "",
                       "code_digest": run.get("code_digest")
                       or digest_at(report.get("commit"), run["notebook"], run["edition"], root)})
    margins = []
    for row in report.get("margins", []):
        per_seed = {seed: round(v["margin"], 6) for seed, v in row["per_seed"].items()}
        tight = min(row["per_seed"].values(), key=lambda v: v["margin"])
        margins.append({"notebook": row["notebook"], "edition": row["edition"],
                        "assert": row["assert"], "seeds": row["seeds"],
                        "min_margin": row["min_margin"], "max_margin": row["max_margin"],
                        "margin_per_seed": per_seed, "values_at_smallest": tight["values"]})
    keep = ("profile", "seeds", "cell_timeout_s", "device", "torch", "python", "libraries",
            "commit", "total_seconds", "complete", "passed", "command")
    return {"name": name, "date": date} | {k: report.get(k) for k in keep} | {
        "runs": runs, "margins": margins}


def digest_at(commit: str | None, notebook: str, edition: str, root: Path = ROOT) -> str | None:
    """The code digest of a notebook at a commit, for reports written before runs recorded it;
    None where git cannot say (no commit, or a commit with uncommitted changes to notebooks)."""
    if not commit:
        return None
    path = f"{EDITION_DIRS[edition]}/{notebook}.ipynb"
    head = commit.rstrip("+")
    try:
        if commit.endswith("+"):  # the tree had changes: only a notebook unchanged since counts
            changed = subprocess.run(["git", "diff", "--quiet", head, "--", path], cwd=root,
                                     capture_output=True, timeout=30)
            if changed.returncode != 0:
                return None
        text = subprocess.run(["git", "show", f"{head}:{path}"], cwd=root, capture_output=True,
                              text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return code_digest_of(text)


def record(report_path: Path, name: str, root: Path = ROOT) -> Path:
    report = json.loads(report_path.read_text(encoding="utf-8"))
    out = root / FOLDER / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(compact(report, name, os.path.getmtime(report_path), root)),
                   encoding="utf-8")
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
    tuning, fresh = [s for s in seeds if s < FRESH], [s for s in seeds if s >= FRESH]
    if tuning and fresh:
        return f"{_seeds(tuning)} and {len(fresh)} fresh draws ({_seeds(fresh)})"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _editions(report: dict) -> list[str]:
    return sorted({run["edition"] for run in report["runs"]})


def _command(report: dict) -> str:
    if report.get("command"):  # a report kept from several runs says how they were made
        return report["command"]
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


# ---------------------------------------------------------------------------------------------
# every assertion, pooled over the kept reports


def current_digests(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """(notebook, edition) -> the code digest of the notebook as it is now."""
    return {(path.stem, edition): code_digest(path) for edition, folder in EDITION_DIRS.items()
            for path in sorted((root / folder).glob("*.ipynb"))}


def pooled_margins(reports: list[tuple[str, dict]],
                   current: dict[tuple[str, str], str] | None = None) -> list[dict]:
    """Per (notebook, assertion): its margin under every draw of every kept report, both
    editions, split into tuning seeds (below FRESH) and fresh draws; with ``current`` (code
    digests), only the runs of a notebook's current code. A draw held when its margin is
    positive, or zero in a run that passed."""
    rows: dict[tuple[str, str], dict] = {}
    for _, r in reports:
        runs = {(run["notebook"], run["edition"], str(run["seed"])): run for run in r["runs"]}
        for m in r["margins"]:
            row = None
            for seed, margin in m["margin_per_seed"].items():
                run = runs.get((m["notebook"], m["edition"], seed), {})
                if current is not None and (not run.get("code_digest") or run["code_digest"]
                                            != current.get((m["notebook"], m["edition"]))):
                    continue
                row = row or rows.setdefault((m["notebook"], m["assert"]), {
                    "notebook": m["notebook"], "assert": m["assert"], "tuning": [], "fresh": [],
                    "smallest": None, "values_at_smallest": None})
                held = margin > 0 or (margin == 0 and run.get("ok", False))
                row["fresh" if int(seed) >= FRESH else "tuning"].append(
                    {"run": r["name"], "edition": m["edition"], "seed": int(seed), "margin": margin,
                     "held": held})
                if row["smallest"] is None or margin < row["smallest"]:  # a report keeps the
                    row["smallest"] = margin                            # values at its tightest
                    tightest = min(m["margin_per_seed"].values())  # the seed the values are of
                    row["values_at_smallest"] = m["values_at_smallest"] if margin == tightest else None
    out = []
    for row in rows.values():
        every = [d["margin"] for d in row["tuning"] + row["fresh"]]
        tuning = [d["margin"] for d in row["tuning"]]
        row |= {"draws": len(every), "spread": max(every) - min(every),
                "tuning_mean": sum(tuning) / len(tuning) if tuning else None,
                "tuning_spread": max(tuning) - min(tuning) if tuning else None,
                "tuning_seeds": sorted({d["seed"] for d in row["tuning"]}),
                "fresh_held": sum(d["held"] for d in row["fresh"]), "fresh_draws": len(row["fresh"])}
        row["tight"] = row["smallest"] < 0 or row["smallest"] < 0.1 * row["spread"]
        out.append(row)
    return out


def _relative(row: dict) -> float:
    values = [abs(v) for v in row["values_at_smallest"] or [] if isinstance(v, (int, float))]
    return row["smallest"] / (max(values) if values and max(values) > 0 else 1.0)


def _margin_row(row: dict) -> str:
    text = row["assert"].replace("|", "\\|")
    shown = " ".join(f"{v:.4g}" if isinstance(v, (int, float)) else "?"
                     for v in row["values_at_smallest"] or []) or "–"
    mean = "–" if row["tuning_mean"] is None else f"{row['tuning_mean']:.4g}"
    spread = "–" if row["tuning_spread"] is None else f"{row['tuning_spread']:.4g}"
    fresh = f"{row['fresh_held']} of {row['fresh_draws']}" if row["fresh_draws"] else "–"
    return (f"| {row['notebook']} | `{text}` | {len(row['tuning'])} | {mean} | {spread} | {fresh} | "
            f"{row['smallest']:.4g}{' ‡' if row['tight'] else ''} | {shown} |")


MARGIN_HEAD = ["| notebook | assertion | tuning draws | mean margin, tuning | spread, tuning | "
               "fresh draws held | smallest margin, all draws | values at the smallest |",
               "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]


def tightest_rows(rows: list[dict], count: int = TIGHTEST, draws: int = 5) -> list[str]:
    """The assertions closest to failing among those with ``draws`` or more draws: those whose
    smallest margin is under a tenth of their spread first (‡), then the smallest margins
    relative to the compared values."""
    rows = [row for row in rows if row["draws"] >= draws]
    if not rows:
        return [f"No kept report gives an assertion {draws} or more draws yet."]
    rows.sort(key=lambda row: (not row["tight"], _relative(row)))
    return MARGIN_HEAD + [_margin_row(row) for row in rows[:count]]


def margins_text(reports: list[tuple[str, dict]], current: dict[tuple[str, str], str] | None) -> str:
    """benchmarks/validation/margins.md: every current assertion, pooled over the kept reports."""
    rows = sorted(pooled_margins(reports, current), key=lambda r: (r["notebook"], r["assert"]))
    lines = ["# Every assertion's margins, over the kept reports", "",
             "<!-- Written by `python benchmarks/pages.py` from the reports beside this file: "
             "record a run, never edit this file. -->", "",
             "Every numeric assertion the notebooks make now, with its margin (how far the "
             "compared quantity stayed from its bound) under every draw of the kept reports, both "
             "editions, counting only runs of the notebook's current code (the code digest each "
             "run records). "
             f"Tuning draws are seeds below {FRESH} (the seeds thresholds were chosen on); fresh "
             f"draws are seeds from {FRESH} up, drawn at random. ‡: the smallest margin is under "
             "a tenth of the spread over all draws.", ""]
    if not rows:
        return "\n".join(lines + ["No kept report yet.", ""])
    return "\n".join(lines + MARGIN_HEAD + [_margin_row(row) for row in rows]) + "\n"


def render(reports: list[tuple[str, dict]], notebooks: list[str], url=lambda path: path,
           current: dict[tuple[str, str], str] | None = None) -> str:
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
    rows = pooled_margins(reports, current)
    fresh = sum(row["fresh_draws"] for row in rows)
    held = sum(row["fresh_held"] for row in rows)
    tuning = sorted({seed for row in rows for seed in row["tuning_seeds"]})
    tight = sum(row["tight"] and row["draws"] >= 5 for row in rows)
    lines += ["## The tightest assertions", "",
              f"The notebooks' {len(rows)} numeric assertions as the kept reports measured them "
              "on the notebooks' current code (a run of older code does not count), pooled over "
              f"the reports and both editions: each one's margin under tuning seeds "
              f"({_seeds(tuning)}), the draws its threshold was chosen on, and under fresh draws. "
              f"Under fresh draws, {held} of {fresh} checks held. {tight} assertions with five or "
              "more draws have a smallest margin under a tenth of their spread (‡: another draw "
              f"may cross). Below, the {TIGHTEST} closest to failing; every assertion is in "
              f"[`{FOLDER}/margins.md`]({url(FOLDER + '/margins.md')}).", ""]
    lines += tightest_rows(rows) + [""]
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
    return render(reports, notebooks, url, current_digests(root))


def margins_file_text(root: Path) -> str:
    reports = [(f"{FOLDER}/{p.name}", json.loads(p.read_text(encoding="utf-8")))
               for p in report_files(root)]
    reports.sort(key=lambda item: item[1]["date"])
    return margins_text(reports, current_digests(root))
