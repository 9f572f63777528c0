"""coursekit's core: profiles, seeding, the training loop, the explorer, a light import."""

import subprocess
import sys

import pytest
import torch

import coursekit
from coursekit.train import fit
from coursekit.viz import Explorer


def test_import_is_light():
    code = "import sys, coursekit; print('torch' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_notebooks_check_does_not_load_nbformat():
    """Every chapter's set-up cell imports ``coursekit.grading.check``. nbformat's validator
    loads jsonschema, whose format checkers compile a grammar at import time (2.6 s of the
    7.6 s a chapter's imports took on the 2-core machine, in each of 30 kernels per test run)."""
    code = ("import sys; from coursekit.grading import check; "
            "print(sorted(m for m in ('nbformat', 'jsonschema') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", "coursekit.grading imports nbformat at module level again"


def test_profile_follows_device_and_environment(monkeypatch):
    monkeypatch.delenv("COURSEKIT_PROFILE", raising=False)
    assert coursekit.profile() == ("full" if torch.cuda.is_available() else "quick")
    monkeypatch.setenv("COURSEKIT_PROFILE", "full")
    assert coursekit.profile() == "full" and coursekit.by_profile(quick=1, full=2) == 2
    monkeypatch.setenv("COURSEKIT_PROFILE", "quick")
    assert coursekit.by_profile(quick=1, full=2) == 1
    monkeypatch.setenv("COURSEKIT_PROFILE", "fast")
    with pytest.raises(ValueError, match="COURSEKIT_PROFILE"):
        coursekit.profile()


def test_seed_everything_reproduces():
    coursekit.seed_everything(3)
    a = torch.randn(4)
    coursekit.seed_everything(3)
    torch.testing.assert_close(a, torch.randn(4))


def test_coursekit_seed_moves_every_seeded_draw(monkeypatch):
    monkeypatch.delenv("COURSEKIT_SEED", raising=False)
    assert coursekit.seed(7) == 7 and coursekit.seed_everything(3) == 3
    book = torch.randn(4)
    monkeypatch.setenv("COURSEKIT_SEED", "0")
    assert coursekit.seed_everything(3) == 3
    torch.testing.assert_close(torch.randn(4), book)  # draw 0 is the book's own run
    monkeypatch.setenv("COURSEKIT_SEED", "2")
    assert coursekit.seed(7) == 2007 and coursekit.seed_everything(3) == 2003
    assert not torch.allclose(torch.randn(4), book)
    monkeypatch.setenv("COURSEKIT_SEED", "-1")
    with pytest.raises(ValueError, match="COURSEKIT_SEED"):
        coursekit.seed(0)


def test_fit_learns_a_linear_map_and_records_history():
    coursekit.seed_everything(0)
    w = torch.tensor([[2.0, -1.0]])
    model = torch.nn.Linear(2, 1)
    seen = []

    def batches(step):
        x = torch.randn(32, 2)
        return x, x @ w.T + 0.5

    def loss_fn(m, batch):
        return torch.nn.functional.mse_loss(m(batch[0]), batch[1])

    history = fit(model, loss_fn, batches, steps=300, lr=0.05, every=100,
                  callback=lambda step, h: seen.append(step))
    assert len(history.loss) == 300 and history.step[-1] == 300
    assert history.smoothed()[-1] < 1e-3 < history.loss[0]
    assert seen == [100, 200, 300]
    torch.testing.assert_close(model.weight.detach(), w, atol=1e-2, rtol=0)
    assert not model.training


def test_fit_updates_the_same_bits_as_per_tensor_adamw_and_clipping():
    """fit asks for PyTorch's foreach AdamW and clipping (not the CPU default) for speed only:
    a small transformer trained by fit ends bit for bit where the per-tensor loop ends."""
    from coursekit.models.tiny_transformer import TinyTransformer

    def train(use_fit: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = TinyTransformer(vocab_size=11, d_model=16, n_heads=2, n_layers=2, max_len=8)
        data = torch.Generator().manual_seed(1)
        batches = [torch.randint(11, (8, 8), generator=data) for _ in range(30)]

        def loss_fn(m, ids):
            return torch.nn.functional.cross_entropy(m(ids)[0].flatten(0, 1), ids.flatten())

        if use_fit:
            fit(model, loss_fn, lambda step: batches[step - 1], steps=30, lr=3e-2, clip=0.5)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.0, foreach=False)
            for ids in batches:
                opt.zero_grad()
                loss_fn(model, ids).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=False)
                opt.step()
        return [p.detach().clone() for p in model.parameters()]

    fast, loop = train(True), train(False)
    assert all(torch.equal(a, b) for a, b in zip(fast, loop, strict=True))


def test_fit_applies_the_learning_rate_schedule_at_every_step():
    """lr_schedule(step) scales the rate of step 1, 2, ...: the rate each step used is read off
    the optimizer inside the loss function, which runs before that step's update."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    used = []

    def loss_fn(m, batch):
        used.append(optimizer.param_groups[0]["lr"])
        return m(batch).pow(2).mean()

    fit(model, loss_fn, lambda step: torch.randn(4, 2), steps=6, optimizer=optimizer,
        lr_schedule=lambda step: min(step / 4, 1.0))
    torch.testing.assert_close(torch.tensor(used), 0.1 * torch.tensor([0.25, 0.5, 0.75, 1, 1, 1]))


def test_explorer_stores_every_frame_and_a_static_slider():
    import matplotlib.pyplot as plt

    def render(a, b):
        fig, ax = plt.subplots()
        ax.plot([0, a], [0, b])
        return fig

    explorer = Explorer(render, "demo", a=[1, 2, 3], b=["x", "y"])
    assert sorted(explorer.frames) == sorted(f"{i}|{j}" for i in range(3) for j in range(2))
    assert len(set(explorer.frames.values())) == 6, "different values must draw different frames"
    page = explorer.html()
    assert page.count('type="range"') == 2 and "addEventListener" in page
    bundle = explorer._repr_mimebundle_()
    assert "text/html" in bundle and "application/vnd.jupyter.widget-view+json" in bundle
    with pytest.raises(ValueError, match="at least one control"):
        Explorer(render)
