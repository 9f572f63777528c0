"""coursekit's GPT against Hugging Face's GPT2LMHeadModel on the same weights.

Two measurements, side by side in one run (interleaved rounds, best of each, at least a second
of each, so that a busy moment does not decide a ratio):
- forward + backward time of a training step (cross-entropy on random tokens), coursekit / HF,
  at the book's sizes and at GPT-2 small's configuration (goal: ≤ 1.0);
- greedy generation with the KV cache, tokens per second, coursekit / ``generate(use_cache=True)``
  (goal: ≥ 1.0), after checking that both produce the same tokens.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import torch
import torch.nn.functional as F

from coursekit.decoding import greedy
from coursekit.models.gpt import GPT, gpt_to_hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIGS = {  # name: (vocab, d_model, n_heads, n_layers, max_len, batch, N)
    "book (this chapter)": (178, 64, 4, 2, 320, 64, 32),
    "book, wider": (512, 256, 8, 4, 512, 16, 128),
    "GPT-2 small": (50257, 768, 12, 12, 1024, 2, 256),
}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def paired_best(fns: dict, device: str, rounds: int = 5,
                min_seconds: float = 1.0) -> tuple[dict, dict]:
    """Best time of each callable in ``fns`` (name -> fn), run in interleaved rounds whose order
    alternates, after one warm-up round: at least ``rounds`` rounds, and more (up to 200) until
    each has run for ``min_seconds``, so that a step of a few milliseconds is timed as many times
    as it takes for a busy moment not to decide the ratio. -> (best seconds, last return value),
    each by name."""
    best, result = {key: float("inf") for key in fns}, {}
    spent = {key: 0.0 for key in fns}
    r = 0
    while r <= rounds or (min(spent.values()) < min_seconds and r <= 200):
        for key, fn in list(fns.items())[:: 1 if r % 2 else -1]:
            _sync(device)
            start = time.perf_counter()
            result[key] = fn()
            _sync(device)
            if r:  # round 0 warms up
                elapsed = time.perf_counter() - start
                best[key], spent[key] = min(best[key], elapsed), spent[key] + elapsed
        r += 1
    return best, result


def _hf_generate(model, prompt, n_new: int):
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                              use_cache=True, pad_token_id=0, attention_mask=torch.ones_like(prompt))


def _train_step(model, ids, hf: bool) -> None:
    logits = model(ids).logits if hf else model(ids)[0]
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    model.zero_grad(set_to_none=True)


def measure(device: str = "cpu", configs: dict | None = None, rounds: int = 10,
            new_tokens: int = 64) -> list[dict]:
    rows = []
    for name, (V, d, H, L, P, B, N) in (configs or CONFIGS).items():
        torch.manual_seed(0)
        ours = GPT(V, d, H, L, P).to(device)
        theirs = gpt_to_hf(ours.cpu()).to(device)
        ours.to(device).train(), theirs.train()
        ids = torch.randint(V, (B, N), device=device)
        best, _ = paired_best({"ours": partial(_train_step, ours, ids, False),
                               "hf": partial(_train_step, theirs, ids, True)}, device, rounds)
        ours.eval(), theirs.eval()
        prompt = torch.randint(V, (1, 8), device=device)
        n_new = min(new_tokens, P - 8)
        gen, out = paired_best({"ours": partial(greedy, ours, prompt, n_new),
                                "hf": partial(_hf_generate, theirs, prompt, n_new)}, device, rounds)
        out_ours, out_hf = out["ours"], out["hf"]
        same = torch.equal(out_ours, out_hf)
        rows.append({"config": name, "B x N": f"{B}x{N}",
                     "parameters": sum(p.numel() for p in ours.parameters()),
                     "fwd+bwd ms ours": 1e3 * best["ours"], "fwd+bwd ms hf": 1e3 * best["hf"],
                     "fwd+bwd ratio": best["ours"] / best["hf"],
                     "gen tok/s ours": n_new / gen["ours"], "gen tok/s hf": n_new / gen["hf"],
                     "gen speed ratio": gen["hf"] / gen["ours"], "same tokens": same})
    return rows


def print_table(rows: list[dict], header: bool = True) -> None:
    if header:
        print(f"{'config':<20} {'B x N':>7} {'params':>11} {'fwd+bwd ours/HF':>16} "
              f"{'gen tok/s ours':>15} {'HF':>8} {'ours/HF':>8} {'same':>5}")
    for r in rows:
        print(f"{r['config']:<20} {r['B x N']:>7} {r['parameters']:>11,} {r['fwd+bwd ratio']:>16.2f} "
              f"{r['gen tok/s ours']:>15.0f} {r['gen tok/s hf']:>8.0f} {r['gen speed ratio']:>8.2f} "
              f"{str(r['same tokens']):>5}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    for i, name in enumerate(args.configs):  # one row at a time: GPT-2 small is slow on a CPU
        print_table(measure(args.device, {name: CONFIGS[name]}, args.rounds), header=i == 0)
