"""coursekit's modern decoder (Chapter 7h) against Hugging Face's LlamaForCausalLM on the same
weights.

The same two measurements as ``models_gpt.py``, side by side in one run (interleaved rounds, best
of each): forward + backward time of a training step, coursekit / HF (goal: ≤ 1.0), and greedy
generation with the KV cache, tokens per second, coursekit / ``generate(use_cache=True)`` (goal:
≥ 1.0), after checking that both produce the same tokens. The configurations: the chapter's
model, a wider one, and a Llama with grouped-query attention at a small real model's width
(TinyLlama-1.1B's d_model, heads and MLP width, four of its 22 layers, a 32,000-token vocabulary).

Then, at the wider book size, grouped-query attention at H_kv = H, H/4 and 1 (``measure_kv``): the
KV cache's bytes per token (all layers, measured on the cache tensors after a prompt), and greedy
generation's tokens per second with the cache, without it, and with Hugging Face's
``generate(use_cache=True)``, on the same weights and giving the same tokens.
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

from coursekit.attention import KVCache
from coursekit.decoding import greedy
from coursekit.models.llama import Llama, kv_cache_numbers, to_hf

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
    if configs is None:  # the whole benchmark: the H_kv rows too
        rows += measure_kv(device, rounds, new_tokens)
    return rows


KV_CONFIG = (512, 256, 8, 4, 704)  # vocab, d_model, n_heads, n_layers, d_ff: "book, wider"


def measure_kv(device: str = "cpu", rounds: int = 10, new_tokens: int = 64,
               kv_heads: tuple[int, ...] = (8, 2, 1)) -> list[dict]:
    V, d, H, L, d_ff = KV_CONFIG
    rows = []
    for H_kv in kv_heads:
        torch.manual_seed(0)
        ours = Llama(V, d, H, H_kv, L, d_ff).eval()
        theirs = to_hf(ours).to(device)
        ours.to(device)
        prompt = torch.randint(V, (1, 8), device=device)
        caches = [KVCache() for _ in ours.blocks]
        with torch.no_grad():
            ours(torch.randint(V, (1, 128), device=device), caches=caches)
        cache_bytes = sum(t.numel() * t.element_size() for c in caches for t in (c.k, c.v)) / 128
        gen, out = paired_best({"cache": partial(greedy, ours, prompt, new_tokens),
                                "no cache": partial(greedy, ours, prompt, new_tokens, use_cache=False),
                                "hf": partial(_hf_generate, theirs, prompt, new_tokens)}, device, rounds)
        rows.append({"config": f"book, wider, H_kv = {H_kv}", "kind": "kv", "H": H, "H_kv": H_kv,
                     "layers": L, "cache bytes per token": cache_bytes,
                     "cache bytes per token, counted": 4 * L * kv_cache_numbers(d, H, H_kv),
                     "gen tok/s cache": new_tokens / gen["cache"],
                     "gen tok/s no cache": new_tokens / gen["no cache"],
                     "gen tok/s hf": new_tokens / gen["hf"],
                     "same tokens": torch.equal(out["cache"], out["hf"])
                     and torch.equal(out["cache"], out["no cache"])})
    return rows


def print_kv_table(rows: list[dict]) -> None:
    print(f"{'config':<26} {'cache B/token':>13} {'tok/s cache':>11} {'no cache':>9} {'HF':>8} {'same':>5}")
    for r in rows:
        print(f"{r['config']:<26} {r['cache bytes per token']:>13,.0f} {r['gen tok/s cache']:>11.0f} "
              f"{r['gen tok/s no cache']:>9.0f} {r['gen tok/s hf']:>8.0f} {str(r['same tokens']):>5}")


def print_table(rows: list[dict], header: bool = True) -> None:
    if header:
        print(f"{'config':<26} {'B x N':>7} {'params':>13} {'fwd+bwd ours/HF':>16} "
              f"{'gen tok/s ours':>15} {'HF':>8} {'ours/HF':>8} {'same':>5}")
    kv = [r for r in rows if r.get("kind") == "kv"]
    for r in (r for r in rows if r.get("kind") != "kv"):
        print(f"{r['config']:<26} {r['B x N']:>7} {r['parameters']:>13,} {r['fwd+bwd ratio']:>16.2f} "
              f"{r['gen tok/s ours']:>15.0f} {r['gen tok/s hf']:>8.0f} {r['gen speed ratio']:>8.2f} "
              f"{str(r['same tokens']):>5}")
    if kv:
        print_kv_table(kv)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-kv", action="store_true", help="skip the H_kv rows")
    args = parser.parse_args()
    for i, name in enumerate(args.configs):
        print_table(measure(args.device, {name: CONFIGS[name]}, args.rounds), header=i == 0)
    if not args.no_kv:
        print_kv_table(measure_kv(args.device, args.rounds))
