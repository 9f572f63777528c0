"""ViT and CLIP: coursekit's ``models.vit.ViT`` and ``models.clip.CLIP`` against Hugging Face's
``ViTForImageClassification`` and ``CLIPModel``, on the same weights (ported with ``vit_from_hf``
and ``clip_from_hf``; nothing downloaded).

Forward + backward of the training loss (cross-entropy for the ViT, the contrastive loss for
CLIP), time ratio coursekit / Hugging Face (goal ≤ 1.0), at the book's sizes (Chapter 8a's ViT
and 8b's CLIP, with their batches) and at ViT-B/16's and CLIP ViT-B/32's configurations
(random weights, small batches).

Run it alone with ``python benchmarks/models_vit_clip.py`` or through ``python benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from coursekit.models.clip import clip_from_hf, clip_loss
from coursekit.models.vit import vit_from_hf

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# name -> (kind, config kwargs, batch)
SIZES = {
    "ViT, book (08a)": ("vit", dict(image_size=8, patch_size=4, num_channels=1, hidden_size=64,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=256, num_labels=10), 128),
    "ViT-B/16": ("vit", dict(image_size=224, patch_size=16, num_channels=3, hidden_size=768,
                             num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, num_labels=1000), 2),
    "CLIP, book (08b)": ("clip", dict(
        text_config=dict(vocab_size=19, hidden_size=48, intermediate_size=192,
                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=12,
                         eos_token_id=3, hidden_act="gelu"),
        vision_config=dict(image_size=16, patch_size=8, num_channels=1, hidden_size=48,
                           intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                           hidden_act="gelu"),
        projection_dim=32), 128),
    "CLIP ViT-B/32": ("clip", dict(
        text_config=dict(vocab_size=49408, hidden_size=512, intermediate_size=2048,
                         num_hidden_layers=12, num_attention_heads=8, max_position_embeddings=77,
                         eos_token_id=49407, hidden_act="gelu"),
        vision_config=dict(image_size=224, patch_size=32, num_channels=3, hidden_size=768,
                           intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                           hidden_act="gelu"),
        projection_dim=512), 4),
}


def pair(kind: str, config: dict, device: str):
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if kind == "vit":
        theirs = transformers.ViTForImageClassification(transformers.ViTConfig(**config))
        ours = vit_from_hf(theirs)
    else:
        theirs = transformers.CLIPModel(transformers.CLIPConfig(**config))
        ours = clip_from_hf(theirs)
    return ours.to(device).train(), theirs.to(device).train()


def _median_time(fn, min_run_time: float) -> float:
    timer = Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def measure_size(name: str, kind: str, config: dict, batch: int, device: str = "cpu",
                 rounds: int = 3, min_run_time: float = 0.3) -> dict:
    ours, theirs = pair(kind, config, device)
    g = torch.Generator().manual_seed(1)
    if kind == "vit":
        c = config
        images = torch.rand(batch, c["num_channels"], c["image_size"], c["image_size"], generator=g)
        labels = torch.randint(c["num_labels"], (batch,), generator=g)
        images, labels = images.to(device), labels.to(device)

        def ours_step():
            F.cross_entropy(ours(images), labels).backward()

        def theirs_step():
            F.cross_entropy(theirs(pixel_values=images).logits, labels).backward()
    else:
        v, t = config["vision_config"], config["text_config"]
        images = torch.rand(batch, v["num_channels"], v["image_size"], v["image_size"], generator=g)
        n = min(16, t["max_position_embeddings"])
        ids = torch.randint(0, t["eos_token_id"], (batch, n), generator=g)
        ids[:, -1] = t["eos_token_id"]
        images, ids = images.to(device), ids.to(device)

        def ours_step():
            clip_loss(ours.encode_image(images), ours.encode_text(ids), ours.logit_scale).backward()

        def theirs_step():
            theirs(input_ids=ids, pixel_values=images, return_loss=True).loss.backward()

    t_ours, t_theirs = [], []
    for _ in range(rounds):  # interleaved, so a busy moment hits both alike
        t_ours.append(_median_time(ours_step, min_run_time))
        t_theirs.append(_median_time(theirs_step, min_run_time))
    fb_ours, fb_theirs = statistics.median(t_ours), statistics.median(t_theirs)
    return {
        "size": name, "B": batch, "parameters": sum(p.numel() for p in ours.parameters()),
        "fwd+bwd s": {"coursekit": fb_ours, "hugging face": fb_theirs},
        "fwd+bwd coursekit / hf": fb_ours / fb_theirs,
    }


def measure(device: str = "cpu", rounds: int = 3, min_run_time: float = 0.3,
            sizes: tuple[str, ...] | None = None) -> list[dict]:
    """One row per size: forward+backward seconds of each implementation and their ratio."""
    return [measure_size(name, *SIZES[name], device=device, rounds=rounds,
                         min_run_time=min_run_time) for name in (sizes or SIZES)]


def print_table(rows: list[dict]) -> None:
    print(f"{'size':<18} {'B':>4} {'parameters':>12} {'coursekit ms':>13} {'HF ms':>9} "
          f"{'coursekit / HF':>15}")
    for r in rows:
        s = r["fwd+bwd s"]
        print(f"{r['size']:<18} {r['B']:>4} {r['parameters']:>12,} {1e3 * s['coursekit']:>13.1f} "
              f"{1e3 * s['hugging face']:>9.1f} {r['fwd+bwd coursekit / hf']:>15.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", nargs="*", choices=list(SIZES), default=None)
    args = parser.parse_args()
    print_table(measure(args.device, sizes=tuple(args.sizes) if args.sizes else None))
