"""Chapter 8a's ViTs on a canvas, trained at the full budget and shipped with the package.

Section 8.6 pastes each 8x8 digit at a random place on a blank 16x16 canvas and trains a ViT with
4x4-pixel patches (a 4x4 grid of 16 patches), once with learned position embeddings and once with
the fixed 2-D sin-cos table. The comparison the chapter makes needs the full profile's 1,500
steps (after which sin-cos is still behind in every seed: neither has finished learning), about
30 s per model on one CPU thread, more than the 90-second notebook has left once its other models
are trained. So both ship here
(``vit_canvas.pt``, about 0.7 MB), three seeds of each, with every run's test accuracy every 100
steps, measured during training.

Regenerate it with ``python -m coursekit.data.vit_canvas [device]``: the chapter's recipe
(:func:`coursekit.train.train_classifier`: AdamW at 3e-3, weight decay 0.05, warm-up over 10 % of
the steps then cosine, batches of 128 training digits each placed at random), 1,500 steps, seeds
0, 1 and 2 of each kind; about three minutes on one CPU thread.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

CHECKPOINT = Path(__file__).with_name("vit_canvas.pt")
CANVAS = 16
CONFIG = {"image_size": CANVAS, "patch_size": 4, "in_channels": 1, "d_model": 32, "n_heads": 4,
          "n_layers": 2, "n_classes": 10}
RECIPE = {"steps": 1500, "lr": 3e-3, "batch": 128, "seeds": (0, 1, 2), "every": 100}
KINDS = ("learned", "sincos")


def digit_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chapter 8's data: scikit-learn's 1797 digits scaled to [0, 1], a stratified fifth held out
    (``random_state=0``) -> X_train (1437, 1, 8, 8), y_train, X_test (360, 1, 8, 8), y_test."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    X = torch.tensor(digits.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(digits.target)
    train_idx, test_idx = train_test_split(np.arange(len(y)), test_size=0.2, stratify=digits.target,
                                           random_state=0)
    return X[train_idx], y[train_idx], X[test_idx], y[test_idx]


def on_canvas(images: torch.Tensor, g: torch.Generator, size: int) -> torch.Tensor:
    """Every (C, 8, 8) image pasted at its own random place on a blank size x size canvas: offsets
    0 to size - 8 down and across, drawn with the generator g. (B, C, 8, 8) -> (B, C, size, size)."""
    B, C = images.shape[:2]
    canvas = images.new_zeros(B, C, size, size)
    top, left = torch.randint(0, size - 7, (2, B), generator=g)
    rows, cols = top[:, None] + torch.arange(8), left[:, None] + torch.arange(8)         # (B, 8) each
    canvas[torch.arange(B)[:, None, None], :, rows[:, :, None], cols[:, None, :]] = images.permute(0, 2, 3, 1)
    return canvas


def canvas_test_set(X_test: torch.Tensor) -> torch.Tensor:
    """The chapter's test canvas: each test digit at one fixed random place (generator seed 1)."""
    return on_canvas(X_test, torch.Generator().manual_seed(1), size=CANVAS)


def make_model(kind: str):
    """The canvas ViT with ``pos=kind`` ("learned" or "sincos")."""
    from coursekit.models.vit import ViT

    return ViT(**CONFIG, pos=kind)


def train(kind: str, seed: int, steps: int = RECIPE["steps"], every: int = RECIPE["every"],
          device: str = "cpu"):
    """One canvas ViT trained by the chapter's recipe -> (model on the CPU in eval mode, curve
    [(step, test accuracy on the test canvas), ...] every ``every`` steps)."""
    from coursekit.train import accuracy, train_classifier

    X_train, y_train, X_test, y_test = digit_split()
    X_test_canvas, curve = canvas_test_set(X_test), []
    torch.manual_seed(seed)
    model = make_model(kind)

    def evaluate(step, history):
        curve.append((step, accuracy(model, X_test_canvas, y_test)))

    train_classifier(model, X_train, y_train, steps=steps, lr=RECIPE["lr"], batch=RECIPE["batch"],
                     seed=seed, augment=lambda images, g: on_canvas(images, g, size=CANVAS),
                     device=device, every=every, callback=evaluate)
    return model.cpu().eval(), curve


def regenerate(steps: int = RECIPE["steps"], seeds=RECIPE["seeds"], every: int = RECIPE["every"],
               device: str = "cpu") -> dict:
    """Train every kind under every seed -> what the checkpoint holds: every run's weights,
    {kind: {seed: state_dict}}, and its curve, {kind: {seed: [(step, accuracy), ...]}}."""
    if os.environ.get("COURSEKIT_SEED", "").strip() not in ("", "0"):
        raise RuntimeError("the shipped recipe's seeds are fixed: unset COURSEKIT_SEED")
    state, curves = {kind: {} for kind in KINDS}, {kind: {} for kind in KINDS}
    for kind in KINDS:
        for seed in seeds:
            model, curves[kind][seed] = train(kind, seed, steps, every, device)
            state[kind][seed] = model.state_dict()
    return {"config": CONFIG, "recipe": {**RECIPE, "steps": steps, "seeds": tuple(seeds), "every": every},
            "state_dict": state, "curves": curves}


def load_checkpoint(path: Path = CHECKPOINT) -> dict:
    """-> {"models": {kind: {seed: the trained ViT in eval mode}}, "curves": {kind: {seed: [(step,
    accuracy), ...]}}, "recipe": ...}."""
    saved = torch.load(path, weights_only=True)
    models = {kind: {} for kind in saved["state_dict"]}
    for kind, runs in saved["state_dict"].items():
        for seed, state in runs.items():
            model = models[kind][int(seed)] = make_model(kind)
            model.load_state_dict(state)
            model.eval()
    curves = {kind: {int(seed): [(int(step), float(a)) for step, a in curve] for seed, curve in runs.items()}
              for kind, runs in saved["curves"].items()}
    return {"models": models, "curves": curves, "recipe": saved["recipe"]}


if __name__ == "__main__":
    # python -m coursekit.data.vit_canvas [device]: regenerate the shipped checkpoint
    import sys

    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    if device == "cpu":  # a model this small gains nothing from threads
        torch.set_num_threads(1)
    saved = regenerate(device=device)
    for kind, runs in saved["curves"].items():
        for seed, curve in runs.items():
            print(kind, seed, " ".join(f"{step}:{a:.3f}" for step, a in curve))
    torch.save(saved, CHECKPOINT)
    print(f"wrote {CHECKPOINT} ({CHECKPOINT.stat().st_size / 1e6:.2f} MB)")
