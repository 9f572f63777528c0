"""In-context learning of a task, not only retrieval: labels that each sequence assigns to classes.

The retrieval task of :mod:`coursekit.data.incontext` can only be answered when the query itself
was shown. Here the inputs are *exemplars* of a few fixed classes (``exemplars`` tokens per
class: like several pictures of the same bird), and every sequence draws its own random labelling
of the classes (Chan et al. 2022; Reddy 2024)::

    x₁ ℓ(c(x₁)) x₂ ℓ(c(x₂)) ... x_q ?        ->   ℓ(c(x_q))

The class c(x) of an exemplar is the same in every sequence, so a model can learn it into its
weights; the label ℓ is new in every sequence, so it can only come from the examples. A query
that was never shown is answerable as soon as *another exemplar of its class* was: the examples
reveal the task, and a new query follows from it — what GPT-3 calls few-shot learning, in
miniature.

Token ids: exemplars ``0 .. n_classes·exemplars − 1`` (class = id // exemplars), then the labels.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from coursekit.data.incontext import _Reached, in_context_loss


class ClassInContextTask:
    """``task.train_batch(B, g)`` for training; ``task.prompts(k, B, g)``: k-shot prompts whose
    query is an exemplar that the prompt does not show."""

    def __init__(self, n_classes: int = 8, exemplars: int = 3, n_labels: int = 8) -> None:
        if n_labels < n_classes:
            raise ValueError(f"{n_classes} classes need at least as many labels, got {n_labels}")
        self.n_classes, self.exemplars, self.n_labels = n_classes, exemplars, n_labels
        self.n_inputs = n_classes * exemplars
        self.vocab_size = self.n_inputs + n_labels

    def _labels(self, B: int, g: torch.Generator) -> Tensor:
        """(B, n_classes): each row's label token for every class, a fresh injective map."""
        order = torch.rand(B, self.n_labels, generator=g).argsort(dim=-1)[:, : self.n_classes]
        return order + self.n_inputs

    def train_batch(self, B: int, g: torch.Generator, n_pairs: int = 16) -> Tensor:
        """(B, 2·n_pairs): x₁ ℓ(c(x₁)) x₂ ℓ(c(x₂)) ..., exemplars drawn uniformly with repeats."""
        labels = self._labels(B, g)
        x = torch.randint(self.n_inputs, (B, n_pairs), generator=g)
        y = labels.gather(1, x // self.exemplars)
        return torch.stack([x, y], dim=2).flatten(1)

    def prompts(self, shots: int, B: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """k pairs of k distinct classes (one random exemplar each), then a query exemplar that
        is not among the k shown. -> prompts (B, 2k + 1), targets (B,), and whether the query's
        class was shown (B,) bool: answerable from the examples, though the query never was."""
        labels = self._labels(B, g)
        classes = torch.rand(B, self.n_classes, generator=g).argsort(dim=-1)[:, :shots]  # (B, k)
        shown = classes * self.exemplars + torch.randint(self.exemplars, (B, shots), generator=g)
        # the query: uniform over the exemplars the prompt does not show
        weights = torch.ones(B, self.n_inputs)
        weights.scatter_(1, shown, 0.0)
        query = torch.multinomial(weights, 1, generator=g)  # (B, 1)
        pairs = torch.stack([shown, labels.gather(1, classes)], dim=2).flatten(1)
        prompts = torch.cat([pairs, query], dim=1)
        target = labels.gather(1, query // self.exemplars)[:, 0]
        class_shown = (classes == query // self.exemplars).any(dim=1)
        return prompts, target, class_shown


# ----------------------------------------------------------------------------- the shipped model

CHECKPOINT = Path(__file__).with_name("gpt_in_context_classes.pt")
TASK = {"n_classes": 8, "exemplars": 3, "n_labels": 8}
MODEL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 32}


@torch.no_grad()
def few_shot_accuracy(model: torch.nn.Module, task: ClassInContextTask, shots: int,
                      n: int = 2000, seed: int = 1) -> dict[str, float]:
    """Accuracy of n k-shot prompts whose query was not shown: over all of them, over those
    whose class was shown (answerable from the examples), and the share of those."""
    model.eval()
    prompts, targets, class_shown = task.prompts(shots, n, torch.Generator().manual_seed(seed))
    logits, *_ = model(prompts)
    right = logits[:, -1].argmax(dim=-1) == targets
    return {"all": right.float().mean().item(),
            "class shown": right[class_shown].float().mean().item() if class_shown.any() else float("nan"),
            "share class shown": class_shown.float().mean().item()}


def train(steps: int = 40000, batch_size: int = 256, lr: float = 1e-3, seed: int = 0,
          target: float = 0.97, every: int = 500, device: str = "cpu"):
    """Train the chapter's second in-context GPT; stop once 4-shot prompts whose query's class
    was shown are answered at ``target``. -> (model on the CPU, eval mode, [(step, accuracy)])."""
    from coursekit.models.gpt import GPT
    from coursekit.train import fit

    torch.manual_seed(seed)
    task, g = ClassInContextTask(**TASK), torch.Generator().manual_seed(seed)
    model = GPT(task.vocab_size, **MODEL).to(device)
    curve: list[tuple[int, float]] = []
    prompts, targets, shown = task.prompts(4, 2000, torch.Generator().manual_seed(seed + 1))

    def evaluate(step, history):
        logits, *_ = model(prompts.to(device))
        right = logits[:, -1].argmax(-1).cpu() == targets
        curve.append((step, right[shown].float().mean().item()))
        if curve[-1][1] >= target:
            raise _Reached

    try:
        fit(model, in_context_loss, lambda step: task.train_batch(batch_size, g).to(device),
            steps=steps, lr=lr, lr_schedule=lambda step: min(1.0, step / 100), every=every,
            callback=evaluate, desc="in-context GPT (classes)")
    except _Reached:
        pass
    return model.cpu().eval(), curve


def save_checkpoint(model: torch.nn.Module, curve: list[tuple[int, float]],
                    path: Path = CHECKPOINT) -> None:
    torch.save({"task": TASK, "model": MODEL, "state_dict": model.state_dict(), "curve": curve},
               path)


def load_checkpoint(path: Path = CHECKPOINT):
    """-> (the shipped GPT in eval mode, its task, the accuracy curve of its training)."""
    from coursekit.models.gpt import GPT

    saved = torch.load(path, weights_only=True)
    task = ClassInContextTask(**saved["task"])
    model = GPT(task.vocab_size, **saved["model"])
    model.load_state_dict(saved["state_dict"])
    return model.eval(), task, [tuple(x) for x in saved["curve"]]


if __name__ == "__main__":  # python -m coursekit.data.incontext_classes [device]: regenerate
    import sys

    model, curve = train(device=sys.argv[1] if len(sys.argv) > 1 else "cpu")
    print("4-shot accuracy (query's class shown) during training:", curve)
    save_checkpoint(model, curve)
