"""The Performance page is written from the benchmarks' JSON (`python benchmarks/pages.py`): the
committed page must be exactly what the committed JSON gives, so no figure on it can drift."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("benchmark_pages", ROOT / "benchmarks" / "pages.py")
pages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pages)

RESULTS = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))
URL = "https://example.org/blob/main/benchmarks/HISTORY.md"


def test_the_committed_page_is_what_the_committed_json_gives():
    assert pages.PAGE.read_text(encoding="utf-8") == pages.page_text(), (
        "book/performance.md differs from what benchmarks/results*.json give: run "
        "`python benchmarks/pages.py` (never edit the page by hand)")
    assert pages.main(["--check"]) == 0


def test_the_page_says_where_each_table_comes_from_and_links_the_maintainers_record():
    text = pages.PAGE.read_text(encoding="utf-8")
    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]["url"]
    assert f"({repo}/blob/" in text and "benchmarks/HISTORY.md" in text
    assert (ROOT / "benchmarks" / "HISTORY.md").exists()
    for part in ("attention", "memory", "generation", "models", "chapters", "grading"):
        assert f"`python benchmarks/run.py --only {part}`" in text
        machine = RESULTS["measured"][part]
        assert f"*Measured on {machine['date']}, CPU: {machine['cpus']} cores" in text
    if "suite" in RESULTS:
        assert f"`{pages.SUITE_COMMAND}`" in text
        assert f"*Measured on {RESULTS['measured']['suite']['date']}" in text
    assert text.count("*Measured on") == 6 + ("suite" in RESULTS)


def test_without_json_the_page_has_no_figure_at_all():
    """Every figure comes from the JSON: the page's own words carry none."""
    text = pages.render([], URL)
    assert not re.findall(r"\d", text), re.findall(r".{20}\d.{20}", text)
    assert "No current GPU figures" in text


def test_a_figure_changed_in_the_json_changes_on_the_page():
    results = copy.deepcopy(RESULTS)
    results["attention"][0]["explicit / F.sdpa"] = 9.87654
    results["generation"][-1]["speed-up"] = 12.34
    results["grading"]["submissions per second"] = 77.7
    before = pages.render([("benchmarks/results.json", RESULTS)], URL)
    after = pages.render([("benchmarks/results.json", results)], URL)
    assert "| 9.88 |" in after and "| 9.88 |" not in before
    assert "| 12.3× |" in after
    assert "| submissions per second | 77.7 |" in after


def test_a_gpu_run_is_shown_with_its_device_and_versions(tmp_path):
    for name in ("_config.yml",):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "chapters.py", tmp_path / "benchmarks" / "chapters.py")
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "01_rnn_recap.ipynb").write_text("{}")
    gpu = {"platform": "Linux", "python": "3.12.3", "torch": "2.13.0+cu130", "cpus": 16,
           "torch_threads": 16, "date": "2026-12-24 10:00 UTC", "gpu": "NVIDIA H200",
           "libraries": {"transformers": "5.23.0", "peft": "0.21.2"}}
    cuda = {"machine": gpu, "measured": {"attention": gpu}, "attention": RESULTS["attention"][:1]}
    (tmp_path / "benchmarks" / "results.json").write_text(json.dumps(RESULTS))
    (tmp_path / "benchmarks" / "results-cuda.json").write_text(json.dumps(cuda))
    text = pages.page_text(tmp_path)
    assert "*Measured on 2026-12-24 10:00 UTC, GPU: NVIDIA H200, 16 PyTorch threads" in text
    assert "transformers 5.23.0, peft 0.21.2. From `benchmarks/results-cuda.json`" in text
    assert "`python benchmarks/run.py --only attention --out benchmarks/results-cuda.json`" in text
    assert "No current GPU figures" not in text
    assert "`02a_bahdanau_attention`" not in text  # the chapters now in solutions/ are this root's
    assert "`01_rnn_recap`" not in text and "01_rnn_recap | instructor" in text


def test_a_part_without_its_own_record_says_so():
    legacy = {k: v for k, v in RESULTS.items() if k != "measured"}
    text = pages.render([("benchmarks/results.json", legacy)], URL)
    assert text.count("*Measured on: not recorded in `benchmarks/results.json`.") == 6 + ("suite" in RESULTS)


def test_the_suites_breakdown_is_kept_in_the_json_and_shown_from_it(tmp_path):
    spec = importlib.util.spec_from_file_location("suite_breakdown",
                                                  ROOT / "benchmarks" / "suite_breakdown.py")
    breakdown = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(breakdown)
    xml = tmp_path / "pytest.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="2" tests="5" '
        'time="1234.5">'
        '<testcase classname="tests.test_ch03" name="a" time="1.25"/>'
        '<testcase classname="tests.test_grader_batch" name="b" time="40.5"/>'
        '<testcase classname="solutions.01_rnn_recap.ipynb" name="Cell 1" time="30.0"/>'
        '<testcase classname="solutions.01_rnn_recap.ipynb" name="Cell 2" time="7.5"/>'
        '<testcase classname="notebooks.01_rnn_recap.ipynb" name="Cell 1" time="33.0"/>'
        "</testsuite></testsuites>", encoding="utf-8")
    out = tmp_path / "results.json"
    out.write_text(json.dumps({"grading": RESULTS["grading"]}), encoding="utf-8")
    assert breakdown.main([str(xml), "--record", str(out)]) == 0
    kept = json.loads(out.read_text(encoding="utf-8"))
    assert kept["grading"] == RESULTS["grading"], "recording the suite keeps the other parts"
    assert kept["suite"]["notebooks"] == [{"notebook": "01_rnn_recap", "instructor (s)": 37.5,
                                           "student (s)": 33.0}]
    text = pages.render([("benchmarks/results.json", kept)], URL)
    assert "1,234 s of wall time, 5 tests, 1 failed, 0 errors, 2 skipped" in text
    assert "| grader | 1 | 40 |" in text and "| nbval, instructor edition | 2 | 38 |" in text
    assert "| sum over both workers | 5 | 112 |" in text
    assert f"*Measured on {kept['measured']['suite']['date']}" in text
    assert "No figures in the repository's JSON" not in text
    assert "| 01_rnn_recap | 38 | 33 |" in text  # 37.5 rounds to even


def test_the_validation_page_is_current_tables_and_links_the_record():
    text = (ROOT / "book" / "validation.md").read_text(encoding="utf-8")
    repo = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]
    assert f"]({repo['url']}/blob/{repo['branch']}/benchmarks/HISTORY.md)" in text
    assert not re.search(r"^#+ \d{4}-\d\d-\d\d", text, re.M), "dated entries belong in the record"
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    assert "book/validation" in toc and "book/performance" in toc and "HISTORY" not in toc


# ----------------------------------------------------------------------------- the Validation page

REPORT = {  # what coursekit validate writes, cut to two runs and one assertion
    "profile": "quick", "seeds": [1000, 1001], "cell_timeout_s": 300,
    "device": "cpu: 2 cores, x86_64", "torch": "2.13.0+cpu", "python": "3.11.7",
    "libraries": {"torch": "2.13.0", "transformers": "5.23.0", "peft": "0.21.2",
                  "bitsandbytes": "0.50.2"},
    "commit": "abc1234", "date": "2026-12-02 04:00 UTC", "total_seconds": 99.0,
    "complete": True, "passed": False,
    "runs": [
        {"notebook": "01_rnn_recap", "edition": "instructor", "profile": "quick", "seed": 1000,
         "device": "cpu", "torch": "2.13.0", "seconds": 41.25, "cells_passed": 20,
         "cells_failed": 0, "cells_skipped": 0, "failure": "",
         "assert_log": "/tmp/secret/asserts/x.jsonl", "ok": True},
        {"notebook": "01_rnn_recap", "edition": "instructor", "profile": "quick", "seed": 1001,
         "device": "cpu", "torch": "2.13.0", "seconds": 43.5, "cells_passed": 19,
         "cells_failed": 1, "cells_skipped": 0,
         "failure": "Cell 7: ...\nAssertionError: the LSTM should beat the RNN",
         "assert_log": "/tmp/secret/asserts/y.jsonl", "ok": False}],
    "margins": [{"notebook": "01_rnn_recap", "edition": "instructor", "assert": "acc > 0.9",
                 "seeds": [1000, 1001], "min_margin": -0.05, "max_margin": 0.0625,
                 "per_seed": {"1000": {"margin": 0.0625, "values": [0.9625, 0.9], "ops": [">"]},
                              "1001": {"margin": -0.05, "values": [0.85, 0.9], "ops": [">"]}}}],
}


def _root_with(tmp_path, reports):
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "solutions").mkdir(exist_ok=True)
    for nb in ("01_rnn_recap", "02a_bahdanau_attention"):
        (tmp_path / "solutions" / f"{nb}.ipynb").write_text("{}")
    for name, report in reports.items():
        path = tmp_path / f"{name}-report.json"
        path.write_text(json.dumps(report))
        pages.validation_page.record(path, name, tmp_path)
    return tmp_path


def test_the_committed_validation_page_is_what_the_kept_reports_give():
    assert pages.validation_page.PAGE.read_text(encoding="utf-8") == pages.validation_text(), (
        "book/validation.md differs from what benchmarks/validation/*.json give: run "
        "`python benchmarks/pages.py` (never edit the page by hand)")


def test_a_kept_report_has_no_local_paths_and_every_verdict(tmp_path):
    root = _root_with(tmp_path, {"fresh-seeds": REPORT})
    kept = (root / "benchmarks" / "validation" / "fresh-seeds.json").read_text()
    assert "/tmp/secret" not in kept
    data = json.loads(kept)
    assert [r["ok"] for r in data["runs"]] == [True, False]
    assert data["runs"][1]["failure"] == "AssertionError: the LSTM should beat the RNN"
    assert data["margins"][0]["margin_per_seed"] == {"1000": 0.0625, "1001": -0.05}


def test_the_validation_page_shows_each_reports_figures(tmp_path):
    root = _root_with(tmp_path, {"fresh-seeds": REPORT})
    text = pages.validation_text(root)
    assert "quick, 2 fresh draws (1000, 1001)" in text
    assert "torch 2.13.0, transformers 5.23.0, peft 0.21.2, bitsandbytes 0.50.2" in text
    assert "2026-12-02 04:00 UTC, `abc1234` | 1 of 2 runs passed |" in text
    assert "| 01_rnn_recap | i: **1 of 2 passed**, 41–44 s |" in text
    assert "| 02a_bahdanau_attention | not run |" in text
    assert "AssertionError: the LSTM should beat the RNN" in text
    assert "No kept report gives an assertion 5 or more draws yet." in text  # two draws
    kept = json.loads((root / "benchmarks" / "validation" / "fresh-seeds.json").read_text())
    rows = pages.validation_page.pooled_margins([("x", kept)])
    assert "| 01_rnn_recap | `acc > 0.9` | 0 | – | – | 1 of 2 | -0.05 ‡ | 0.85 0.9 |" in "\n".join(
        pages.validation_page.tightest_rows(rows, draws=2))
    assert "the full profile on a GPU, student edition: any notebook" in text
    changed = json.loads(json.dumps(REPORT))
    changed["runs"][0]["seconds"] = 12.0
    assert "i: **1 of 2 passed**, 12–44 s" in pages.validation_text(
        _root_with(tmp_path, {"fresh-seeds": changed}))


def test_without_reports_the_validation_page_has_no_figure(tmp_path):
    text = pages.validation_page.render([], ["01_rnn_recap"])
    lines = [line for line in text.splitlines()
             if not line.startswith(("coursekit", "python benchmarks"))]  # commands' seeds
    assert not re.findall(r"\d", "\n".join(lines).replace("01_rnn_recap", "").replace("2-core", "")), text
    assert "No report is kept yet." in text


def test_margins_are_pooled_over_runs_of_the_current_code_only(tmp_path):
    """Tuning seeds and fresh draws apart; a run of other code (another digest) left out; a draw
    at margin zero held only if its run passed."""
    vp = pages.validation_page
    tuning = json.loads(json.dumps(REPORT))
    tuning["seeds"] = [0, 1]
    for run, seed, digest in zip(tuning["runs"], (0, 1), ("aaa", "bbb"), strict=True):
        run["seed"], run["code_digest"], run["ok"] = seed, digest, True
    tuning["margins"][0]["per_seed"] = {
        "0": {"margin": 0.1, "values": [1.0, 0.9], "ops": [">"]},
        "1": {"margin": 0.3, "values": [1.2, 0.9], "ops": [">"]}}
    fresh = json.loads(json.dumps(REPORT))
    for run in fresh["runs"]:
        run["code_digest"] = "aaa"
    fresh["margins"][0]["per_seed"]["1001"] = {"margin": 0.0, "values": [0.9, 0.9], "ops": [">"]}
    fresh["margins"][0]["min_margin"] = 0.0  # in the run that failed
    root = _root_with(tmp_path, {"tuning": tuning, "fresh": fresh})
    reports = [(p.name, json.loads(p.read_text())) for p in vp.report_files(root)]
    current = {("01_rnn_recap", "instructor"): "aaa"}
    [row] = vp.pooled_margins(reports, current)
    assert [d["seed"] for d in row["tuning"]] == [0]      # seed 1 ran other code
    assert (row["fresh_held"], row["fresh_draws"]) == (1, 2)
    assert row["tuning_mean"] == 0.1 and row["smallest"] == 0.0
    assert vp.pooled_margins(reports, {("01_rnn_recap", "instructor"): "ccc"}) == []
    assert len(vp.pooled_margins(reports)[0]["tuning"]) == 2  # no filter: every run
    text = vp.margins_text(reports, current)
    assert "| 01_rnn_recap | `acc > 0.9` | 1 | 0.1 | 0 | 1 of 2 | 0 ‡ | 0.9 0.9 |" in text


def test_a_kept_report_knows_the_code_each_run_ran():
    """Every kept report's runs carry the digest of their notebook's code (recorded by
    coursekit validate, or recovered from git for older reports), or say it is unknown."""
    from coursekit.validate import code_digest

    vp = pages.validation_page
    for path in vp.report_files():
        kept = json.loads(path.read_text(encoding="utf-8"))
        assert all("code_digest" in run for run in kept["runs"]), path.name
    assert code_digest(ROOT / "solutions" / "01_rnn_recap.ipynb") == vp.current_digests()[
        ("01_rnn_recap", "instructor")]
