"""coursekit's modern decoder (Chapter 7h) against Hugging Face's LlamaForCausalLM on the same
weights.

The same two measurements as ``models_gpt.py``, side by side in one run (interleaved rounds, best
of each): forward + backward time of a training step, coursekit / HF (goal: ≤ 1.0), and greedy
generation with the KV cache, tokens per second, coursekit / ``generate(use_cache=True)`` (goal:
≥ 1.0), after checking that both produce the same tokens. The configurations: the chapter's
model, a wider one, and a Llama with grouped-query attention at a small real model's width
(TinyLlama-1.1B's d_model, heads and MLP width, four of its 22 layers, a 32,000-token vocabulary).
"""

from __future__ import annotations

import argparse
import os
from functools import partial

import torch
from models_gpt import (  # benchmarks/ is on the path: the same step and timer
    _hf_generate,
    _train_step,
    paired_best,
)

from coursekit.decoding import greedy
from coursekit.models.llama import Llama, to_hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIGS = {  # name: (vocab, d_model, n_heads, n_kv_heads, n_layers, d_ff, batch, N)
    "book (Chapter 7h)": (178, 64, 4, 2, 2, 192, 64, 32),
    "book, wider": (512, 256, 8, 2, 4, 704, 16, 128),
    "TinyLlama width, 4 layers": (32000, 2048, 32, 4, 4, 5632, 1, 256),
}


def measure(device: str = "cpu", configs: dict | None = None, rounds: int = 10,
            new_tokens: int = 64) -> list[dict]:
    rows = []
    for name, (V, d, H, H_kv, L, d_ff, B, N) in (configs or CONFIGS).items():
        torch.manual_seed(0)
        ours = Llama(V, d, H, H_kv, L, d_ff)
        theirs = to_hf(ours).to(device)
        ours.to(device).train(), theirs.train()
        ids = torch.randint(V, (B, N), device=device)
        best, _ = paired_best({"ours": partial(_train_step, ours, ids, False),
                               "hf": partial(_train_step, theirs, ids, True)}, device, rounds)
        ours.eval(), theirs.eval()
        prompt = torch.randint(V, (1, 8), device=device)
        gen, out = paired_best({"ours": partial(greedy, ours, prompt, new_tokens),
                                "hf": partial(_hf_generate, theirs, prompt, new_tokens)},
                               device, rounds)
        out_ours, out_hf = out["ours"], out["hf"]
        rows.append({"config": name, "B x N": f"{B}x{N}",
                     "parameters": sum(p.numel() for p in ours.parameters()),
                     "fwd+bwd ms ours": 1e3 * best["ours"], "fwd+bwd ms hf": 1e3 * best["hf"],
                     "fwd+bwd ratio": best["ours"] / best["hf"],
                     "gen tok/s ours": new_tokens / gen["ours"],
                     "gen tok/s hf": new_tokens / gen["hf"],
                     "gen speed ratio": gen["hf"] / gen["ours"],
                     "same tokens": torch.equal(out_ours, out_hf)})
    return rows


def print_table(rows: list[dict], header: bool = True) -> None:
    if header:
        print(f"{'config':<26} {'B x N':>7} {'params':>13} {'fwd+bwd ours/HF':>16} "
              f"{'gen tok/s ours':>15} {'HF':>8} {'ours/HF':>8} {'same':>5}")
    for r in rows:
        print(f"{r['config']:<26} {r['B x N']:>7} {r['parameters']:>13,} {r['fwd+bwd ratio']:>16.2f} "
              f"{r['gen tok/s ours']:>15.0f} {r['gen tok/s hf']:>8.0f} {r['gen speed ratio']:>8.2f} "
              f"{str(r['same tokens']):>5}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    for i, name in enumerate(args.configs):
        print_table(measure(args.device, {name: CONFIGS[name]}, args.rounds), header=i == 0)
