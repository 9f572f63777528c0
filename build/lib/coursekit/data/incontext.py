"""In-context learning: sequences that each carry their own randomly drawn task.

Every sequence draws a new mapping f from ``n_keys`` input symbols to ``n_values`` output
symbols, then shows (x, f(x)) pairs, one token each::

    x₁ f(x₁) x₂ f(x₂) ... x_q ?        ->   f(x_q)

Nothing about f can be learned into the weights: f changes with every sequence. The only way
to answer is to find the earlier pair whose input is x_q and copy the token after it (the work
of an *induction head*, Olsson et al. 2022). A k-shot prompt shows k pairs with distinct inputs
drawn from a domain of ``domain`` symbols, then a query from the same domain, so the query has
been shown with probability k / domain, and 0 shots is chance, 1 / n_values.

Token ids: input symbols ``0 .. n_keys-1``, output symbols ``n_keys .. n_keys+n_values-1``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor


class InContextTask:
    """``task.train_batch(B, g)`` for training, ``task.prompts(k, B, g)`` for k-shot evaluation.

    Each sequence's task: a domain of ``domain`` inputs out of ``n_keys`` and an injective f
    from them to the ``n_values`` outputs.
    """

    def __init__(self, n_keys: int = 24, n_values: int = 24, domain: int = 8) -> None:
        if domain > min(n_keys, n_values):
            raise ValueError(f"domain={domain} needs n_keys and n_values >= {domain}")
        self.n_keys, self.n_values, self.domain = n_keys, n_values, domain
        self.vocab_size = n_keys + n_values

    def _tasks(self, B: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        """(B, domain) inputs and their outputs f(x) (as token ids), a fresh f per row."""
        keys = torch.rand(B, self.n_keys, generator=g).argsort(dim=-1)[:, : self.domain]
        values = torch.rand(B, self.n_values, generator=g).argsort(dim=-1)[:, : self.domain]
        return keys, values + self.n_keys

    def train_batch(self, B: int, g: torch.Generator, n_pairs: int = 16) -> Tensor:
        """(B, 2·n_pairs) sequences x₁ f(x₁) x₂ f(x₂) ..., inputs drawn with repeats from the domain.

        Train on every f(x_i): where x_i was shown before, the answer is in the context.
        """
        keys, values = self._tasks(B, g)
        pick = torch.randint(self.domain, (B, n_pairs), generator=g)
        return torch.stack([keys.gather(1, pick), values.gather(1, pick)], dim=2).flatten(1)

    def prompts(self, shots: int, B: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """k-shot prompts: k pairs with distinct inputs, then a query input from the domain.

        -> prompts (B, 2k + 1), targets f(x_q) (B,), and where the matching example's output
        sits in the prompt (B,), -1 when the query was not shown.
        """
        keys, values = self._tasks(B, g)
        query = torch.randint(self.domain, (B, 1), generator=g)
        pairs = torch.stack([keys[:, :shots], values[:, :shots]], dim=2).flatten(1)
        prompts = torch.cat([pairs, keys.gather(1, query)], dim=1)
        answer_pos = torch.where(query[:, 0] < shots, 2 * query[:, 0] + 1, -1)
        return prompts, values.gather(1, query)[:, 0], answer_pos


# ----------------------------------------------------------------------------- the shipped model

CHECKPOINT = Path(__file__).with_name("gpt_in_context.pt")
TASK = {"n_keys": 16, "n_values": 16, "domain": 8}
MODEL = {"d_model": 64, "n_heads": 4, "n_layers": 2, "max_len": 32}


def in_context_loss(model: torch.nn.Module, ids: Tensor) -> Tensor:
    """Cross-entropy of every output symbol f(x_i), predicted at the position of x_i."""
    logits, *_ = model(ids)
    return F.cross_entropy(logits[:, 0::2].flatten(0, 1), ids[:, 1::2].flatten())


@torch.no_grad()
def few_shot_accuracy(model: torch.nn.Module, task: InContextTask, shots: int, n: int = 1000,
                      seed: int = 1) -> float:
    """Share of n k-shot prompts whose next-token argmax is f(x_q)."""
    model.eval()
    prompts, targets, _ = task.prompts(shots, n, torch.Generator().manual_seed(seed))
    logits, *_ = model(prompts)
    return (logits[:, -1].argmax(dim=-1) == targets).float().mean().item()


def train_in_context(steps: int = 30000, batch_size: int = 256, lr: float = 1e-3, seed: int = 0,
                     target: float = 0.98, every: int = 500, device: str = "cpu"):
    """Train the chapter's in-context GPT; stop once 8-shot accuracy reaches ``target``.

    The loss sits on a plateau for thousands of steps (about 2.56 nats: the in-context unigram
    strategy, 2.55, which gives each output already seen in the sequence 1/8 and spreads the rest
    over the unseen ones; uniform over the 16 outputs would be log 16 = 2.77), then drops within
    a few hundred,
    when the induction head forms: the shipped model got there after 7,500 steps of batch 256
    (75 s on one GPU).
    -> (model on the CPU, in eval mode, [(step, 8-shot accuracy), ...]).
    """
    from coursekit.models.gpt import GPT
    from coursekit.train import fit

    torch.manual_seed(seed)
    task, g = InContextTask(**TASK), torch.Generator().manual_seed(seed)
    model = GPT(task.vocab_size, **MODEL).to(device)
    curve: list[tuple[int, float]] = []

    def evaluate(step, history):
        prompts, targets, _ = task.prompts(task.domain, 1000, torch.Generator().manual_seed(seed + 1))
        logits, *_ = model(prompts.to(device))
        curve.append((step, (logits[:, -1].argmax(-1).cpu() == targets).float().mean().item()))
        if curve[-1][1] >= target:
            raise _Reached

    try:
        fit(model, in_context_loss, lambda step: task.train_batch(batch_size, g).to(device),
            steps=steps, lr=lr, lr_schedule=lambda step: min(1.0, step / 100), every=every,
            callback=evaluate, desc="in-context GPT")
    except _Reached:
        pass
    return model.cpu().eval(), curve


class _Reached(Exception):
    pass


def save_checkpoint(model: torch.nn.Module, curve: list[tuple[int, float]], path: Path = CHECKPOINT) -> None:
    torch.save({"task": TASK, "model": MODEL, "state_dict": model.state_dict(), "curve": curve}, path)


def load_checkpoint(path: Path = CHECKPOINT):
    """-> (the shipped GPT in eval mode, its task, the 8-shot accuracy curve of its training)."""
    from coursekit.models.gpt import GPT

    saved = torch.load(path, weights_only=True)
    task = InContextTask(**saved["task"])
    model = GPT(task.vocab_size, **saved["model"])
    model.load_state_dict(saved["state_dict"])
    return model.eval(), task, [tuple(x) for x in saved["curve"]]


if __name__ == "__main__":  # python -m coursekit.data.incontext [device]: regenerate the checkpoint
    import sys

    model, curve = train_in_context(device=sys.argv[1] if len(sys.argv) > 1 else "cpu")
    print("8-shot accuracy during training:", curve)
    save_checkpoint(model, curve)
