"""The book's Performance page, written from the benchmarks' JSON: ``python benchmarks/pages.py``.

Reads ``benchmarks/results.json`` (what ``python benchmarks/run.py`` writes) and any
``benchmarks/results-*.json`` (the same command with ``--out``, e.g. on a GPU) and writes
``book/performance.md``: one table per part, each with the device, library versions and date it
was measured on, and the command that measures it again. Every figure on the page comes from the
JSON file it names, so the page cannot drift from the measurements (``tests/test_pages.py``
regenerates it and compares). ``--check`` writes nothing and fails if the page is out of date.

The history of runs, fixes and investigations is the maintainers' record,
``benchmarks/HISTORY.md``, outside the book.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import validation_page  # noqa: E402  (benchmarks/ is not a package)

ROOT = HERE.parent
PAGE = ROOT / "book" / "performance.md"
HISTORY = "benchmarks/HISTORY.md"
GENERATED = "% Written by `python benchmarks/pages.py` from the JSON named below: edit that, not this page."


def result_files(root: Path = ROOT) -> list[Path]:
    """results.json first, then every results-*.json, by name."""
    main = root / "benchmarks" / "results.json"
    return ([main] if main.exists() else []) + sorted((root / "benchmarks").glob("results-*.json"))


def repository_file_url(path: str, root: Path = ROOT) -> str:
    """The file's address on the repository's site, from `_config.yml`'s one repository setting."""
    repo = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return f"{repo['url'].rstrip('/')}/blob/{repo.get('branch', 'main')}/{path}"


def budget_seconds(root: Path = ROOT) -> float | None:
    """``BUDGET_S`` of benchmarks/chapters.py, read without importing it (it imports torch)."""
    tree = ast.parse((root / "benchmarks" / "chapters.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "BUDGET_S" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


# ---------------------------------------------------------------------------------------------
# formatting


def fmt(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def count(n: int) -> str:
    """131968 -> '132 k', 3421696 -> '3.4 M', 124439808 -> '124 M'."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            v = n / size
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return str(n)


def batch(text: str) -> str:
    return text.replace("x", " × ")


def table(header: list[str], align: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out + [""]


def device(m: dict) -> str:
    """One line: the device and the machine's versions."""
    where = f"GPU: {m['gpu']}" if m.get("gpu") else f"CPU: {m.get('cpus', '?')} cores"
    threads = f", {m['torch_threads']} PyTorch threads" if "torch_threads" in m else ""
    libs = m.get("libraries")
    if libs:
        versions = ", ".join(f"{k} {v}" for k, v in libs.items())
    else:
        versions = "other libraries not recorded"
    return (f"{where}{threads} ({m.get('platform', 'platform not recorded')}); Python "
            f"{m.get('python', '?')}, PyTorch {m.get('torch', '?')}, {versions}")


def provenance(m: dict | None, command: str, source: str) -> list[str]:
    if m is None:
        return [f"*Measured on: not recorded in `{source}`. Measure again:* `{command}`", ""]
    return [f"*Measured on {m.get('date', 'a date not recorded')}, {device(m)}. From "
            f"`{source}`; measure again:* `{command}`", ""]


def measured(results: dict, part: str) -> dict | None:
    """The machine a part was measured on: its own record, else (older files) none."""
    return results.get("measured", {}).get(part)


def run_command(source: str, part: str) -> str:
    out = "" if source == "benchmarks/results.json" else f" --out {source}"
    return f"python benchmarks/run.py --only {part}{out}"


# ---------------------------------------------------------------------------------------------
# the parts


def attention_part(results: dict, source: str) -> list[str]:
    rows = [[r["N"], fmt(r["seconds"]["F.sdpa"] * 1e3, 1), fmt(r["explicit / F.sdpa"]),
             fmt(r["seconds"]["nn.MultiheadAttention"] * 1e3, 1), fmt(r["MHA production / nn.MHA"]),
             fmt(r["MHA explicit / nn.MHA"])] for r in results["attention"]]
    return ["## Attention, forward + backward", "",
            *provenance(measured(results, "attention"), run_command(source, "attention"), source),
            "Median time of a forward and backward pass, each path timed in interleaved rounds "
            "(sizes: `measure()` in `benchmarks/attention.py`). A ratio above 1 means coursekit's "
            "path is slower. The production path (`MultiHeadAttention` without attention weights) "
            "runs the fused kernel; the explicit path is the one Chapter 3 teaches.", "",
            *table(["N", "`F.sdpa` (ms)", "explicit `scaled_dot_product_attention` / `F.sdpa`",
                    "`nn.MultiheadAttention` (ms)", "`MultiHeadAttention`, production path / `nn.MHA`",
                    "`MultiHeadAttention(need_weights=True)` / `nn.MHA`"],
                   ["---:"] * 6, rows)]


def memory_part(results: dict, source: str) -> list[str]:
    mib = 2 ** 20
    rows = [[r["N"], fmt(r["explicit"] / mib, 1), fmt(r["chunked"] / mib, 1), fmt(r["F.sdpa"] / mib, 1)]
            for r in results["memory"]]
    return ["## Peak memory of one forward pass", "",
            *provenance(measured(results, "memory"), run_command(source, "memory"), source),
            "The memory one call adds over its inputs, each path in a fresh process "
            "(`peak_memory()` in `benchmarks/attention.py`).", "",
            *table(["N", "explicit (MiB)", "`chunked_attention` (MiB)", "`F.sdpa` (MiB)"],
                   ["---:"] * 4, rows)]


def generation_part(results: dict, source: str) -> list[str]:
    rows = [[r["new_tokens"], f"{r['tokens/s with cache']:.0f}", f"{r['tokens/s without']:.0f}",
             f"{r['speed-up']:.1f}×"] for r in results["generation"]]
    return ["## Generation with and without the KV cache", "",
            *provenance(measured(results, "generation"), run_command(source, "generation"), source),
            "Greedy decoding with `coursekit.decoding.greedy`, best of interleaved runs; both give "
            "the same tokens (tested). Model and prompt: `measure()` in `benchmarks/decoding.py`.", "",
            *table(["new tokens", "tokens/s, cache", "tokens/s, no cache", "speed-up"], ["---:"] * 4, rows)]


def _model_rows(models: dict) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    """(forward + backward, generation, LoRA and NF4) rows from the models_*.py records."""
    train, gen, other = [], [], []
    for r in models.get("models_gpt", []):
        name = f"GPT, {r['config'].replace('this chapter', '07a')}"
        train.append([name, count(r["parameters"]), batch(r["B x N"]), fmt(r["fwd+bwd ratio"]),
                      "same tokens" if r.get("same tokens") else "tokens differ"])
        gen.append([name, fmt(r["gen speed ratio"]), "yes" if r.get("same tokens") else "no"])
    for r in models.get("models_llama", []):
        if r.get("kind") == "kv":  # the H_kv rows: kv_part
            continue
        name = f"Llama (LlamaForCausalLM), {r['config']}"
        train.append([name, count(r["parameters"]), batch(r["B x N"]), fmt(r["fwd+bwd ratio"]),
                      "same tokens" if r.get("same tokens") else "tokens differ"])
        gen.append([name, fmt(r["gen speed ratio"]), "yes" if r.get("same tokens") else "no"])
    for r in models.get("models_bert", []):
        train.append([f"BERT, {r['model']}", "—", batch(r["batch"]), fmt(r["ratio"]),
                      f"largest logit difference {r['max_abs_logit_error']:.1e}"])
    for r in models.get("models_t5", []):
        name = f"T5, {r['size']}"
        same = r.get("same ids as hf")
        train.append([name, count(r["parameters"]), f"{r['B']} × ({r['N_s']} → {r['N_t']})",
                      fmt(r["fwd+bwd coursekit / hf"]), "same ids" if same else "ids differ"])
        gen.append([name, fmt(r["generate speed-up vs hf"]), "yes" if same else "no"])
    for r in models.get("models_vit_clip", []):
        train.append([r["size"], count(r["parameters"]), str(r["B"]),
                      fmt(r["fwd+bwd coursekit / hf"]), "—"])
    for r in models.get("models_lora", []):
        other.append([r["what"], fmt(r["ours_ms"], 1), fmt(r["theirs_ms"], 1), fmt(r["ratio"]),
                      r.get("note", "")])
    return train, gen, other


def models_part(results: dict, source: str) -> list[str]:
    train, gen, other = _model_rows(results["models"])
    lines = ["## The book's models against Hugging Face, on the same weights", "",
             *provenance(measured(results, "models"), run_command(source, "models"), source),
             "Each model of Chapters 7–9 loaded with the same weights into coursekit and into the "
             "Hugging Face implementation (peft and bitsandbytes for Chapter 9), timed side by side "
             "in interleaved rounds (`benchmarks/models_*.py`). A ratio above 1 means coursekit is "
             "slower. On the shared 2-core CPU one run differs from the next: on 2026-12-02 the "
             "Llama's training-step ratio ranged 0.92–1.14 over six runs at the book's size and "
             "0.61–1.37 over six at TinyLlama's width, so a single ratio near 1 is a tie, not a "
             "ranking. Steps of a few milliseconds are now repeated for at least a second each, "
             "and the LoRA layer's blocks interleaved, which narrowed the small models' spread.", "",
             *table(["model", "parameters", "batch", "coursekit / Hugging Face, forward + backward",
                     "outputs"], ["---", "---:", "---", "---:", "---"], train)]
    if gen:
        lines += ["Greedy generation with the KV cache against Hugging Face's `generate` "
                  "(a ratio above 1 means coursekit is faster here):", "",
                  *table(["model", "coursekit / Hugging Face, generation speed", "same tokens"],
                         ["---", "---:", "---"], gen)]
    kv = [r for r in results["models"].get("models_llama", []) if r.get("kind") == "kv"]
    if kv:
        lines += ["Chapter 7h's decoder at the wider book size (d_model = 256, 8 query heads, 4 layers), "
                  "with 8, 2 and 1 key/value heads: the KV cache per token (all layers, float32, "
                  "measured on the cache after a 128-token prompt), and greedy generation of 64 "
                  "tokens with the cache, without it, and with Hugging Face's `generate` on the same "
                  "weights:", "",
                  *table(["key/value heads", "cache per token (bytes)", "tokens/s, cache",
                          "tokens/s, no cache", "tokens/s, Hugging Face", "same tokens"],
                         ["---:", "---:", "---:", "---:", "---:", "---"],
                         [[f"{r['H_kv']} of {r['H']}", f"{r['cache bytes per token']:,.0f}",
                           f"{r['gen tok/s cache']:.0f}", f"{r['gen tok/s no cache']:.0f}",
                           f"{r['gen tok/s hf']:.0f}", "yes" if r["same tokens"] else "no"]
                          for r in kv]),
                  "The cache shrinks in proportion to the key/value heads, byte for byte as counted "
                  "(2 · H_kv · d_head numbers per layer and token). At this size the speeds do not "
                  "follow the head count: fewer key/value heads save memory here, not visible time.",
                  ""]
    if other:
        lines += ["Chapter 9's layers against peft and bitsandbytes (a ratio above 1 means "
                  "coursekit is slower):", "",
                  *table(["what", "coursekit (ms)", "reference (ms)", "ratio", "note"],
                         ["---", "---:", "---:", "---:", "---"], other)]
    return lines


def chapters_part(results: dict, source: str, chapters_now: list[str] | None,
                  budget: float | None) -> list[str]:
    rows = []
    for r in results["chapters"]:
        name = r["chapter"] + ("" if chapters_now is None or r["chapter"] in chapters_now
                               else " (no longer in the book under this name)")
        edition = {"solutions": "instructor", "notebooks": "student"}.get(r["edition"], r["edition"])
        rows.append([name, edition, r["profile"], fmt(r["seconds"], 1),
                     "yes" if r["within_budget"] else "**no**"])
    limit = f"{budget:g} s" if budget is not None else "the budget"
    lines = ["## Chapters", "",
             *provenance(measured(results, "chapters"), run_command(source, "chapters"), source),
             f"Each notebook executed alone in a fresh kernel (`benchmarks/chapters.py`), as it was "
             f"on that date; the budget is {limit} per notebook in the quick profile on a 2-core "
             "CPU.", "",
             *table(["notebook", "edition", "profile", "seconds", f"within {limit}"],
                    ["---", "---", "---", "---:", "---"], rows)]
    if chapters_now is not None:
        missing = [c for c in chapters_now if c not in {r["chapter"] for r in results["chapters"]}]
        if missing:
            lines += [f"Not measured in `{source}`: " + ", ".join(f"`{c}`" for c in missing)
                      + ". The test suite times every notebook on every run (below).", ""]
    return lines


def grading_part(results: dict, source: str) -> list[str]:
    g = results["grading"]
    mix = ", ".join(f"{v} {k}" for k, v in g.get("mix", {}).items() if v)
    rows = [["submissions graded", f"{g['submissions']} ({mix})"],
            ["jobs (sandboxed workers at once)", g["jobs"]],
            ["wall time", f"{g['wall time (s)']} s"],
            ["submissions per second", g["submissions per second"]],
            ["latency per submission, mean / median / p95 / max",
             f"{g['latency mean (s)']} / {g['latency median (s)']} / {g['latency p95 (s)']} / "
             f"{g['latency max (s)']} s"],
            ["grader peak memory", f"{g['grader peak RSS (MiB)']} MiB "
             f"({g['grader RSS after importing torch (MiB)']} MiB of it after importing PyTorch)"],
            ["fork server / one worker, peak memory", f"{g['fork server peak RSS (MiB)']} / "
             f"{g['worker peak RSS (MiB, pages shared with the fork server included)']} MiB "
             "(pages shared with the fork server included)"],
            ["isolation", g.get("isolation", "not recorded")]]
    return ["## The grader", "",
            *provenance(measured(results, "grading"), run_command(source, "grading"), source),
            "`coursekit grade` on Chapter 1's submissions, each in its own sandboxed worker "
            "(`benchmarks/grading.py`).", "",
            *table(["measure", "value"], ["---", "---"], rows)]


SUITE_COMMAND = ("pytest --junitxml=_build/ci/pytest.xml && python benchmarks/suite_breakdown.py "
                 "_build/ci/pytest.xml --record benchmarks/results.json")


def suite_part(results: dict, source: str) -> list[str]:
    s = results["suite"]
    rows = [[r["part"], f"{r['tests']:,}", f"{r['seconds']:,.0f}"] for r in s["parts"]]
    busy = sum(r["seconds"] for r in s["parts"])
    rows.append(["sum over both workers", f"{sum(r['tests'] for r in s['parts']):,}", f"{busy:,.0f}"])
    verdict = (f"{s['tests']:,} tests, {s['failures']} failed, {s['errors']} errors, "
               f"{s['skipped']} skipped")
    return ["## The test suite", "",
            *provenance(measured(results, "suite"),
                        SUITE_COMMAND if source == "benchmarks/results.json"
                        else SUITE_COMMAND.replace("benchmarks/results.json", source), source),
            f"The whole suite as `.ci/run` runs it (two pytest-xdist workers, the browser required): "
            f"{s['wall (s)']:,.0f} s of wall time, {verdict}. Where the time goes, summed over "
            "each part's tests (setup included); the two workers run side by side, so the parts "
            "add up to more than the wall time. `bash .ci/run` prints the same breakdown, with "
            "every notebook's time in both editions, after each run.", "",
            *table(["part", "tests", "seconds"], ["---", "---:", "---:"], rows),
            *notebook_times(s.get("notebooks", []))]


def notebook_times(notebooks: list[dict]) -> list[str]:
    """Each notebook's nbval time in that run, per edition (side by side with other tests)."""
    if not notebooks:
        return []

    def shown(v: float | None) -> str:
        return "–" if v is None else fmt(v, 0)

    rows = [[n["notebook"], shown(n["instructor (s)"]), shown(n["student (s)"])] for n in notebooks]
    return ["Each notebook's nbval time in the same run, setup included, with the other worker busy "
            "beside it (the Chapters table above times a notebook alone):", "",
            *table(["notebook", "instructor (s)", "student (s)"], ["---", "---:", "---:"], rows)]


def render_file(results: dict, source: str, chapters_now: list[str] | None,
                budget: float | None) -> list[str]:
    lines: list[str] = []
    for part, render in (("attention", attention_part), ("memory", memory_part),
                         ("generation", generation_part), ("models", models_part),
                         ("grading", grading_part)):
        if results.get(part):
            lines += render(results, source)
    if results.get("chapters"):
        lines += chapters_part(results, source, chapters_now, budget)
    if results.get("suite"):
        lines += suite_part(results, source)
    return lines


def render(files: list[tuple[str, dict]], history_url: str, chapters_now: list[str] | None = None,
           budget: float | None = None) -> str:
    """The page, from (name, parsed JSON) pairs."""
    names = ", ".join(f"`{name}`" for name, _ in files) or "no JSON file"
    lines = ["# Performance", "", GENERATED, "",
             "How fast the book's code is, how much memory attention takes, and how coursekit's "
             "models compare with Hugging Face's, as last measured. Every measured figure below "
             f"comes from {names} and each table says on what machine, with which versions and when "
             "it was "
             "measured, and the command that measures it again. `python benchmarks/pages.py` "
             "writes this page from the JSON, and a test checks that they agree.", "",
             "The history of runs, fixes and investigations behind these figures is the "
             f"maintainers' record, [`{HISTORY}`]({history_url}).", ""]
    gpu = False
    for name, results in files:
        lines += render_file(results, name, chapters_now, budget)
        gpu = gpu or any(m.get("gpu") for m in [results.get("machine", {}),
                                                 *results.get("measured", {}).values()])
    if not any(results.get("suite") for _, results in files):
        lines += ["## The test suite", "",
                  "No figures in the repository's JSON. `bash .ci/run` prints where the suite's "
                  "time goes (unit, grader, nbval per edition, the book, the browser) and every "
                  "notebook's time in both editions after each run; this keeps them for this page:",
                  "", "```bash", SUITE_COMMAND, "```", ""]
    if not gpu:
        lines += ["## On a GPU", "",
                  "No current GPU figures: none of the JSON files above was measured on a GPU. The "
                  "GPU runs so far (dated, with what they measured) are in the maintainers' "
                  f"record, [`{HISTORY}`]({history_url}). On a CUDA machine, "
                  "`python benchmarks/run.py --out benchmarks/results-cuda.json` measures every part "
                  "there, and this page then shows it.", ""]
    return "\n".join(lines).rstrip() + "\n"


def page_text(root: Path = ROOT) -> str:
    files = [(str(p.relative_to(root)), json.loads(p.read_text(encoding="utf-8")))
             for p in result_files(root)]
    chapters_now = sorted(p.stem for p in (root / "solutions").glob("*.ipynb"))
    return render(files, repository_file_url(HISTORY, root), chapters_now, budget_seconds(root))


def validation_text(root: Path = ROOT) -> str:
    return validation_page.page_text(root, lambda path: repository_file_url(path, root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if a page or the margins table is out of date")
    parser.add_argument("--record", type=Path, metavar="REPORT",
                        help="keep a coursekit validate report as benchmarks/validation/NAME.json")
    parser.add_argument("--as", dest="name", help="the kept report's name (with --record)")
    args = parser.parse_args(argv)
    if args.record:
        if not args.name:
            parser.error("--record needs --as NAME")
        kept = validation_page.record(args.record, args.name)
        print(f"kept {kept.relative_to(ROOT)}")
    pages = [(PAGE, page_text()), (validation_page.PAGE, validation_text()),
             (validation_page.MARGINS, validation_page.margins_file_text(ROOT))]
    if args.check:
        stale = [page for page, text in pages if page.read_text(encoding="utf-8") != text]
        for page in stale:
            print(f"{page.relative_to(ROOT)} is out of date: run python benchmarks/pages.py",
                  file=sys.stderr)
        return 1 if stale else 0
    for page, text in pages:
        page.write_text(text, encoding="utf-8")
        print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
