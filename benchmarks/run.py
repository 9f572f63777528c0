"""Every benchmark in one command: ``python benchmarks/run.py [--only attention memory ...]``.

Prints a table per part and writes all figures as JSON (``--out``, default
``benchmarks/results.json``), with the machine they were measured on; with ``--only``, the
other parts' figures already in the file are kept, and ``measured`` records each part's own
machine, library versions and date. ``python benchmarks/pages.py`` writes the book's Performance
page from the file. Parts:

- ``attention``: forward+backward time ratios of coursekit's attention paths to PyTorch's;
- ``memory``: peak memory of explicit, chunked and fused attention against sequence length;
- ``chapters``: execution time of every chapter in each edition (quick profile; also full on CUDA);
- ``grading``: the batch grader's throughput, latency and peak memory on 100 submissions;
- ``generation``: greedy decoding with and without the KV cache;
- ``models``: coursekit's GPT, BERT, T5, ViT and CLIP against Hugging Face's on the same
  weights (``models_*.py``: forward+backward time ratios, generation speed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import attention  # noqa: E402
import chapters  # noqa: E402
import decoding  # noqa: E402

PARTS = ("attention", "memory", "generation", "models", "chapters", "grading")
MODELS = sorted(p.stem for p in HERE.glob("models_*.py"))  # one module per model family


LIBRARIES = ("numpy", "transformers", "peft", "bitsandbytes")  # what the figures also depend on


def machine() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    libraries = {}
    for name in LIBRARIES:
        try:
            libraries[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    info["libraries"] = libraries
    return info


def run_memory() -> list[dict]:
    rows = attention.peak_memory()
    print(f"{'N':>6} {'explicit MiB':>13} {'chunked MiB':>12} {'F.sdpa MiB':>11}")
    for r in rows:
        print(f"{r['N']:>6} {r['explicit'] / 2**20:>13.1f} {r['chunked'] / 2**20:>12.1f} "
              f"{r['F.sdpa'] / 2**20:>11.1f}")
    return rows


def run_grading() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grading.json"
        subprocess.run([sys.executable, str(HERE / "grading.py"), "-n", "100", "--json", str(out)],
                       check=True)
        return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--out", default=str(HERE / "results.json"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    # a partial run (--only) updates its parts and keeps the others' latest figures
    results: dict = json.loads(out.read_text()) if out.exists() and len(args.only) < len(PARTS) else {}
    results["machine"] = machine()
    # each part's own machine and date: a partial run (--only) keeps the other parts' records
    measured = results.setdefault("measured", {})

    def save(part: str | None = None) -> None:  # after every part: a run stopped half-way keeps
        if part is not None:                   # what it measured
            measured[part] = results["machine"]
        out.write_text(json.dumps(results, indent=1))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if "attention" in args.only:
        print("\n## attention, forward + backward (ratio > 1: coursekit is slower)")
        results["attention"] = attention.measure(device=device)
        attention.print_table(results["attention"])
        save("attention")
    if "memory" in args.only:
        print("\n## peak memory of one forward pass (B = H = 1, d = 64, chunk 256)")
        results["memory"] = run_memory()
        save("memory")
    if "generation" in args.only:
        print("\n## greedy generation, 4-layer d=128 model, 16-token prompt")
        results["generation"] = decoding.measure(device=device)
        decoding.print_table(results["generation"])
        save("generation")
    if "models" in args.only:
        results["models"] = {}
        for name in MODELS:
            module = importlib.import_module(name)
            print(f"\n## {name.removeprefix('models_')}: coursekit against Hugging Face "
                  "(ratio > 1: coursekit is slower)")
            results["models"][name] = module.measure(device=device)
            module.print_table(results["models"][name])
            save("models")
    if "chapters" in args.only:
        print("\n## chapter execution times")
        done: list[dict] = []

        def keep(row: dict) -> None:  # after every notebook: a run stopped part-way keeps them
            done.append(row)
            results["chapters"] = done
            save("chapters")

        chapters.measure("quick", on_row=keep)
        if torch.cuda.is_available():
            chapters.measure("full", on_row=keep)
    if "grading" in args.only:
        print("\n## grading 100 submissions")
        results["grading"] = run_grading()
        save("grading")
    save()  # the machine, when no part ran
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
