"""Chapter 8b's shipped NegCLIP: the chapter's CLIP fine-tuned with hard-negative captions.

Chapter 8b trains a small CLIP (:class:`coursekit.models.clip.CLIP`) on captioned digit scenes
(:class:`coursekit.data.scenes.DigitScenes`, ``positions=True``) for 400 steps of 128 scenes.
That model does not *bind*: it scores the caption of a two-digit scene, "seven top left and two
bottom right", about as high as the same words with the two digits exchanged (chance, 50 %).
NegCLIP's fix (Yuksekgonul et al., 2023) fine-tunes a trained CLIP with *hard negatives*,
captions with the same words composed differently, as extra columns of the logits
(:func:`coursekit.models.clip.negclip_loss`). Here the hard negative of a two-digit scene is its
digits-swapped caption (:func:`swap_digits`), and it takes more steps than a 90-second notebook
has, so the fine-tuned model ships with the package (``clip_negclip.pt``, about 0.5 MB), with
the binding measured during its fine-tuning.

Regenerate it with ``python -m coursekit.data.negclip [device]``: the chapter's plain training
(8.10 in the quick profile: 400 steps of 128 scenes, seed 0), then the fine-tuning, and, as the
control stored beside it, the same fine-tuning with CLIP's loss alone (no hard negatives).
"""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import torch
import torch.nn.functional as F

from coursekit.data.scenes import DigitScenes, SceneBatch
from coursekit.data.vocab import Vocab

CHECKPOINT = Path(__file__).with_name("clip_negclip.pt")
SCENES = {"grid": 2, "cell": 8, "min_digits": 1, "max_digits": 2, "positions": True}
MODEL = {"image_size": 16, "patch_size": 8, "d_embed": 32, "d_vision": 48, "d_text": 48,
         "vision_layers": 2, "text_layers": 2, "max_len": 12}
HELD_OUT = frozenset((k, k % 4) for k in range(10))  # (digit, cell) pairs never in training
FINE_TUNE = {"steps": 2000, "batch_size": 128, "lr": 1e-3, "seed": 1}


def swap_digits(caption: list[str]) -> list[str]:
    """The caption of a two-digit scene with its two digit words exchanged:
    "seven top left and two bottom right" -> "two top left and seven bottom right"."""
    if len(caption) != 7 or caption[3] != "and":
        raise ValueError(f"not the caption of a two-digit scene with positions: {caption}")
    return [caption[4], *caption[1:4], caption[0], *caption[5:]]


def hard_negatives(batch: SceneBatch, held_out: frozenset[tuple[int, int]] = HELD_OUT) -> list[list[str]]:
    """The digits-swapped caption of every two-digit scene of ``batch`` whose digits differ,
    except where the swap would put a digit in a cell that ``held_out`` (digit, cell) forbids."""
    negatives = []
    for caption, layout in zip(batch.captions, batch.layouts, strict=True):
        if len(layout) == 2 and layout[0][1] != layout[1][1]:
            (cell_a, a), (cell_b, b) = layout  # (cell, digit), reading order
            if (b, cell_a) not in held_out and (a, cell_b) not in held_out:
                negatives.append(swap_digits(caption))
    return negatives


def binding_scenes(n: int = 400, seed: int = 4) -> SceneBatch:
    """The chapter's binding probe: n two-digit scenes of test images (digit images never seen in
    training, by writers who also wrote training digits: see ``coursekit.data.scenes``)."""
    scenes = DigitScenes(**{**SCENES, "min_digits": 2})
    return scenes.sample(n, random.Random(seed), split="test")


@torch.no_grad()
def binding_rate(model: torch.nn.Module, batch: SceneBatch, vocab: Vocab) -> float:
    """The fraction of the two-digit scenes of ``batch`` with two different digits whose
    caption is closer to the image (cosine) than the digits-swapped caption."""
    model.eval()
    device = next(model.parameters()).device
    differs = torch.tensor([c[0] != c[4] for c in batch.captions])

    def text(captions):
        return F.normalize(model.encode_text(vocab.pad_batch(captions, eos=True)[0].to(device)), dim=-1)

    images = F.normalize(model.encode_image(batch.images.to(device)), dim=-1)  # (n, d_embed)
    true = (images * text(batch.captions)).sum(-1)
    swapped = (images * text([swap_digits(c) for c in batch.captions])).sum(-1)
    return (true > swapped)[differs.to(device)].float().mean().item()


def _train(model, scenes, steps, batch_size, lr, seed, device, negatives, every=0, callback=None):
    from coursekit.models.clip import negclip_loss
    from coursekit.train import fit, warmup_cosine

    rng = random.Random(seed)
    vocab = scenes.vocab

    def batches(step):
        batch = scenes.sample(batch_size, rng, exclude=HELD_OUT)
        captions = batch.captions + (hard_negatives(batch) if negatives else [])
        return batch.images.to(device), vocab.pad_batch(captions, eos=True)[0].to(device)

    def loss_fn(model, batch):
        images, ids = batch  # B images; B captions, then the hard negatives
        with torch.no_grad():
            model.logit_scale.clamp_(max=math.log(100))
        return negclip_loss(model.encode_image(images), model.encode_text(ids), model.logit_scale)

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    return fit(model, loss_fn, batches, steps=steps, optimizer=optimizer,
               lr_schedule=warmup_cosine(steps, warmup=steps // 10), every=every, callback=callback)


def train_clip(steps: int = 400, batch_size: int = 128, seed: int = 0, device: str = "cpu"):
    """The chapter's plain CLIP (8.10): AdamW at 3e-3, warm-up then cosine, 1/τ capped at 100.
    -> the model, in eval mode."""
    from coursekit.models.clip import CLIP

    scenes = DigitScenes(**SCENES)
    torch.manual_seed(seed)
    model = CLIP(len(scenes.vocab), eot_id=scenes.vocab.eos_id, **MODEL).to(device)
    _train(model, scenes, steps, batch_size, 3e-3, seed, device, negatives=False)
    return model.eval()


def fine_tune(model: torch.nn.Module, steps: int = FINE_TUNE["steps"],
              batch_size: int = FINE_TUNE["batch_size"], lr: float = FINE_TUNE["lr"],
              seed: int = FINE_TUNE["seed"], negatives: bool = True, every: int = 100,
              device: str = "cpu"):
    """Fine-tune ``model`` on fresh scenes, each two-digit scene's digits-swapped caption added
    as a hard negative (:func:`hard_negatives`; ``negatives=False``: CLIP's loss alone).
    -> (model in eval mode, [(step, binding), ...]), step 0 being the model it started from."""
    scenes, probe = DigitScenes(**SCENES), binding_scenes()
    curve = [(0, binding_rate(model, probe, scenes.vocab))]

    def evaluate(step, history):
        curve.append((step, binding_rate(model, probe, scenes.vocab)))

    _train(model, scenes, steps, batch_size, lr, seed, device, negatives, every, evaluate)
    return model.eval(), curve


def save_checkpoint(model: torch.nn.Module, curve: list[tuple[int, float]],
                    control: list[tuple[int, float]], path: Path = CHECKPOINT) -> None:
    torch.save({"model": MODEL, "scenes": SCENES, "fine_tune": FINE_TUNE,
                "state_dict": {k: v.cpu() for k, v in model.state_dict().items()},
                "curve": curve, "control": control}, path)


def load_checkpoint(path: Path = CHECKPOINT):
    """-> (the shipped NegCLIP in eval mode, [(fine-tuning step, binding), ...], the same for the
    control: the same fine-tuning without hard negatives, from the same model)."""
    from coursekit.models.clip import CLIP

    saved = torch.load(path, weights_only=True)
    vocab = DigitScenes(**saved["scenes"]).vocab
    model = CLIP(len(vocab), eot_id=vocab.eos_id, **saved["model"])
    model.load_state_dict(saved["state_dict"])
    return model.eval(), [tuple(x) for x in saved["curve"]], [tuple(x) for x in saved["control"]]


if __name__ == "__main__":
    # python -m coursekit.data.negclip [device]: regenerate the checkpoint
    import sys

    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if device == "cpu":  # a model this small gains nothing from threads, and a busy CPU loses a lot
        torch.set_num_threads(1)
    plain = train_clip(device=device)
    control_start = copy.deepcopy(plain)
    model, curve = fine_tune(plain, negatives=True, device=device)
    print("binding during fine-tuning with hard negatives:", curve)
    _, control = fine_tune(control_start, negatives=False, device=device)
    print("binding during the same fine-tuning without them:", control)
    save_checkpoint(model.cpu(), curve, control)
