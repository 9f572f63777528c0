"""In-context learning: sequences that each carry their own randomly drawn task.

Every sequence draws a new mapping f from ``n_keys`` input symbols to ``n_values`` output
symbols, then shows (x, f(x)) pairs, one token each::

    x₁ f(x₁) x₂ f(x₂) ... x_q ?        ->   f(x_q)

Nothing about f can be learned into the weights: f changes with every sequence. The only way
to answer is to find the earlier pair whose input is x_q and copy the token after it (the work
of an *induction head*, Olsson et al. 2022). A k-shot prompt shows k pairs with distinct inputs
drawn from a domain of ``domain`` symbols, then a query from the same domain, so the query has
been shown with probability k / domain, and 0 shots is chance, 1 / n_values.

That is in-context *retrieval*: an example says nothing about an input it does not show.
:class:`ClassTask` is the family where it does: the inputs fall into fixed classes, the same in
every sequence, and each sequence draws its own label per class, so a query that was not shown
is answered by an example of its class. It is related to the in-context classification studied by
Chan et al. 2022, with real differences: there, each class is many images and its label is fixed
across training sequences (in-context learning came from bursty sequences), and the test
classes are new; here each class is four symbols, its label is drawn afresh for every sequence
(as in meta-training), and the classes are the same at test time.

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


class ClassTask:
    """Fixed classes, labels drawn per sequence: ``n_keys`` inputs in ``n_classes`` classes of
    equal size (``class_of(x) = x // (n_keys / n_classes)``, the same in every sequence); each
    sequence draws an injective labelling of the classes with output symbols and shows
    (x, label(class(x))) pairs. Any example of a class answers every input of that class.
    """

    def __init__(self, n_keys: int = 16, n_values: int = 16, n_classes: int = 4) -> None:
        if n_keys % n_classes or n_classes > n_values:
            raise ValueError(f"n_classes={n_classes} must divide n_keys={n_keys} and be <= n_values")
        self.n_keys, self.n_values, self.n_classes = n_keys, n_values, n_classes
        self.vocab_size = n_keys + n_values

    def class_of(self, x: Tensor) -> Tensor:
        return x // (self.n_keys // self.n_classes)

    def _labels(self, B: int, g: torch.Generator) -> Tensor:
        """(B, n_classes) output token ids, a fresh injective labelling per row."""
        return torch.rand(B, self.n_values, generator=g).argsort(dim=-1)[:, : self.n_classes] + self.n_keys

    def train_batch(self, B: int, g: torch.Generator, n_pairs: int = 16) -> Tensor:
        """(B, 2·n_pairs) sequences x₁ y₁ x₂ y₂ ..., inputs drawn with repeats from all n_keys."""
        labels = self._labels(B, g)
        x = torch.randint(self.n_keys, (B, n_pairs), generator=g)
        return torch.stack([x, labels.gather(1, self.class_of(x))], dim=2).flatten(1)

    def prompts(self, shots: int, B: int, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """k-shot prompts whose query input is *not* among the k examples (distinct inputs).

        -> prompts (B, 2k + 1), targets label(class(x_q)) (B,), and whether an example of the
        query's class was shown (B,) bool.
        """
        if shots >= self.n_keys:
            raise ValueError(f"shots={shots}: an unshown query needs shots < n_keys={self.n_keys}")
        labels = self._labels(B, g)
        order = torch.rand(B, self.n_keys, generator=g).argsort(dim=-1)
        x, query = order[:, :shots], order[:, shots:shots + 1]
        pairs = torch.stack([x, labels.gather(1, self.class_of(x))], dim=2).flatten(1)
        class_shown = (self.class_of(x) == self.class_of(query)).any(dim=1)
        return (torch.cat([pairs, query], dim=1), labels.gather(1, self.class_of(query))[:, 0],
                class_shown)


# ----------------------------------------------------------------------------- the shipped models

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


@torch.no_grad()
def head_scores(model: torch.nn.Module, task: InContextTask, n: int = 1000, seed: int = 3
                ) -> tuple[Tensor, Tensor]:
    """Where each head looks, on n 8-shot prompts -> (previous, matching), each (L, H).

    previous: the mean weight from each example's output f(x_i) on its own input x_i, the token
    before it (a previous-token head puts almost all its weight there); matching: the mean weight
    from the query on the output of the example whose input matches it (an induction head),
    over the prompts whose query was shown (with 8 shots, all of them).
    """
    model.eval()
    prompts, _, answer_pos = task.prompts(task.domain, n, torch.Generator().manual_seed(seed))
    device = next(model.parameters()).device
    _, attentions = model(prompts.to(device), need_weights=True)   # L tensors (B, H, N, N)
    outputs = torch.arange(1, prompts.shape[1], 2)                   # positions of f(x_i)
    shown = torch.nonzero(answer_pos >= 0)[:, 0]
    previous = torch.stack([a[:, :, outputs, outputs - 1].mean((0, 2)) for a in attentions])
    matching = torch.stack([a[shown, :, -1, answer_pos[shown]].mean(0) for a in attentions])
    return previous.cpu(), matching.cpu()


def train_in_context(steps: int = 30000, batch_size: int = 256, lr: float = 1e-3, seed: int = 0,
                     target: float = 0.98, settle: int = 500, every: int = 100, device: str = "cpu"):
    """Train the chapter's in-context GPT; stop ``settle`` steps after the 8-shot accuracy first
    reaches ``target``.

    The loss sits on a plateau for thousands of steps (about 2.56 nats: the in-context unigram
    strategy, 2.55, which gives each output already seen in the sequence 1/8 and spreads the rest
    over the unseen ones; uniform over the 16 outputs would be log 16 = 2.77), then drops within
    a few hundred, when the previous-token head and then the induction heads form. The shipped
    model's run: on the plateau from step 300 to 6,600, 8-shot accuracy 98 % at step 7,000,
    stopped at 7,500 (23 minutes on one CPU thread).
    -> (model on the CPU, in eval mode, [(step, 8-shot accuracy), ...], trace): every ``every``
    steps the trace records the loss on 1,000 fixed sequences drawn like the training data (never
    trained on) and :func:`head_scores`, as lists under "step", "loss", "previous" and "matching"
    ((L, H) each).
    """
    from coursekit.models.gpt import GPT
    from coursekit.train import fit

    torch.manual_seed(seed)
    task, g = InContextTask(**TASK), torch.Generator().manual_seed(seed)
    model = GPT(task.vocab_size, **MODEL).to(device)
    curve: list[tuple[int, float]] = []
    trace: dict[str, list] = {"step": [], "loss": [], "previous": [], "matching": []}
    held_out = task.train_batch(1000, torch.Generator().manual_seed(seed + 2)).to(device)
    reached: list[int] = []  # the step at which the 8-shot accuracy first reached target

    def evaluate(step, history):
        prompts, targets, _ = task.prompts(task.domain, 1000, torch.Generator().manual_seed(seed + 1))
        logits, *_ = model(prompts.to(device))
        curve.append((step, (logits[:, -1].argmax(-1).cpu() == targets).float().mean().item()))
        previous, matching = head_scores(model, task)
        trace["step"].append(step)
        trace["loss"].append(in_context_loss(model, held_out).item())
        trace["previous"].append(previous)
        trace["matching"].append(matching)
        if curve[-1][1] >= target and not reached:
            reached.append(step)
        if reached and step >= reached[0] + settle:
            raise _Reached

    try:
        fit(model, in_context_loss, lambda step: task.train_batch(batch_size, g).to(device),
            steps=steps, lr=lr, lr_schedule=lambda step: min(1.0, step / 100), every=every,
            callback=evaluate, desc="in-context GPT")
    except _Reached:
        pass
    trace["previous"], trace["matching"] = torch.stack(trace["previous"]), torch.stack(trace["matching"])
    return model.cpu().eval(), curve, trace


class _Reached(Exception):
    pass


CLASSES_CHECKPOINT = Path(__file__).with_name("gpt_in_context_classes.pt")
CLASS_TASK = {"n_keys": 16, "n_values": 16, "n_classes": 4}


@torch.no_grad()
def unshown_accuracy(model: torch.nn.Module, task: ClassTask, shots: int, n: int = 2000,
                     seed: int = 1) -> tuple[float, float, float]:
    """Accuracy on n k-shot prompts whose query input was not shown -> (all queries, those whose
    class was shown, those whose class was not; NaN where there are none)."""
    model.eval()
    prompts, targets, class_shown = task.prompts(shots, n, torch.Generator().manual_seed(seed))
    device = next(model.parameters()).device
    right = (model(prompts.to(device))[0][:, -1].argmax(dim=-1).cpu() == targets).float()
    share = lambda rows: right[rows].mean().item() if rows.any() else float("nan")  # noqa: E731
    return right.mean().item(), share(class_shown), share(~class_shown)


def train_classes(steps: int = 16000, batch_size: int = 128, lr: float = 1e-3, seed: int = 0,
                  every: int = 500, device: str = "cpu", start: Path = CHECKPOINT):
    """Train the shipped retrieval GPT further, on :class:`ClassTask` sequences.

    Its induction circuit already finds the example whose input matches the query; on this
    task the match must be by class instead. -> (model on the CPU, in eval mode, [(step,
    8-shot accuracy on unshown queries whose class was shown), ...]), step 0 being the
    retrieval model itself.
    """
    from coursekit.train import fit

    torch.manual_seed(seed)
    model, _, _ = load_checkpoint(start)
    model.to(device)
    task, g = ClassTask(**CLASS_TASK), torch.Generator().manual_seed(seed)
    curve: list[tuple[int, float]] = []

    def evaluate(step, history=None):
        curve.append((step, unshown_accuracy(model, task, 8, seed=seed + 1)[1]))
        model.train()

    evaluate(0)
    fit(model, in_context_loss, lambda step: task.train_batch(batch_size, g).to(device),
        steps=steps, lr=lr, lr_schedule=lambda step: min(1.0, step / 50), every=every,
        callback=evaluate, desc="class-labelling GPT")
    return model.cpu().eval(), curve


def save_checkpoint(model: torch.nn.Module, curve: list[tuple[int, float]], path: Path = CHECKPOINT,
                    task: dict | None = None, kind: str = "retrieval", trace: dict | None = None) -> None:
    torch.save({"kind": kind, "task": task or TASK, "model": MODEL, "state_dict": model.state_dict(),
                "curve": curve, "trace": trace or {}}, path)


def load_checkpoint(path: Path = CHECKPOINT):
    """-> (a shipped GPT in eval mode, its task, the accuracy curve stored with it).

    ``CHECKPOINT``: the retrieval model (:class:`InContextTask`; its curve is 8-shot accuracy);
    ``CLASSES_CHECKPOINT``: the class-labelling model (:class:`ClassTask`; 8-shot accuracy on
    unshown queries whose class was shown).
    """
    from coursekit.models.gpt import GPT

    saved = torch.load(path, weights_only=True)
    kind = saved.get("kind", "retrieval")
    task = (ClassTask if kind == "classes" else InContextTask)(**saved["task"])
    model = GPT(task.vocab_size, **saved["model"])
    model.load_state_dict(saved["state_dict"])
    return model.eval(), task, [tuple(x) for x in saved["curve"]]


def load_trace(path: Path = CHECKPOINT) -> dict:
    """The retrieval model's training run, stored with it (:func:`train_in_context`): lists
    "step" and "loss" (on 1,000 fixed sequences drawn like the training data), tensors
    "previous" and "matching" (evaluations, L, H) from :func:`head_scores`; every 100 steps."""
    trace = torch.load(path, weights_only=True).get("trace")
    if not trace:
        raise ValueError(f"{path} stores no training trace: regenerate it with "
                         "python -m coursekit.data.incontext")
    return trace


if __name__ == "__main__":
    # python -m coursekit.data.incontext [device] [retrieval|classes]: regenerate a checkpoint
    # (classes starts from the shipped retrieval model, so regenerate that one first)
    import sys

    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    which = sys.argv[2] if len(sys.argv) > 2 else "retrieval"
    if device == "cpu":  # a model this small gains nothing from threads, and a busy CPU loses a lot
        torch.set_num_threads(1)
    if which == "retrieval":
        model, curve, trace = train_in_context(device=device)
        print("8-shot accuracy during training:", curve)
        save_checkpoint(model, curve, trace=trace)
    elif which == "classes":
        model, curve = train_classes(device=device)
        print("8-shot accuracy on unshown queries of a shown class, during training:", curve)
        save_checkpoint(model, curve, CLASSES_CHECKPOINT, CLASS_TASK, kind="classes")
    else:
        sys.exit(f"usage: python -m coursekit.data.incontext [device] [retrieval|classes], not {which!r}")
