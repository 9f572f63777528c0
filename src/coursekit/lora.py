"""Low-rank adaptation (LoRA, Hu et al., 2022): fine-tune a frozen model through small matrices.

A pre-trained weight W₀ (d_out × d_in) stays frozen; the update is learned in factored form::

    h = W₀ x + ΔW x = W₀ x + (α / r) · B A x,    A: (r, d_in), B: (d_out, r), r ≪ min(d_in, d_out)

A starts random (Kaiming-uniform, as in ``peft``) and B at zero, so ΔW = 0 and the adapted model
starts exactly where the pre-trained one is; α/r scales the update so that changing r does not
change the learning rate one needs. ``rslora=True`` scales by α/√r instead (rank-stabilised LoRA,
Kalajdzievski, 2023; ``peft``'s ``LoraConfig(use_rslora=True)``). After training, ΔW can be
*merged* into W₀ (no extra latency) and *unmerged* again (W₀ back, to within float rounding).

Injection follows ``peft``'s ``target_modules`` rule (:func:`is_target`): a list of names matches a
module whose qualified name equals one of them or ends with ``"." + name``; a string is a regular
expression that must match the whole name.

coursekit's attention packs W^Q, W^K, W^V into one ``in_proj`` (3·d_model, d_model)
(:class:`coursekit.attention.MultiHeadAttention`). To adapt W^Q and W^V separately, as the LoRA
paper does, the three row blocks of a packed projection are addressed by the virtual names
``<attention>.q``, ``<attention>.k`` and ``<attention>.v``; :class:`LoRAPackedLinear` puts an
(A, B) pair on each chosen block (loralib's ``MergedLinear``). ``out_proj`` (W^O) and the
feed-forward ``ff.linear1``/``ff.linear2`` are plain ``nn.Linear`` layers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.attention import MultiHeadAttention

PARTS = ("q", "k", "v")  # the row blocks of a packed in_proj: W^Q, W^K, W^V


def lora_scaling(r: int, alpha: float, rslora: bool = False) -> float:
    """The factor γ of ΔW = γ B A: α/r (LoRA), or α/√r with ``rslora`` (rsLoRA), computed as
    ``peft`` computes it (``lora_alpha / r``, ``lora_alpha / math.sqrt(r)``)."""
    return alpha / math.sqrt(r) if rslora else alpha / r


def _init_A(A: Tensor) -> Tensor:
    """Kaiming-uniform with a = √5, as ``nn.Linear`` and ``peft`` draw A: U(−1/√d_in, 1/√d_in)."""
    return nn.init.kaiming_uniform_(A, a=math.sqrt(5))


class _Mergeable(nn.Module):
    """merge() folds ΔW into the frozen ``base.weight`` once; unmerge() takes it out again."""

    base: nn.Linear
    merged: bool

    def delta_weight(self) -> Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def merge(self) -> None:
        if not self.merged:
            self.base.weight += self.delta_weight()
            self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        if self.merged:
            self.base.weight -= self.delta_weight()
            self.merged = False


class LoRALinear(_Mergeable):
    """h = W₀ x + b + (α/r) · B A x, with W₀ and b frozen and only A, B trainable.

    ``base`` is the frozen ``nn.Linear`` (``base.weight`` = W₀: (d_out, d_in)); ``lora_A``: (r, d_in),
    random; ``lora_B``: (d_out, r), zero. x: (..., d_in) -> (..., d_out).
    ``merge()`` folds ΔW = (α/r) B A into W₀ (then the forward pass is one matmul);
    ``unmerge()`` takes it out again. Either is a no-op when already done.
    ``rslora=True`` scales by α/√r instead of α/r (:func:`lora_scaling`).
    """

    def __init__(self, in_features: int, out_features: int, r: int = 8, alpha: float = 16,
                 bias: bool = True, *, rslora: bool = False) -> None:
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias)
        self.base.requires_grad_(False)  # W₀ is frozen
        self.r, self.alpha, self.rslora = r, alpha, rslora
        self.scaling = lora_scaling(r, alpha, rslora)
        self.lora_A = nn.Parameter(_init_A(torch.empty(r, in_features)))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))  # ΔW = 0 at the start
        self.merged = False

    @classmethod
    def wrap(cls, linear: nn.Linear, r: int, alpha: float, rslora: bool = False) -> LoRALinear:
        """A LoRALinear around an existing ``linear`` (its weights are shared, and frozen)."""
        layer = cls(linear.in_features, linear.out_features, r, alpha, bias=linear.bias is not None,
                    rslora=rslora)
        layer.base = linear.requires_grad_(False)
        return layer.to(linear.weight.device)

    def delta_weight(self) -> Tensor:
        """ΔW = (α/r) B A (α/√r with rsLoRA): (d_out, d_in), rank ≤ r."""
        return self.scaling * self.lora_B @ self.lora_A

    def forward(self, x: Tensor) -> Tensor:
        h = self.base(x)  # W₀ x + b (W₀ + ΔW once merged)
        if self.merged:
            return h
        return h + self.scaling * F.linear(F.linear(x, self.lora_A), self.lora_B)  # x Aᵀ Bᵀ: (..., d_out)

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha}, rslora={self.rslora}, merged={self.merged}"


class LoRAPackedLinear(_Mergeable):
    """LoRA on some row blocks of a packed projection: ``in_proj`` = [W^Q; W^K; W^V].

    ``parts`` names the adapted blocks (a subset of ``("q", "k", "v")``); each gets its own
    A_p: (r, d_in) and B_p: (d_model, r), and ΔW = [ΔW_q; ΔW_k; ΔW_v] with zeros for the blocks
    left alone (loralib's ``MergedLinear`` with ``enable_lora=[True, False, True]`` for q, v).
    ``weight`` and ``bias`` are the effective ones, so code that reads ``in_proj.weight``
    (cross-attention's separate projections) sees the adapted weights too.
    ``rslora=True`` scales by α/√r instead of α/r (:func:`lora_scaling`).
    """

    def __init__(self, base: nn.Linear, parts: Sequence[str], r: int, alpha: float, *,
                 rslora: bool = False) -> None:
        super().__init__()
        if not parts or set(parts) - set(PARTS):
            raise ValueError(f"parts={parts!r}: a non-empty subset of {PARTS}")
        self.base = base.requires_grad_(False)
        self.parts = tuple(p for p in PARTS if p in parts)
        self.r, self.alpha, self.rslora = r, alpha, rslora
        self.scaling = lora_scaling(r, alpha, rslora)
        self.d = base.out_features // 3
        d_in, device = base.in_features, base.weight.device
        self.lora_A = nn.ParameterDict(
            {p: nn.Parameter(_init_A(torch.empty(r, d_in, device=device))) for p in self.parts})
        self.lora_B = nn.ParameterDict(
            {p: nn.Parameter(torch.zeros(self.d, r, device=device)) for p in self.parts})
        self.merged = False

    def delta_weight(self) -> Tensor:
        """ΔW: (3·d_model, d_in), the blocks of the parts not adapted are zero."""
        W = self.base.weight
        return torch.cat([self.scaling * self.lora_B[p] @ self.lora_A[p] if p in self.parts
                          else W.new_zeros(self.d, W.shape[1]) for p in PARTS])

    @property
    def weight(self) -> Tensor:
        return self.base.weight if self.merged else self.base.weight + self.delta_weight()

    @property
    def bias(self) -> Tensor | None:
        return self.base.bias

    def forward(self, x: Tensor) -> Tensor:
        h = self.base(x)  # (..., 3·d_model)
        if self.merged:
            return h
        zeros = h.new_zeros(*h.shape[:-1], self.d)
        delta = [self.scaling * F.linear(F.linear(x, self.lora_A[p]), self.lora_B[p])
                 if p in self.parts else zeros for p in PARTS]
        return h + torch.cat(delta, dim=-1)

    def extra_repr(self) -> str:
        return (f"parts={self.parts}, r={self.r}, alpha={self.alpha}, rslora={self.rslora}, "
                f"merged={self.merged}")


LORA_LAYERS = (LoRALinear, LoRAPackedLinear)

# ----------------------------------------------------------------------------- injection


def is_target(name: str, target_modules: str | Sequence[str]) -> bool:
    """Whether the module called ``name`` is adapted, by ``peft``'s rule for ``target_modules``.

    A string is a regular expression that must match the whole name (``re.fullmatch``); a list
    matches a name equal to one of its entries or ending with ``"." + entry``:
    ``["q", "v"]`` matches ``"blocks.0.self_attn.q"`` but neither ``"...self_attn.k"`` nor
    ``"...seq"``.
    """
    if isinstance(target_modules, str):
        return re.fullmatch(target_modules, name) is not None
    return any(name == t or name.endswith("." + t) for t in target_modules)


def _set_child(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def inject_lora(model: nn.Module, target_modules: str | Sequence[str], r: int = 8,
                alpha: float = 16, *, rslora: bool = False) -> list[str]:
    """Freeze ``model`` and put LoRA on every projection ``target_modules`` names; return the names.

    ``nn.Linear`` layers are replaced by :class:`LoRALinear`; in each
    :class:`~coursekit.attention.MultiHeadAttention`, the blocks ``q``, ``k``, ``v`` of the packed
    ``in_proj`` that are named get a :class:`LoRAPackedLinear`. Every other parameter is frozen
    (``requires_grad=False``); a new task head is unfrozen by the caller. ``rslora=True`` scales
    every adapter by α/√r instead of α/r, as ``peft``'s ``LoraConfig(use_rslora=True)`` does.
    """
    model.requires_grad_(False)
    adapted: list[str] = []
    for name, module in list(model.named_modules()):
        if isinstance(module, LORA_LAYERS) or any(name.startswith(a + ".") for a in adapted):
            continue
        if isinstance(module, nn.Linear) and is_target(name, target_modules):
            _set_child(model, name, LoRALinear.wrap(module, r, alpha, rslora))
            adapted.append(name)
        elif isinstance(module, MultiHeadAttention):
            prefix = f"{name}." if name else ""
            parts = [p for p in PARTS if is_target(prefix + p, target_modules)]
            if parts:
                module.in_proj = LoRAPackedLinear(module.in_proj, parts, r, alpha, rslora=rslora)
                adapted += [prefix + p for p in parts]
    if not adapted:
        raise ValueError(f"target_modules={target_modules!r} matches no projection of the model")
    return adapted


def lora_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, LORA_LAYERS)]


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base weight: the model computes the same, one matmul per layer."""
    for layer in lora_layers(model):
        layer.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    for layer in lora_layers(model):
        layer.unmerge()
    return model


def remove_lora(model: nn.Module) -> nn.Module:
    """Put the bare base layers back (unmerged first): the model is the pre-trained one again."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LORA_LAYERS):
            module.unmerge()
            _set_child(model, name, module.base)
    return model


def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The adapter: every trainable tensor of the model (the A and B matrices, plus a task head
    if one was unfrozen), and nothing of the frozen base."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_lora(model: nn.Module, adapter: dict[str, Tensor]) -> nn.Module:
    """Load an adapter saved by :func:`lora_state_dict` into a model with the same injection."""
    unmerge_lora(model)
    missing = set(adapter) - {n for n, _ in model.named_parameters()}
    if missing:
        raise KeyError(f"the model has no parameter(s) {sorted(missing)}: inject_lora first")
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, value in adapter.items():
            params[name].copy_(value)
    return model


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def energy_shares(matrix: Tensor) -> Tensor:
    """Each singular direction's share of the energy ‖M‖_F² = Σ_k σ_k², largest first.

    matrix: (..., m, n) -> (..., min(m, n)): non-negative, summing to 1 over the last axis (all 0
    for a zero matrix, which has no energy). The singular values are divided by the largest
    before squaring, so entries of any size give finite shares: unscaled, σ² overflows float32
    at σ ≈ 1.8e19 and rounds to 0 below σ ≈ 2.6e-23 (0 / 0 = NaN).
    """
    s = torch.linalg.svdvals(matrix)                       # (..., min(m, n)), descending
    top = s[..., :1]
    s = s / torch.where(top > 0, top, torch.ones_like(top))
    energy = s * s
    total = energy.sum(-1, keepdim=True)
    return energy / torch.where(total > 0, total, torch.ones_like(total))


def count_lora_parameters(shapes: Iterable[tuple[int, int]], r: int) -> int:
    """Parameters of rank-r adapters on weight matrices of the given (d_out, d_in) shapes:
    r·(d_in + d_out) each."""
    return sum(r * (d_out + d_in) for d_out, d_in in shapes)

# ----------------------------------------------------------------------------- the chapter's tasks
# Chapter 9 adapts one small pre-trained model to new tasks. The model is Chapter 6's
# TinyTransformer as an encoder (no causal mask) that reads N = 8 digits and writes one digit per
# position; each task is a permutation of the input, so it is solved by *where* attention looks.

SEQ_LEN = 8
TASKS = {
    "reverse": lambda x: x.flip(1),  # y_i = x_{N−1−i}: the pre-training task
    "rotate": lambda x: x.roll(-3, dims=1),  # y_i = x_{(i+3) mod N}
    "swap": lambda x: x.view(x.shape[0], -1, 2).flip(2).reshape(x.shape),  # (x1, x0, x3, x2, ...)
}


def digit_task(task: str, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``n`` random inputs (n, N) of digits 0–9 and their targets (n, N) under ``task``."""
    x = torch.randint(0, 10, (n, SEQ_LEN), generator=generator)
    return x, TASKS[task](x)


def task_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    x, y = batch
    return F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())


@torch.no_grad()
def task_accuracy(model: nn.Module, task: str, n: int = 2000, seed: int = 12345) -> float:
    """Fraction of output digits right on ``n`` held-out inputs (the same ones for every model)."""
    model.eval()
    x, y = digit_task(task, n, torch.Generator().manual_seed(seed))
    return (model(x)[0].argmax(-1) == y).float().mean().item()


def train_task(model: nn.Module, task: str, steps: int, lr: float = 3e-3, batch_size: int = 64,
               seed: int = 0, desc: str = "training"):
    """Train the parameters of ``model`` that require a gradient on ``task`` (AdamW, coursekit's
    :func:`~coursekit.train.fit`); -> (the loss history, the optimizer, whose state holds two
    tensors the size of each trained parameter). ``COURSEKIT_SEED`` moves ``seed``
    (:func:`coursekit.seed`)."""
    from coursekit import seed as draw
    from coursekit.train import fit

    generator = torch.Generator().manual_seed(draw(seed))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, foreach=True)  # as fit's
    history = fit(model, task_loss, lambda step: digit_task(task, batch_size, generator),
                  steps=steps, optimizer=optimizer, desc=desc)
    return history, optimizer


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held by the optimizer's state (Adam: the running means m and v of every trained
    parameter, and a step count)."""
    return sum(t.numel() * t.element_size() for state in optimizer.state.values()
               for t in state.values() if isinstance(t, Tensor))


def pretrained_model(steps: int = 100, seed: int = 0) -> nn.Module:
    """The chapter's base model: a 2-layer TinyTransformer encoder (d_model 64, 4 heads)
    pre-trained on ``reverse``. ``COURSEKIT_SEED`` moves ``seed`` (:func:`coursekit.seed`)."""
    from coursekit import seed as draw
    from coursekit.models.tiny_transformer import TinyTransformer

    torch.manual_seed(draw(seed))
    model = TinyTransformer(10, d_model=64, n_heads=4, n_layers=2, max_len=SEQ_LEN, causal=False)
    train_task(model, "reverse", steps, lr=3e-3, seed=seed, desc="pre-training on reverse")
    return model.eval()
