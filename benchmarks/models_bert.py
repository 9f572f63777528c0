"""coursekit's BERT against Hugging Face's on the same weights: forward + backward time.

Two sizes: the book's (d_model 64, 2 layers, the 07b notebook's model) and BERT-base's
configuration (d_model 768, 12 layers, H = 12, d_ff 3072; random weights, nothing downloaded;
a batch of 8 × 128 on a GPU, 2 × 128 on a CPU).
Both models hold the same weights (ported with ``coursekit.models.bert.to_hf``), both run the
masked-LM head and the NSP head on a padded batch, and the time is the best of ``rounds``
interleaved runs of ``iters`` steps each (forward, sum of both heads' outputs, backward), so a
busy moment on a shared machine does not decide the ratio. ratio = coursekit / Hugging Face:
below 1.0, coursekit is faster.
"""

from __future__ import annotations

import os
import time

import torch

from coursekit.models.bert import Bert, BertConfig, hf_config, to_hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SIZES = {
    "book (07b)": (BertConfig(vocab_size=92, d_model=64, n_heads=4, n_layers=2, d_ff=128,
                              max_len=32), 64, 16),
    "BERT-base": (BertConfig(vocab_size=30522, d_model=768, n_heads=12, n_layers=12, d_ff=3072,
                             max_len=512), 8, 128),
}
CPU_BATCH = {"BERT-base": (2, 128)}  # a CPU step of 8x128 takes ~20 s on a busy 2-core machine


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def _time_one(config: BertConfig, B: int, N: int, device: str, rounds: int,
              steps: int) -> dict:
    import transformers

    torch.manual_seed(0)
    ours = Bert(config).to(device).train()
    theirs = transformers.BertForPreTraining(hf_config(config))
    theirs.load_state_dict(to_hf(ours))
    theirs = theirs.to(device).train()
    ids = torch.randint(1, config.vocab_size, (B, N), device=device)
    ids[B // 2:, N * 3 // 4:] = config.pad_id  # half the rows padded
    segments = (torch.arange(N, device=device) >= N // 2).long().expand(B, N)
    key_mask = ids != config.pad_id

    def step_ours() -> None:
        mlm, nsp = ours(ids, segments, key_mask)
        (mlm.float().mean() + nsp.float().mean()).backward()

    def step_theirs() -> None:
        out = theirs(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long())
        (out.prediction_logits.float().mean()
         + out.seq_relationship_logits.float().mean()).backward()

    seconds = {"coursekit": float("inf"), "hugging face": float("inf")}
    for step in (step_ours, step_theirs):  # warm-up
        step()
    for _ in range(rounds):
        for key, step in (("coursekit", step_ours), ("hugging face", step_theirs)):
            _sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            _sync(device)
            seconds[key] = min(seconds[key], (time.perf_counter() - start) / steps)
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        reference = theirs(input_ids=ids, token_type_ids=segments,
                           attention_mask=key_mask.long()).prediction_logits
        error = (ours(ids, segments, key_mask)[0] - reference)[key_mask].abs().max().item()
    return {"batch": f"{B}x{N}", "device": device, "coursekit_s": seconds["coursekit"],
            "hf_s": seconds["hugging face"],
            "ratio": seconds["coursekit"] / seconds["hugging face"],
            "max_abs_logit_error": error}


def measure(device: str = "cpu", rounds: int = 3, iters: int | None = None) -> list[dict]:
    """Forward + backward seconds per step for each size -> rows with the ratio."""
    rows = []
    for name, (config, B, N) in SIZES.items():
        if device == "cpu":
            B, N = CPU_BATCH.get(name, (B, N))
        steps = iters or (10 if config.d_model < 256 else 2)
        rows.append({"model": name, **_time_one(config, B, N, device, rounds, steps)})
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"{'model':<11} {'batch':>7} {'coursekit ms':>13} {'HF ms':>9} {'ratio':>6} "
          f"{'max |Δ| logits':>15}")
    for r in rows:
        print(f"{r['model']:<11} {r['batch']:>7} {1e3 * r['coursekit_s']:>13.1f} "
              f"{1e3 * r['hf_s']:>9.1f} {r['ratio']:>6.2f} {r['max_abs_logit_error']:>15.1e}")


if __name__ == "__main__":
    print_table(measure(device="cuda" if torch.cuda.is_available() else "cpu"))
