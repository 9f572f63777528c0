"""Greedy generation with and without the KV cache: tokens per second, and the speed-up."""

from __future__ import annotations

import time

import torch

from coursekit.decoding import greedy
from coursekit.models.tiny_transformer import TinyTransformer


def measure(new_tokens=(64, 256, 512), prompt=16, device="cpu", rounds: int = 3) -> list[dict]:
    """Best of ``rounds`` interleaved runs of each, so a busy moment does not decide the ratio."""
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=512, d_model=128, n_heads=4, n_layers=4,
                            max_len=prompt + max(new_tokens)).to(device).eval()
    ids = torch.randint(0, 512, (1, prompt), device=device)
    greedy(model, ids, 4)  # warm-up
    rows = []
    for n in new_tokens:
        seconds = {"cache": float("inf"), "no cache": float("inf")}
        for _ in range(rounds):
            for use_cache in (True, False):
                start = time.perf_counter()
                out = greedy(model, ids, n, use_cache=use_cache)
                if device != "cpu":
                    torch.cuda.synchronize()
                key = "cache" if use_cache else "no cache"
                seconds[key] = min(seconds[key], time.perf_counter() - start)
        assert torch.equal(out, greedy(model, ids, n, use_cache=True))
        rows.append({"new_tokens": n, "seconds": seconds,
                     "tokens/s with cache": n / seconds["cache"],
                     "tokens/s without": n / seconds["no cache"],
                     "speed-up": seconds["no cache"] / seconds["cache"]})
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'new tokens':>10} {'tok/s cache':>12} {'tok/s no cache':>15} {'speed-up':>9}")
    for r in rows:
        print(f"{r['new_tokens']:>10} {r['tokens/s with cache']:>12.0f} "
              f"{r['tokens/s without']:>15.0f} {r['speed-up']:>9.2f}")


if __name__ == "__main__":
    print_table(measure(device="cuda" if torch.cuda.is_available() else "cpu"))
