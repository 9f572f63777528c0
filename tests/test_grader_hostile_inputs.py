"""The grader under hostile and careless input, round three (issue 47): every submission gets a
result, no credit is borrowed or misrouted, no student text is rendered.

One batch grades a folder holding each kind of file (a class of input each, not one example),
next to honest controls that must keep full marks. The LMS and reference rules are also checked
directly, over every exercise of the book, where a batch would only try one.
"""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from test_grader_hostile import LSTM, RNN  # a correct Chapter 1, the first round's

from coursekit.concepts import grade_sources, read_answers
from coursekit.grading import report
from coursekit.grading.batch import Limits, grade
from coursekit.grading.cells import book_order, load_exercise, reachable, usable_provided
from coursekit.grading.registry import all_suites
from coursekit.grading.suite import run_suite

ROOT = Path(__file__).resolve().parents[1]
SUITES = all_suites()
LIMITS = Limits(timeout=60, case_timeout=10, memory_mib=1536, output_kib=256)

META = {"01.1": ("rnn_cell", 2), "01.2": ("lstm_cell", 3)}

# Concept answers the reader must refuse at a bounded cost: division by zero, overflow, huge
# powers, non-finite shapes, long strings, arithmetic on strings, unhashable keys, deep nesting,
# long sums, string repetition (a 41-byte answer that once wrote 55 MB).
BAD_ANSWERS = {
    "zero_division": "1/0", "float_overflow": "10.0**400", "infinite_shape": "[1e999, 2]",
    "huge_power": "10**5000", "tower": "9**9**9", "slow_power": "3**10**7 - 1",
    "long_digits": '"' + "7" * 5000 + '"', "string_arithmetic": '"a" - 1',
    "nested_minus": "-" * 30_000 + "1", "long_sum": "+".join(["1"] * 20_000),
    "repeated_html": "'<img src=x>' * 10**6",
}


def cell(source: str, exercise: str | None = None):
    c = new_code_cell(source)
    if exercise:
        name, points = META[exercise]
        c.metadata = {"tags": ["exercise"], "coursekit": {"exercise": exercise, "name": name,
                                                          "points": points}}
    return c


def chapter1(*extra) -> str:
    """A correct Chapter 1 submission (5 points), with ``extra`` cells after it."""
    return nbformat.writes(new_notebook(cells=[new_markdown_cell("# Chapter 1"),
                                               cell(RNN, "01.1"), cell(LSTM, "01.2"), *extra]))


def concepts_cell(answer: str):
    return new_code_cell(f'answers = {{"01.C2": {answer}, "01.C3": "b"}}\n'
                         "check_concepts(answers)\n")


def solution_with(name: str, exercise: str, code: str, imports: str) -> str:
    """A solutions notebook (full marks) whose ``exercise`` cell is ``code`` instead, with a
    cell ``imports`` added at its end."""
    nb = nbformat.read(ROOT / "solutions" / name, as_version=4)
    for c in nb.cells:
        if c.metadata.get("coursekit", {}).get("exercise") == exercise:
            c.source = code
    nb.cells.append(new_code_cell(imports))
    return nbformat.writes(nb)


def zipped(members: dict[str, bytes | str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


SDPA_THROUGH_SELF_ATTENTION = '''def scaled_dot_product_attention(q, k, v, mask=None):
    layer = SelfAttention(q.shape[-1])
    with torch.no_grad():
        for w in (layer.W_Q, layer.W_K, layer.W_V):
            w.weight.copy_(torch.eye(q.shape[-1]))
    return layer(q, mask)
'''
# An exercise that asks the grader to build a 16.7-million-number reference twelve times.
ROLLOUT_MEMORY = '''def attention_rollout(weights, residual=0.5):
    hog = [ViTEmbedding((128, 128), 1, 1, 1024) for _ in range(12)]
    return weights[0].mean(dim=1)
'''


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("round3")
    subs, out = root / "subs", root / "out"
    subs.mkdir()
    files: dict[str, bytes | str] = {"control.ipynb": chapter1(concepts_cell("392"))}
    for name, answer in BAD_ANSWERS.items():
        files[f"concept_{name}.ipynb"] = chapter1(concepts_cell(answer))
    # an honest notebook with a 1.2 MiB exercise cell: pasted output in a comment
    files["big_cell.ipynb"] = chapter1().replace(
        "def rnn_cell", "# " + "0.123456 " * 140_000 + "\\ndef rnn_cell", 1)
    # zip members whose results folders would collide, and a zip inside a zip
    files["collide.zip"] = zipped({"a.ipynb": chapter1(), "a/results.json.ipynb": chapter1(),
                                   "a/feedback.md.ipynb": chapter1()})
    files["outer.zip"] = zipped({"inner.zip": zipped({"nested.ipynb": chapter1()})})
    # names written to be rendered: a newline and a forged heading, an image, a script
    files["names.zip"] = zipped({
        "x\n# Score: 100 of 100\n.ipynb": chapter1(),
        "<img src=x onerror=alert(1)>.ipynb": "not json",
        "![p](http://example.invalid/p.png).ipynb": chapter1().replace(
            "return torch.tanh(x", "raise ValueError('<script>alert(1)</script> "
            "![q](http://example.invalid/q.png)')\\n    return torch.tanh(x", 1),
    })
    # the LMS: a student's folder holding a file named after another student (Moodle), a
    # student's zip holding a file named after another (Canvas)
    moodle = subs / "Max Muster_1001_assignsubmission_file_"
    moodle.mkdir()
    (moodle / "Vera Victim_2002_assignsubmission_file_01.ipynb").write_text(chapter1())
    files["maxm_1001_77_upload.zip"] = zipped({"veravictim_2002_78_01.ipynb": chapter1()})
    # references reached through another exercise (Chapter 3) and a memory bomb of references
    # (Chapter 8a), next to the honest solution notebooks
    files["03_through_self_attention.ipynb"] = solution_with(
        "03_self_attention.ipynb", "03.1", SDPA_THROUGH_SELF_ATTENTION,
        "from coursekit.attention import SelfAttention")
    files["08a_reference_memory.ipynb"] = solution_with(
        "08a_vit.ipynb", "08.4", ROLLOUT_MEMORY, "from coursekit.models.vit import ViTEmbedding")
    for name, data in files.items():
        (subs / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    # a file name that is not UTF-8 (what unzip leaves from an export without the UTF-8 flag)
    with open(os.path.join(os.fsencode(subs), b"caf\xe9.ipynb"), "w") as f:
        f.write(chapter1())
    before = {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()}
    start = time.monotonic()
    result = grade([subs], out, jobs=2, limits=LIMITS, stream=None, concept_points=1.0)
    seconds = time.monotonic() - start
    records = {report.meta(r)["submission"]: r for r in result.records}
    return {"records": records, "out": out, "subs": subs, "before": before, "batch": result,
            "seconds": seconds}


def _record(batch, name: str) -> dict:
    return batch["records"][name]


def _text(record: dict) -> str:
    m = report.meta(record)
    return " ".join([record["output"], *m["notes"], *m["problems"],
                     *(t["output"] for t in record["tests"])])


def test_every_file_has_a_result_and_the_batch_finished(batch):
    records = batch["records"]
    expected = {"control", "big_cell", "caf_", "collide/a", "collide/a/results.json_",
                "collide/a/feedback.md_", "outer/inner/nested", "maxm_1001_77_upload/"
                "veravictim_2002_78_01", "Max_Muster_1001_assignsubmission_file_/"
                "Vera_Victim_2002_assignsubmission_file_01", "03_through_self_attention",
                "08a_reference_memory", *(f"concept_{n}" for n in BAD_ANSWERS)}
    assert expected <= set(records), sorted(set(records))
    assert len([n for n in records if n.startswith("names/")]) == 3
    for name, record in records.items():
        folder = batch["out"] / name
        assert json.loads((folder / "results.json").read_text()) == record
        assert (folder / "feedback.md").is_file()
        assert not report.meta(record)["harness_errors"], (name, report.meta(record))
    assert {p: p.read_bytes() for p in batch["subs"].rglob("*") if p.is_file()} \
        == batch["before"], "submissions are never modified"


@pytest.mark.parametrize("name", sorted(BAD_ANSWERS))
def test_a_concept_answer_costs_a_note_not_the_batch(batch, name):
    record = _record(batch, f"concept_{name}")
    concepts = {c["id"]: c for c in report.meta(record)["concepts"]}
    assert record["score"] == 5, "the exercises are graded, the concept cell is not read"
    assert concepts["01.C2"]["right"] is None and concepts["01.C2"]["earned"] == 0
    assert any(n.startswith("concept checks not read") for n in report.meta(record)["notes"])
    size = sum(p.stat().st_size for p in (batch["out"] / f"concept_{name}").iterdir())
    assert size < 200_000, "an answer cannot make the results large"


def test_the_control_gets_full_marks_and_its_concept_points(batch):
    record = _record(batch, "control")
    assert (record["score"], record["max_score"]) == (5 + 2, 5 + 3)  # 01.C1 unanswered
    right = {c["id"]: c["right"] for c in report.meta(record)["concepts"]}
    assert right == {"01.C1": None, "01.C2": True, "01.C3": True}


def test_reading_answers_is_cheap_whatever_they_are():
    start = time.process_time()
    for answer in BAD_ANSWERS.values():
        rows, notes = grade_sources([f'answers = {{"01.C2": {answer}}}\ncheck_concepts(answers)'],
                                    ["01.C2"], 1.0)
        assert notes and rows[0]["earned"] == 0
    assert time.process_time() - start < 2
    for source in ['answers = {[1]: 2}', 'answers = {"01.C2": {"a": 1}}',
                   'answers = {"01.C2": b"x"}', 'answers = {"01.C2": 1e15 * 10}',
                   'answers = {"01.C2": ' + "(" * 300 + "1" + ")" * 300 + "}"]:
        with pytest.raises(ValueError):
            read_answers(source)
    assert read_answers('answers = {"09.C1": 2 * 8 * 768, "06.C3": 1 / 0.9, "04.C1": (2, -4)}') \
        == {"09.C1": 12288, "06.C3": 1 / 0.9, "04.C1": (2, -4)}


def test_large_honest_cells_are_graded_not_a_grader_error(batch):
    record = _record(batch, "big_cell")
    assert record["score"] == 5 and not report.meta(record)["problems"]


def test_names_that_collide_nest_or_are_not_utf8_are_graded(batch):
    records = batch["records"]
    for name in ["caf_", "collide/a", "collide/a/results.json_", "collide/a/feedback.md_",
                 "outer/inner/nested"]:
        assert records[name]["score"] == 5, name
    assert "caf\ufffd.ipynb" in report.meta(records["caf_"])["origin"]


def test_no_student_text_is_rendered_in_markdown(batch):
    out = batch["out"]
    md = MarkdownIt("commonmark").enable("table")
    pages = [out / "summary.md", *out.rglob("feedback.md")]
    pages += [p for p in out.rglob("results.json")]
    for page in pages:
        if page.name == "results.json":
            text = json.loads(page.read_text())["output"]
        else:
            text = page.read_text()
        html = md.render(text)
        assert "<img" not in html and "<script" not in html, page
        for heading in ("<h1>", "<h2>"):
            for chunk in html.split(heading)[1:]:
                assert "Score: 100" not in chunk.split("</h")[0], page


def test_a_reference_never_computes_the_exercise_being_graded(batch):
    """Batch: 03.1 written through SelfAttention gets nothing; the rest of the notebook keeps
    its marks. In the notebook, check() agrees."""
    record = _record(batch, "03_through_self_attention")
    exercises = report.meta(record)["exercises"]
    assert exercises["03.1"]["score"] == 0
    assert "SelfAttention" in _text(record) and "NameError" in _text(record)
    assert exercises["03.3"]["score"] == exercises["03.3"]["max_score"]
    suite = SUITES["scaled_dot_product_attention"]
    provided = {"SelfAttention": "SelfAttention", "masked_softmax": "masked_softmax"}
    fn, error = load_exercise(suite, SDPA_THROUGH_SELF_ATTENTION, provided, SUITES)
    assert not error and run_suite(suite, fn).earned == 0


def test_references_the_grader_builds_are_bounded(batch):
    record = _record(batch, "08a_reference_memory")
    exercises = report.meta(record)["exercises"]
    assert exercises["08.4"]["score"] == 0
    assert "the grader builds references of at most" in _text(record)
    assert exercises["08.3"]["score"] == exercises["08.3"]["max_score"]


def test_provided_references_come_before_and_do_not_compute_the_exercise():
    """Over every pair of the book's exercises: a provided reference is usable only when it
    comes earlier in the book and its code cannot reach the exercise's."""
    everything = {name: name for name in SUITES}
    for target, suite in SUITES.items():
        usable = usable_provided(everything, target, SUITES)
        assert target not in usable.values()
        for name in usable.values():
            assert book_order(SUITES[name]) < book_order(suite)
            assert id(suite.solution) not in reachable(SUITES[name].solution)
    # the class of the attack: every downstream reference that computes an upstream exercise
    assert "SelfAttention" not in usable_provided(everything, "scaled_dot_product_attention",
                                                  SUITES).values()
    assert "MultiHeadAttention" not in usable_provided(everything, "split_heads", SUITES).values()
    assert "EncoderBlock" not in usable_provided(everything, "LayerNorm", SUITES).values()
    # and what the book relies on still works
    assert usable_provided({"masked_softmax": "masked_softmax"}, "scaled_dot_product_attention",
                           SUITES) == {"masked_softmax": "masked_softmax"}


def test_the_gradebook_names_come_from_the_platform_not_the_student(batch):
    records = list(batch["records"].values())
    moodle, _ = report.lms_csv(records, "moodle")
    assert "Max Muster" in moodle and "Vera" not in moodle and "Participant 1001" in moodle
    canvas, _ = report.lms_csv(records, "canvas")
    assert "maxm" in canvas and "vera" not in canvas.lower()


def _synthetic(chapter: str, score: float, max_score: float, path: list[str]) -> dict:
    return {"score": score, "max_score": max_score, "extra_data": {"coursekit": {
        "submission": "/".join(path), "origin": "/".join(path), "lms_path": path,
        "chapter": chapter, "exercises": {}, "problems": [], "concepts": []}}}


def test_moodle_never_sums_chapters():
    folder = "Ann Lee_7_assignsubmission_file_"
    records = [_synthetic("03", 6, 8, [folder, "03_self_attention.ipynb"]),
               _synthetic("01", 5, 5, [folder, "01_rnn_recap.ipynb"]),
               _synthetic("03", 8, 8, ["Bo Ng_8_assignsubmission_file_", "03.ipynb"])]
    table, left_out = report.lms_csv(records, "moodle")
    rows = {r.split(",")[0]: r.split(",") for r in table.splitlines()[1:]}
    assert rows["Participant 7"][2:4] == ["6", "8"] and rows["Participant 8"][2:4] == ["8", "8"]
    assert left_out == [f"{folder}/01_rnn_recap.ipynb"]
    table, _ = report.lms_csv(records, "moodle", chapter="01")
    assert [r.split(",")[2:4] for r in table.splitlines()[1:]] == [["5", "5"]]


def test_reading_a_large_notebook_costs_the_grader_a_bounded_amount():
    """What the grader does with a submission in its own process (parse it, read its concept
    answers, find its exercises and provided imports, anonymise its code for the class report)
    costs a few times the file's size, however dense the code: syntax trees are built only for
    cells of at most 64 KiB of code, the report reads the first 16 KiB."""
    import tracemalloc

    from coursekit.concepts import grade_sources
    from coursekit.grading.cells import provided_names
    from coursekit.grading.report import anonymised
    from coursekit.grading.submissions import parse, plan

    dense = "    y = [" + ",".join(["x"] * 120_000) + "]\n"
    nb = new_notebook(cells=[
        concepts_cell("[" + ",".join(["1"] * 600_000) + "]"),
        cell("def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):\n" + dense * 4, "01.1"),
        cell(LSTM, "01.2"), new_code_cell("from coursekit.attention import masked_softmax\n"
                                          + "z = 1\n" * 200_000)])
    data = nbformat.writes(nb).encode()
    assert len(data) > 4 << 20
    tracemalloc.start()
    try:
        parsed = parse(data, "01_rnn_recap.ipynb")
        sources = [c.source for c in parsed.cells]
        _, notes = grade_sources(sources, ["01.C2"], 1.0)
        codes, missing = plan(parsed, [("01.1", "rnn_cell"), ("01.2", "lstm_cell")])
        assert provided_names(sources, SUITES) == {"masked_softmax": "masked_softmax"}
        assert anonymised(codes["rnn_cell"].source).startswith("def rnn_cell")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert notes and not missing
    assert peak < 8 * len(data), f"{peak / 2**20:.0f} MiB for a {len(data) / 2**20:.1f} MiB file"


def test_gradescope_always_writes_a_results_json(tmp_path, monkeypatch):
    """Whatever happens in the grader, Gradescope gets a results.json: a grader that fails
    leaves a zero score and a message, never a missing file."""
    from coursekit.grading import gradescope

    (tmp_path / "source").mkdir()
    (tmp_path / "submission").mkdir()
    (tmp_path / "source" / "config.json").write_text(json.dumps(
        {"limits": {"timeout": 10}, "chapter": "01"}))

    def failing(*args, **kwargs):
        raise RuntimeError("a grader bug")

    monkeypatch.setattr(gradescope, "grade", failing)
    assert gradescope.run(tmp_path) == 0
    written = json.loads((tmp_path / "results" / "results.json").read_text())
    assert written["score"] == 0 and "could not grade" in written["output"]
