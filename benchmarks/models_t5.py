"""T5: coursekit's ``models.t5.T5`` against Hugging Face's ``T5ForConditionalGeneration``.

On the same weights (Hugging Face's initialisation, ported with ``from_hf_state_dict``), at the
book's size (Chapter 7c's model and batch) and at t5-small's configuration (random weights,
nothing downloaded):

- forward + backward of the teacher-forced cross-entropy: time ratio coursekit / Hugging Face
  (goal ≤ 1.0);
- greedy generation of a fixed number of tokens: coursekit's ``generate`` with its KV cache,
  without it, and Hugging Face's ``generate`` (goal: coursekit at least as fast, speed-up ≥ 1.0).

Run it alone with ``python benchmarks/models_t5.py`` or through ``python benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from coursekit.models.t5 import T5, T5Config, from_hf_state_dict, hf_config, shift_right

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# name -> (config, batch, source length, target length, generated tokens)
SIZES = {
    "book (07c)": (T5Config(125, d_model=64, n_heads=4, n_layers=2, d_ff=128, num_buckets=16,
                            max_distance=32), 48, 24, 4, 16),
    "t5-small": (T5Config(32128, d_model=512, n_heads=8, n_layers=6, d_ff=2048), 8, 128, 32, 32),
}


def pair(config: T5Config, device: str):
    from transformers import T5Config as HFConfig
    from transformers import T5ForConditionalGeneration

    torch.manual_seed(0)
    theirs = T5ForConditionalGeneration(HFConfig(**hf_config(config))).to(device)
    ours = T5(config).to(device)
    ours.load_state_dict(from_hf_state_dict(theirs.state_dict(), config))
    return ours, theirs


def _median_time(fn, rounds: int, min_run_time: float) -> float:
    timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return statistics.median(timer.blocked_autorange(min_run_time=min_run_time).median
                             for _ in range(rounds))


def _wall(fn, device: str, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(device: str = "cpu", rounds: int = 3, min_run_time: float = 0.3) -> list[dict]:
    """One row per size: forward+backward seconds and ratio, generation seconds and speed-up.

    On the CPU both models run on one thread, as the book's quick profile does
    (``coursekit.seed_everything``): on a shared 2-core machine, competing thread pools made the
    timings erratic (a 172k-parameter training step at 2.7 s instead of 50 ms)."""
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)
    try:
        return [measure_size(name, *size, device=device, rounds=rounds,
                             min_run_time=min_run_time) for name, size in SIZES.items()]
    finally:
        torch.set_num_threads(threads)


def measure_size(name: str, config: T5Config, batch: int, n_src: int, n_tgt: int, n_new: int,
                 device: str = "cpu", rounds: int = 3, min_run_time: float = 0.3) -> dict:
    ours, theirs = pair(config, device)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, config.vocab_size, (batch, n_src), generator=g)
    src[batch // 2:, n_src * 3 // 4:] = config.pad_id  # half the batch padded
    labels = torch.randint(3, config.vocab_size, (batch, n_tgt), generator=g)
    src, labels = src.to(device), labels.to(device)
    dec, mask = shift_right(labels), (src != config.pad_id).long()

    def ours_step():
        loss = F.cross_entropy(ours(src, dec).flatten(0, 1), labels.flatten())
        loss.backward()

    def theirs_step():
        logits = theirs(input_ids=src, attention_mask=mask, decoder_input_ids=dec).logits
        F.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()

    ours.train()
    theirs.train()
    t_ours, t_theirs = [], []
    for _ in range(rounds):  # interleaved, so a busy moment hits both alike
        t_ours.append(_median_time(ours_step, 1, min_run_time))
        t_theirs.append(_median_time(theirs_step, 1, min_run_time))
    fb_ours, fb_theirs = statistics.median(t_ours), statistics.median(t_theirs)

    # generation of exactly n_new tokens: no <eos> stops either model
    ours.eval()
    theirs.eval()
    ours.config.eos_id = -1
    theirs.generation_config.eos_token_id = None

    def hf_generate():
        return theirs.generate(input_ids=src, attention_mask=mask, max_new_tokens=n_new,
                               do_sample=False, num_beams=1)

    with torch.no_grad():
        cached = _wall(lambda: ours.generate(src, n_new), device)
        uncached = _wall(lambda: ours.generate(src, n_new, use_cache=False), device)
        hf = _wall(hf_generate, device)
        same = torch.equal(ours.generate(src, n_new), hf_generate()[:, 1:])
    return {
        "size": name, "B": batch, "N_s": n_src, "N_t": n_tgt, "new tokens": n_new,
        "parameters": sum(p.numel() for p in ours.parameters()),
        "fwd+bwd s": {"coursekit": fb_ours, "hugging face": fb_theirs},
        "fwd+bwd coursekit / hf": fb_ours / fb_theirs,
        "generate s": {"coursekit cached": cached, "coursekit uncached": uncached,
                       "hf generate": hf},
        "generate speed-up vs hf": hf / cached,
        "generate speed-up from the cache": uncached / cached,
        "same ids as hf": same,
    }


def print_table(rows: list[dict]) -> None:
    print(f"{'T5 size':<12} {'params':>11} {'fwd+bwd ck ms':>14} {'hf ms':>8} {'ck/hf':>6} "
          f"{'gen cached ms':>14} {'uncached ms':>12} {'hf ms':>8} {'speed-up':>9} {'same':>5}")
    for r in rows:
        fb, gen = r["fwd+bwd s"], r["generate s"]
        print(f"{r['size']:<12} {r['parameters']:>11,} {1e3 * fb['coursekit']:>14.1f} "
              f"{1e3 * fb['hugging face']:>8.1f} {r['fwd+bwd coursekit / hf']:>6.2f} "
              f"{1e3 * gen['coursekit cached']:>14.1f} {1e3 * gen['coursekit uncached']:>12.1f} "
              f"{1e3 * gen['hf generate']:>8.1f} {r['generate speed-up vs hf']:>9.2f} "
              f"{str(r['same ids as hf']):>5}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    print_table(measure(parser.parse_args().device))
