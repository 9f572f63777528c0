"""Grading throughput: a class of submissions of one chapter through ``coursekit grade``.

    python benchmarks/grading.py                  # 100 submissions of chapter 1, all CPUs
    python benchmarks/grading.py -n 200 --jobs 2 --hostile 5 --json grading.json

The class is made from the book's own notebooks when they exist (the solutions edition, the
student edition, and student editions whose exercise cells hold typical wrong answers), else from
hand-written cells; a few broken files are mixed in, and ``--hostile K`` adds K submissions
that loop forever (each costs its case time limit, so they dominate the wall time).

Prints and writes (JSON): wall time, throughput, per-submission latency (mean, median, p95, max,
as measured inside the grader, which includes starting the submission's sandboxed worker), the
grader's start-up (fork server and isolation probe), and peak resident memory of the grader
process and of its workers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]

RNN = '''def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    """h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)"""
    return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)
'''
LSTM = '''def lstm_cell(x, state, W_ih, W_hh, b_ih, b_hh):
    h, c = state
    i, f, g, o = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)
    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c_next), c_next
'''
BUGS = {  # typical wrong answers, as a student would write them
    "rnn_cell": [RNN.replace("torch.tanh", "torch.relu"), RNN.replace(" + b_hh", ""),
                 RNN.replace("h @ W_hh.T + ", "")],
    "lstm_cell": [LSTM.replace("i, f, g, o =", "i, f, o, g ="),
                  LSTM.replace("torch.sigmoid(f) * c + ", ""),
                  LSTM.replace("torch.tanh(c_next), c_next", "c_next, c_next")],
}
LOOP = "def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):\n    while True:\n        pass\n"


def _peak_mib() -> float:
    """This process's peak resident memory. /proc's VmHWM, because ru_maxrss carries the peak of
    the process that exec'd us (benchmarks/run.py, after the attention benchmark) over exec."""
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("VmHWM")).split()[1]) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _exercise_cells(nb) -> dict[str, int]:
    return {c.metadata["coursekit"]["name"]: i for i, c in enumerate(nb.cells)
            if "exercise" in c.metadata.get("tags", [])}


def _templates() -> tuple[object, object]:
    """(solutions edition, student edition) of chapter 1, or hand-made stand-ins."""
    solution, student = ROOT / "solutions" / "01_rnn_recap.ipynb", \
        ROOT / "notebooks" / "01_rnn_recap.ipynb"
    if solution.exists() and student.exists():
        return nbformat.read(solution, 4), nbformat.read(student, 4)
    cells = [new_markdown_cell("# Chapter 1")]
    for exercise, name, points, source in [("01.1", "rnn_cell", 2, RNN),
                                           ("01.2", "lstm_cell", 3, LSTM)]:
        cell = new_code_cell(source)
        cell.metadata = {"tags": ["exercise"], "coursekit": {"exercise": exercise, "name": name,
                                                              "points": points}}
        cells += [cell, new_code_cell(f"{name} = check({name})")]
    right = new_notebook(cells=cells)
    todo = nbformat.from_dict(json.loads(nbformat.writes(right)))
    for name, index in _exercise_cells(todo).items():
        todo.cells[index].source = (f"def {name}(*args):\n    raise NotImplementedError"
                                    f"('Exercise')\n")
    return right, todo


def make_class(folder: Path, n: int, hostile: int, seed: int = 0) -> dict[str, int]:
    """Write ``n`` submissions (plus ``hostile`` infinite loops); returns the mix."""
    rng = random.Random(seed)
    right, todo = _templates()
    cells = _exercise_cells(right)
    mix = {"correct": 0, "buggy": 0, "not attempted": 0, "partly done": 0, "broken": 0,
           "infinite loop": 0}
    for k in range(n + hostile):
        if k >= n:
            kind = "infinite loop"
        else:
            kind = rng.choices(list(mix)[:5], weights=[55, 20, 10, 10, 5])[0]
        nb = nbformat.from_dict(json.loads(nbformat.writes(right if kind == "correct" else todo)))
        if kind in ("buggy", "partly done"):
            for name, index in cells.items():
                source = right.cells[index].source
                if kind == "buggy" or rng.random() < 0.5:
                    source = rng.choice(BUGS.get(name, [source]))
                nb.cells[index].source = source
        if kind == "infinite loop":
            nb.cells[cells["rnn_cell"]].source = LOOP
            nb.cells[cells["lstm_cell"]].source = right.cells[cells["lstm_cell"]].source
        text = nbformat.writes(nb)
        if kind == "broken":
            text = rng.choice([text[: len(text) // 2], "", text.replace("def rnn_cell",
                                                                         "def rnn_cell(:")])
        (folder / f"student_{k:03d}.ipynb").write_text(text, encoding="utf-8")
        mix[kind] += 1
    return mix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=100, help="submissions (default 100)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--hostile", type=int, default=0,
                        help="extra submissions that loop forever")
    parser.add_argument("--json", default="grading-benchmark.json", help="where to write results")
    args = parser.parse_args(argv)

    from coursekit.grading import batch

    baseline_rss = _peak_mib()
    startup: dict[str, float] = {}
    original_probe = batch.probe_isolation

    def timed_probe(ctx, paths):
        begin = time.monotonic()
        ctx.zygote.wait_ready()
        startup["fork server ready (s)"] = time.monotonic() - begin
        found = original_probe(ctx, paths)
        startup["isolation probe (s)"] = time.monotonic() - begin - startup[
            "fork server ready (s)"]
        return found

    batch.probe_isolation = timed_probe
    with tempfile.TemporaryDirectory(prefix="coursekit-bench-") as tmp:
        subs, out = Path(tmp) / "subs", Path(tmp) / "out"
        subs.mkdir()
        mix = make_class(subs, args.n, args.hostile)
        begin = time.monotonic()
        result = batch.grade([subs], out, jobs=args.jobs, stream=None)
        wall = time.monotonic() - begin
    latencies = sorted(r["extra_data"]["coursekit"]["seconds"] for r in result.records)
    scores = [r["score"] for r in result.records]
    figures = {
        "submissions": len(result.records),
        "mix": mix,
        "jobs": args.jobs,
        "cpus": os.cpu_count(),
        "machine": f"{platform.machine()}, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "wall time (s)": round(wall, 2),
        "submissions per second": round(len(latencies) / wall, 2),
        **{k: round(v, 2) for k, v in startup.items()},
        "latency mean (s)": round(statistics.mean(latencies), 3),
        "latency median (s)": round(statistics.median(latencies), 3),
        "latency p95 (s)": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "latency max (s)": round(latencies[-1], 3),
        "mean score": round(statistics.mean(scores), 2),
        "grader peak RSS (MiB)": round(_peak_mib(), 1),
        "grader RSS after importing torch (MiB)": round(baseline_rss, 1),
        "fork server peak RSS (MiB)": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        "worker peak RSS (MiB, pages shared with the fork server included)": max(
            r["extra_data"]["coursekit"]["worker_peak_mib"] for r in result.records),
        "isolation": result.isolation["summary"] if result.isolation else None,
    }
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(f"written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
