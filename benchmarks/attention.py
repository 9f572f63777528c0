"""Attention speed: coursekit's paths against PyTorch's, forward + backward, side by side.

Prints a table of time ratios (coursekit / PyTorch; 1.00 = as fast) and returns the rows.
Run it alone with ``python benchmarks/attention.py`` or through ``python benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from coursekit.attention import MultiHeadAttention, scaled_dot_product_attention


def _fwd_bwd(fn, *inputs):
    out = fn(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()


def _time(fn, *inputs, min_run_time: float) -> float:
    timer = Timer("f(fn, *inputs)", globals={"f": _fwd_bwd, "fn": fn, "inputs": inputs},
                  num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def port(ours: MultiHeadAttention, theirs: torch.nn.MultiheadAttention) -> None:
    with torch.no_grad():
        ours.in_proj.weight.copy_(theirs.in_proj_weight)
        ours.in_proj.bias.copy_(theirs.in_proj_bias)
        ours.out_proj.load_state_dict(theirs.out_proj.state_dict())


def measure(lengths=(128, 256, 512, 1024, 2048), batch=2, d_model=256, heads=8, rounds=3,
            min_run_time=0.2, device="cpu") -> list[dict]:
    """Per sequence length: median seconds of each path over ``rounds`` interleaved rounds."""
    torch.manual_seed(0)
    d_head = d_model // heads
    theirs = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).to(device)
    ours = MultiHeadAttention(d_model, heads).to(device)
    port(ours, theirs)
    rows = []
    for n in lengths:
        x = torch.randn(batch, n, d_model, device=device, requires_grad=True)
        q, k, v = (torch.randn(batch, heads, n, d_head, device=device, requires_grad=True)
                   for _ in range(3))
        paths = {
            "explicit sdpa": (scaled_dot_product_attention, q, k, v),
            "F.sdpa": (F.scaled_dot_product_attention, q, k, v),
            "MHA production": (lambda t: ours(t, need_weights=False), x),
            "MHA explicit": (lambda t: ours(t, need_weights=True), x),
            "nn.MultiheadAttention": (lambda t: theirs(t, t, t, need_weights=False), x),
        }
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):  # interleaved, so a busy moment hits every path alike
            for name, (fn, *inputs) in paths.items():
                times[name].append(_time(fn, *inputs, min_run_time=min_run_time))
        t = {name: statistics.median(v) for name, v in times.items()}
        rows.append({
            "N": n,
            "seconds": t,
            "explicit / F.sdpa": t["explicit sdpa"] / t["F.sdpa"],
            "MHA production / nn.MHA": t["MHA production"] / t["nn.MultiheadAttention"],
            "MHA explicit / nn.MHA": t["MHA explicit"] / t["nn.MultiheadAttention"],
        })
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'N':>6} {'F.sdpa ms':>10} {'explicit/F.sdpa':>16} {'nn.MHA ms':>10} "
          f"{'production/nn.MHA':>18} {'explicit MHA/nn.MHA':>20}")
    for r in rows:
        s = r["seconds"]
        print(f"{r['N']:>6} {1e3 * s['F.sdpa']:>10.2f} {r['explicit / F.sdpa']:>16.2f} "
              f"{1e3 * s['nn.MultiheadAttention']:>10.2f} {r['MHA production / nn.MHA']:>18.2f} "
              f"{r['MHA explicit / nn.MHA']:>20.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    print_table(measure(tuple(args.lengths), device=args.device))



# Run in a fresh process per measurement: the peak resident set grows only with what the one
# forward pass allocates beyond the inputs. VmHWM (this process's high-water mark, KiB) is read
# rather than ru_maxrss, which Linux carries over from the parent across exec.
_MEMORY_PROBE = """
import sys, torch
from pathlib import Path
def peak():
    line = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM")]
    return int(line[0].split()[1])
from coursekit.attention import chunked_attention, scaled_dot_product_attention
n, path = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
fn = {"explicit": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
      "chunked": lambda q, k, v: chunked_attention(q, k, v, chunk_size=256),
      "F.sdpa": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v)}[path]
with torch.no_grad():  # load kernels and thread pools on a tiny input first
    fn(*(torch.randn(1, 1, 300, 64) for _ in range(3)))
before = peak()
with torch.no_grad():
    fn(q, k, v)
print(max(peak() - before, 0) * 1024)
"""


def peak_memory(lengths=(2048, 4096, 8192)) -> list[dict]:
    """Peak memory (bytes) one forward pass adds over its inputs, per path, B = H = 1, d = 64."""
    import subprocess
    import sys

    rows = []
    for n in lengths:
        row = {"N": n}
        for path in ("explicit", "chunked", "F.sdpa"):
            out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, str(n), path], check=True,
                                 capture_output=True, text=True)
            row[path] = int(out.stdout.strip())
        rows.append(row)
    return rows
