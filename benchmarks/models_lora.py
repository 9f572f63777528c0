"""LoRA and NF4: coursekit's ``lora`` and ``quant`` against Hugging Face ``peft`` and ``bitsandbytes``.

- a LoRA layer at BERT-base width (d = 768, r = 8, 8 × 128 tokens): forward + backward, coursekit's
  ``LoRALinear`` against ``peft``'s LoRA ``Linear`` on the same weights (ratio coursekit / peft,
  goal ≤ 1.0), and the inference time of the merged layer against the unmerged one;
- NF4 of a 4096 × 4096 weight matrix (blocks of 64): quantise (and pack) and dequantise, coursekit's
  ``quant`` against ``bitsandbytes.functional.quantize_4bit``/``dequantize_4bit`` (ratio
  coursekit / bitsandbytes; bitsandbytes' CPU path is compiled C++, ours is PyTorch code).

Run it alone with ``python benchmarks/models_lora.py`` or through ``python benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics

import torch
from torch import nn
from torch.utils.benchmark import Timer

from coursekit.lora import LoRALinear
from coursekit.quant import (
    NF4_PUBLISHED,
    dequantize_blockwise,
    nf4_code_book,
    pack_4bit,
    quantize_blockwise,
    unpack_4bit,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)


def _median_time(fn, rounds: int = 3, min_run_time: float = 0.3) -> float:
    timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return statistics.median(timer.blocked_autorange(min_run_time=min_run_time).median
                             for _ in range(rounds))


def _paired_median(fn_a, fn_b, rounds: int = 7, min_run_time: float = 0.3) -> tuple[float, float]:
    """Medians over ``rounds`` interleaved blocks (a, b, b, a, ...), so that a slow spell of the
    machine falls on both alike: a few-millisecond layer is otherwise at the mercy of one block."""
    times: dict = {fn_a: [], fn_b: []}
    for r in range(rounds):
        for fn in (fn_a, fn_b)[:: 1 if r % 2 else -1]:
            timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
            times[fn].append(timer.blocked_autorange(min_run_time=min_run_time).median)
    return statistics.median(times[fn_a]), statistics.median(times[fn_b])


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def lora_layers(device: str, d: int = 768, r: int = 8):
    from peft import LoraConfig
    from peft.tuners.lora import Linear

    torch.manual_seed(0)
    base = nn.Linear(d, d).to(device).requires_grad_(False)
    theirs = Linear(base, "default", config=LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0),
                    r=r, lora_alpha=2 * r)
    ours = LoRALinear.wrap(nn.Linear(d, d).to(device), r, 2 * r)
    with torch.no_grad():
        ours.base.load_state_dict(base.state_dict())
        ours.lora_A.copy_(theirs.lora_A["default"].weight)
        ours.lora_B.normal_(0, 0.02)
        theirs.lora_B["default"].weight.copy_(ours.lora_B)
    return ours, theirs


def measure(device: str = "cpu") -> list[dict]:
    import bitsandbytes.functional as bnb

    rows = []
    ours, theirs = lora_layers(device)
    x = torch.randn(8, 128, 768, device=device)

    def step(layer):
        def run():
            layer(x).square().mean().backward()
            _sync(device)
        return run

    with torch.no_grad():
        max_diff = (ours(x) - theirs(x)).abs().max().item()
    t_ours, t_theirs = _paired_median(step(ours), step(theirs))
    rows.append(dict(what="LoRA layer fwd+bwd (d=768, r=8)", ours_ms=t_ours * 1e3,
                     theirs_ms=t_theirs * 1e3, ratio=t_ours / t_theirs,
                     note=f"max |coursekit - peft| {max_diff:.1e}"))

    def infer():
        with torch.no_grad():
            ours(x)
        _sync(device)

    t_unmerged = _median_time(infer)
    ours.merge()
    t_merged = _median_time(infer)
    ours.unmerge()
    rows.append(dict(what="LoRA inference, merged / unmerged", ours_ms=t_merged * 1e3,
                     theirs_ms=t_unmerged * 1e3, ratio=t_merged / t_unmerged,
                     note="'theirs' column: the unmerged layer"))

    torch.manual_seed(0)
    W = 0.02 * torch.randn(4096, 4096, device=device)
    code = nf4_code_book().to(device)

    def quantise_ours():
        indices, _ = quantize_blockwise(W, code)
        pack_4bit(indices)
        _sync(device)

    def quantise_bnb():
        bnb.quantize_4bit(W, blocksize=64, quant_type="nf4")
        _sync(device)

    indices, absmax = quantize_blockwise(W, code)
    packed_ours = pack_4bit(indices)
    packed, state = bnb.quantize_4bit(W, blocksize=64, quant_type="nf4")
    published = pack_4bit(quantize_blockwise(W, torch.tensor(NF4_PUBLISHED, device=device))[0])
    same = torch.equal(published, packed.flatten()) and torch.equal(absmax, state.absmax)
    differ = (unpack_4bit(packed_ours) != unpack_4bit(packed.flatten())).sum().item()
    t_q_ours, t_q_bnb = _median_time(quantise_ours, 1), _median_time(quantise_bnb, 1)
    rows.append(dict(what="NF4 quantise 4096x4096", ours_ms=t_q_ours * 1e3, theirs_ms=t_q_bnb * 1e3,
                     ratio=t_q_ours / t_q_bnb,
                     note=f"with the published table, identical bytes: {same}; with ours, "
                          f"{differ} of {W.numel():,} indices differ (ties at a midpoint)"))

    def dequantise_ours():
        dequantize_blockwise(unpack_4bit(packed_ours), absmax, code, 64, W.shape)
        _sync(device)

    def dequantise_bnb():
        bnb.dequantize_4bit(packed, state)
        _sync(device)

    t_d_ours, t_d_bnb = _median_time(dequantise_ours, 1), _median_time(dequantise_bnb, 1)
    rows.append(dict(what="NF4 dequantise 4096x4096", ours_ms=t_d_ours * 1e3, theirs_ms=t_d_bnb * 1e3,
                     ratio=t_d_ours / t_d_bnb, note="bitsandbytes: compiled kernel"))
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'':<36}{'coursekit ms':>13}{'reference ms':>13}{'ratio':>7}  note")
    for row in rows:
        print(f"{row['what']:<36}{row['ours_ms']:>13.3f}{row['theirs_ms']:>13.3f}{row['ratio']:>7.2f}  "
              f"{row['note']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    print_table(measure(parser.parse_args().device))
