"""Chapter 8a's canvas: the two ViTs it loads (``coursekit.data.vit_canvas``), the recipe that
regenerates them, and the classifier helpers of ``coursekit.train`` that 08a trains with."""

import pytest
import torch

from coursekit.data import vit_canvas
from coursekit.models.vit import sincos_2d_pos_embed
from coursekit.train import accuracy


def test_shipped_canvas_vits_load_and_reach_what_the_notebook_asserts():
    assert vit_canvas.CHECKPOINT.stat().st_size < 1_000_000, "the shipped checkpoint must stay small"
    shipped = vit_canvas.load_checkpoint()
    curves, last = shipped["curves"], shipped["recipe"]["steps"]
    assert set(curves) == set(shipped["models"]) == {"learned", "sincos"}
    for runs in (*curves.values(), *shipped["models"].values()):
        assert list(runs) == [0, 1, 2], "three seeds of each kind"
    _, _, X_test, y_test = vit_canvas.digit_split()
    X_canvas = vit_canvas.canvas_test_set(X_test)
    for kind, runs in shipped["models"].items():
        for seed, model in runs.items():
            measured = accuracy(model, X_canvas, y_test)
            step, stored = curves[kind][seed][-1]
            assert step == last == 1500 and measured == pytest.approx(stored, abs=2 / len(y_test)), \
                f"{kind}, seed {seed}: the shipped weights are not the ones its curve measured"
            assert measured > 0.9, f"{kind}, seed {seed}: over 90 % on the canvas expected: {measured:.1%}"
    # the fixed table travels in the file as a buffer: it must still be the one the chapter builds
    for model in shipped["models"]["sincos"].values():
        torch.testing.assert_close(model.pos_embed[0, 1:], sincos_2d_pos_embed((4, 4), 32))
    # the learned tables are a grid: similarity correlates with nearness (the notebook: > 0.3)
    cell = torch.arange(16)
    distance = (cell[:, None] // 4 - cell // 4).abs() + (cell[:, None] % 4 - cell % 4).abs()
    m, n = torch.triu_indices(16, 16, offset=1)
    for seed, model in shipped["models"]["learned"].items():
        pos = model.pos_embed[0, 1:].detach()
        sim = torch.nn.functional.cosine_similarity(pos[:, None], pos[None], dim=-1)
        r = torch.corrcoef(torch.stack([sim[m, n], -distance[m, n].float()]))[0, 1]
        assert r > 0.3, f"seed {seed}: the learned table should correlate with nearness: {r:+.3f}"
    for seed in curves["learned"]:
        learned, sincos = dict(curves["learned"][seed]), dict(curves["sincos"][seed])
        assert learned[400] - sincos[400] > 0.05, f"seed {seed}: sin-cos not behind at step 400"
        assert 0 < learned[last] - sincos[last] < 0.05, f"seed {seed}: at the end, not 0-5 points behind"


def test_the_canvas_recipe_runs_and_records_its_curve():
    model, curve = vit_canvas.train("sincos", seed=0, steps=4, every=2)
    assert [step for step, _ in curve] == [2, 4] and all(0 <= a <= 1 for _, a in curve)
    assert not model.training and model.pos == "sincos"


def test_on_canvas_pastes_each_image_whole():
    images = torch.rand(64, 2, 8, 8) + 0.1                      # no zero pixel: every one must arrive
    g = torch.Generator().manual_seed(0)
    torch.testing.assert_close(vit_canvas.on_canvas(images, g, size=8), images)   # no room to move
    canvas = vit_canvas.on_canvas(images, g, size=16)
    assert canvas.shape == (64, 2, 16, 16)
    ink = canvas[:, 0] > 0
    rows, cols = ink.any(2), ink.any(1)                           # (64, 16) each: 8 consecutive True
    for r, c, image, placed in zip(rows, cols, images, canvas, strict=True):
        top, left = int(r.nonzero()[0]), int(c.nonzero()[0])
        assert r.sum() == c.sum() == 8
        torch.testing.assert_close(placed[:, top:top + 8, left:left + 8], image)
    tops = torch.stack([r.float().argmax() for r in rows])
    assert tops.min() == 0 and tops.max() == 8, "offsets 0 to size - 8 should all be drawn"


def test_accuracy_counts_the_argmax():
    class Constant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.tensor([0.0, 1.0, 0.0]))   # always class 1

        def forward(self, x):
            return self.bias.expand(len(x), 3)

    labels = torch.tensor([1, 0, 1, 2, 1, 1, 0])
    assert accuracy(Constant(), torch.zeros(7, 4), labels, batch=3) == pytest.approx(4 / 7)
