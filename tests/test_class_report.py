"""The class report of ``coursekit grade`` (issue 30): per exercise the distribution of scores, what
went wrong (the diagnoses the hints name, counted over the class, one anonymised example each),
exceptions grouped by type; ``summary.md`` and a self-contained ``summary.html``, opened in
headless Chromium; gradebook CSVs for Canvas and Moodle named from their downloads' file names.

The class is simulated in this process, without the sandboxed batch (its start-up costs more than
this whole module): 40 students of Chapter 2 whose exercise code is the suite's own mutants, a
function that raises, the untouched student edition or the reference, graded by ``run_suite``
(the verdicts and hints ``coursekit grade`` gives) and written by the batch's report writer.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil

import pytest
import torch

from coursekit.grading import report
from coursekit.grading.registry import all_suites
from coursekit.grading.suite import run_suite

SUITES = all_suites()
CH02 = [s for s in SUITES.values() if s.chapter == "02"]


def _todo(*args, **kwargs):
    raise NotImplementedError("Exercise 02.2")


def _type_error(scores, mask=None):
    return torch.softmax(scores, dim=-1) / "1"  # TypeError: a tensor divided by a string


def _mutant(suite_name: str, mutant: str):
    return next(m.fn for m in SUITES[suite_name].mutants if m.name == mutant)


SCORE, SOFTMAX, CONTEXT = "additive_score", "masked_softmax", "context_vector"
# (how many students, what they wrote for 02.2, for 02.3); 02.1 is right for everyone
CLASS = [
    (12, ("softmax over the batch axis", None), ("summed over the feature axis", None)),
    (7, ("inverted mask", None), (None, None)),
    (3, (None, _type_error), (None, None)),
    (4, (None, _todo), (None, _todo)),
    (14, (None, None), ("plain average of encoder states", None)),
]
N = sum(n for n, *_ in CLASS)
TOTAL = sum(s.points for s in CH02)
COMMENT = "# written by Jane Doe, student 31415"


@pytest.fixture(scope="module")
def records():
    """The results.json of each of the 40 students (Canvas download names), as the batch
    writes them; a result per distinct implementation is graded once and shared."""
    cache = {}

    def graded(suite_name: str, choice) -> report.SuiteResult:
        mutant, fn = choice
        suite = SUITES[suite_name]
        fn = _mutant(suite_name, mutant) if mutant else fn or suite.reference
        if (suite_name, fn) not in cache:
            cache[(suite_name, fn)] = run_suite(suite, fn)
        return cache[(suite_name, fn)]

    out, student = [], 0
    for count, softmax, context in CLASS:
        for _ in range(count):
            student += 1
            result = report.SubmissionResult(
                id=f"s{student}", origin=f"/downloads/doe{student}jane_{1000 + student}_"
                                         f"{9000 + student}_02a_attention_scores.ipynb",
                filename="02a_attention_scores.ipynb", sha256="0" * 64, chapter="02",
                fingerprint="f", exercises=[graded(SCORE, (None, None)),
                                            graded(SOFTMAX, softmax), graded(CONTEXT, context)],
                sources={SOFTMAX: f"{COMMENT}\ndef {SOFTMAX}(scores, mask=None):\n"
                                  f"    return scores  {COMMENT}\n" + "\n" * student})
            out.append(report.results_json(result))
    return out


@pytest.fixture(scope="module")
def written(records, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    summary = report.write_class(out, records, None, lms="canvas", assignment="Attention")
    return out, summary


def test_what_went_wrong_is_counted_over_the_class(written):
    _, summary = written
    hint = next(m.hint for m in SUITES[SOFTMAX].mutants
                if m.name == "softmax over the batch axis")
    assert f"**12 of {N}: softmax over the batch axis.** {report.plain(hint)}" in summary
    assert f"**7 of {N}: inverted mask.**" in summary
    assert f"**3 of {N}: raises TypeError.**" in summary
    assert f"**12 of {N}: summed over the feature axis.**" in summary
    assert f"**14 of {N}: plain average of encoder states.**" in summary
    # exceptions grouped by type; NotImplementedError (not attempted) is not an exception
    assert f"Exceptions, by type: TypeError in 3 of {N} (e.g. `in the case " in summary
    assert "NotImplementedError in" not in summary
    # nothing went wrong in 02.1, so it gets no section
    assert "### 02.1 " not in summary and "### 02.2 " in summary and "### 02.3 " in summary


def test_the_score_distribution_per_exercise(records, written):
    _, summary = written
    stats = {s.key: s for s in report.exercise_stats(records)}
    # 02.2: the 26 wrong or untouched get less than full marks, the 14 right get them
    assert sum(stats["02.2"].bins[:5]) == N - 14 and stats["02.2"].bins[5] == 14
    assert stats["02.2"].bins[0] >= 4 + 3  # untouched, raising
    assert stats["02.1"].bins == [0, 0, 0, 0, 0, N]
    assert f"| 02.1 {SCORE} | 0 | 0 | 0 | 0 | 0 | {N} |" in summary


def test_the_example_is_anonymised(written):
    out, summary = written
    assert "Jane Doe" not in summary and "31415" not in summary
    assert f"def {SOFTMAX}(scores, mask=None):" in summary  # the code itself is shown
    assert "doe1jane" not in summary and "1001" not in (out / "summary.html").read_text()


def test_canvas_gradebook_csv(records, written):
    out, _ = written
    rows = list(csv.reader(io.StringIO((out / "grades-canvas.csv").read_text())))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Attention"]
    assert rows[1][0] == "Points Possible" and float(rows[1][5]) == TOTAL
    by_id = {r[1]: r for r in rows[2:]}
    assert len(by_id) == N
    assert by_id["1040"][0] == "doe40jane"
    assert float(by_id["1040"][5]) == records[39]["score"] < TOTAL
    # student 23 left 02.2 and 02.3 untouched and wrote 02.1 right
    assert float(by_id["1023"][5]) == SUITES[SCORE].points


def _origin(record: dict, origin: str, submission: str | None = None) -> dict:
    """The record as if it had come from another file."""
    data = dict(report.meta(record), origin=origin,
                submission=submission or report.meta(record)["submission"])
    return dict(record, extra_data={"coursekit": data})


def test_moodle_grading_worksheet_csv(records, tmp_path):
    moodle = [_origin(r, f"subs/Student {i}_{500 + i}_assignsubmission_file_/03_x.ipynb")
              for i, r in enumerate(records)]
    summary = report.write_class(tmp_path, moodle, None, html=False, lms="moodle")
    assert f"{N} of {N} submission(s) named by Moodle's download" in summary
    rows = list(csv.DictReader(io.StringIO((tmp_path / "grades-moodle.csv").read_text())))
    assert list(rows[0]) == ["Identifier", "Full name", "Grade", "Maximum Grade",
                             "Last modified (grade)", "Feedback comments"]
    assert len(rows) == N
    row = next(r for r in rows if r["Identifier"] == "Participant 522")
    assert row["Full name"] == "Student 22"
    assert float(row["Grade"]) == records[22]["score"] and float(row["Maximum Grade"]) == TOTAL
    assert f"02.2 {SOFTMAX} 0/3" in row["Feedback comments"]  # left untouched
    # Canvas's names are not Moodle's: none of the Canvas class is in a Moodle worksheet
    _, unnamed = report.lms_csv(records, "moodle")
    assert len(unnamed) == N


@pytest.mark.parametrize("origin, lms, expected", [
    ("dl/doejane_LATE_123_456_03_self_attention.ipynb", "canvas", ("doejane", "123")),
    ("dl.zip:smithbob_77_88_03.ipynb", "canvas", ("smithbob", "77")),
    ("subs/Jane Doe_1234567_assignsubmission_file_/03_self_attention.ipynb", "moodle",
     ("Jane Doe", "1234567")),
    ("subs/Participant_87681_assignsubmission_file_03.ipynb", "moodle", ("Participant", "87681")),
    ("subs/alice.ipynb", "canvas", None),
    ("subs/alice.ipynb", "moodle", None),
])
def test_student_identity_from_the_lms_download_names(origin, lms, expected):
    assert report.lms_identity(origin, lms) == expected


def test_unnamed_submissions_are_listed_not_guessed(records, tmp_path):
    stray = _origin(records[0], "subs/alice.ipynb", "alice")
    summary = report.write_class(tmp_path, [*records, stray], None, html=False, lms="canvas")
    assert f"{N} of {N + 1} submission(s) named by Canvas's download" in summary
    assert "Not named like one, so not in it: alice." in summary
    assert not (tmp_path / "summary.html").exists()


# ----------------------------------------------------------------------------- in a browser


def _chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser")
                 if (found := shutil.which(name))), None)


@pytest.mark.skipif(os.environ.get("COURSEKIT_SKIP_BROWSER") == "1" or _chromium() is None,
                    reason="needs Chromium (`sudo apt-get install chromium`); "
                           "COURSEKIT_SKIP_BROWSER=1 skips it")
def test_summary_html_opens_offline_in_chromium(written):
    from playwright.sync_api import sync_playwright

    out, _ = written
    page_url = (out / "summary.html").as_uri()
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), headless=True,
                                    args=["--no-sandbox", "--disable-gpu",
                                          "--disable-background-networking"])
        try:
            context = browser.new_context()

            def route(r):
                if r.request.url == page_url or r.request.url.startswith("data:"):
                    r.continue_()
                else:
                    problems.append(f"external request: {r.request.url}")
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and problems.append(m.text))
            page.on("pageerror", lambda err: problems.append(f"JavaScript error: {err}"))
            page.goto(page_url, wait_until="load")
            images = page.evaluate("""() => Array.from(document.images).map(
                i => [i.alt, i.complete && i.naturalWidth > 0])""")
            text = page.inner_text("body")
        finally:
            browser.close()
    assert not problems, problems
    assert len(images) == len(CH02) and all(ok for _, ok in images), images
    assert re.search(rf"12 of {N}: softmax over the batch axis\.", text)
    assert f"TypeError: 3 of {N}" in text
