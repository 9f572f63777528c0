"""Chapter 9, notebook 09a — LoRA: ``LoRALinear`` (with merge and unmerge), ``is_target`` and
``energy_shares`` (the spectrum that tests the low-rank hypothesis).

The authority is Hugging Face ``peft``: its LoRA layer (``peft.tuners.lora.Linear``, the layer
``get_peft_model`` puts in place of an ``nn.Linear``) behind the exercise's interface, and its
rule for ``target_modules`` (``check_target_module_exists``); for the energy shares, NumPy's SVD
in float64. Weights are drawn with a large spread (std 0.5) and α/r ≠ 1, so a missing or
inverted scale moves the outputs far past the tolerance.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from coursekit import lora
from coursekit.grading.suite import (
    Backward,
    Case,
    Mutant,
    OutputError,
    Suite,
    as_container,
    backward,
    in_dtype,
    load_parameters,
    scaled_batch,
)

# ----------------------------------------------------------------------------- 09.1 LoRALinear

PEFT_NAMES = {"base.weight": "layer.base_layer.weight", "base.bias": "layer.base_layer.bias",
              "lora_A": "layer.lora_A.default.weight", "lora_B": "layer.lora_B.default.weight"}


class PeftLoRALinear(nn.Module):
    """The authority: ``peft``'s LoRA layer around a frozen ``nn.Linear``, with the exercise's
    constructor and parameter names (``base.weight``, ``base.bias``, ``lora_A``, ``lora_B``)."""

    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        from peft import LoraConfig
        from peft.tuners.lora import Linear

        base = nn.Linear(in_features, out_features, bias=bias).requires_grad_(False)
        config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0)
        self.layer = Linear(base, "default", config=config, r=r, lora_alpha=alpha)

    @property
    def base(self):
        return self.layer.base_layer

    @property
    def lora_A(self):
        return self.layer.lora_A["default"].weight

    @property
    def lora_B(self):
        return self.layer.lora_B["default"].weight

    def load_state_dict(self, state, strict=True, assign=False):
        return super().load_state_dict({PEFT_NAMES.get(k, k): v for k, v in state.items()},
                                       strict=strict, assign=assign)

    def named_parameters(self, *args, **kwargs):
        """Under the exercise's names, as the gradients are compared by name."""
        inverse = {peft: mine for mine, peft in PEFT_NAMES.items()}
        for name, p in super().named_parameters(*args, **kwargs):
            yield inverse.get(name, name), p

    def forward(self, x):
        return self.layer(x)

    def merge(self):
        with warnings.catch_warnings():  # "already merged": a no-op, as the exercise asks
            warnings.simplefilter("ignore")
            self.layer.merge()

    def unmerge(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.layer.unmerge()


def _detached(value, what):
    """``value.detach()`` (works on a parameter here and on a handle to one in a grading worker)."""
    try:
        out = value.detach()
    except AttributeError:
        raise OutputError(f"{what} is not a tensor; it should be an nn.Parameter") from None
    if type(out) is not torch.Tensor:
        raise OutputError(f"{what} is not a tensor; it should be an nn.Parameter")
    return out


def run_lora_linear(cls, args):
    d_in, d_out, r, alpha, weights, x, action, bias = args
    module = cls(d_in, d_out, r, alpha, bias=bias) if not bias else cls(d_in, d_out, r, alpha)
    if action == "init":  # W₀ and b given, A and B as the constructor drew them
        load_parameters(module.base, dict(zip(("weight", "bias"), weights, strict=True)))
        with torch.no_grad():
            y = module(x)
        B = _detached(module.lora_B, "self.lora_B")
        if not isinstance(y, torch.Tensor):
            raise OutputError(f"forward returned a {type(y).__name__}, expected a tensor")
        unchanged = y.shape == x.shape[:-1] + (d_out,) and torch.allclose(
            y, F.linear(x, *weights), atol=1e-5, rtol=1e-5)
        # shape of B, "B is zero", "the output is W₀x + b": the same whatever A was drawn
        return torch.tensor([*map(float, B.shape), float((B == 0).all()), float(unchanged)])
    if action == "trainable":
        flags = [module.base.weight.requires_grad, module.base.bias.requires_grad,
                 module.lora_A.requires_grad, module.lora_B.requires_grad]
        return torch.tensor([float(bool(f)) for f in flags])
    if action == "A":
        A = _detached(module.lora_A, "self.lora_A")
        bound = 1 / math.sqrt(d_in) + 1e-6  # Kaiming-uniform (a = √5): U(−1/√d_in, 1/√d_in)
        return torch.tensor([float(A.shape[0]), float(A.shape[-1]), float(A.abs().max() <= bound),
                             float((A != 0).float().mean() > 0.9)])
    names = ("base.weight", "base.bias", "lora_A", "lora_B") if bias else (
        "base.weight", "lora_A", "lora_B")
    load_parameters(module, dict(zip(names, weights, strict=True)))
    module.eval()
    with torch.no_grad():
        for step in action.split("+")[1:]:  # "forward+merge+unmerge": the calls, in order
            getattr(module, step)()
    W = _detached(module.base.weight, "self.base.weight")
    # The forward pass and its backward: which parameters are trainable after the calls (a
    # merge must not unfreeze W₀), and the gradients that training A and B would use.
    run = backward(module, (x,), {"x": 0}, params=True)
    return Backward((run.value, W), run.grads)


def _lora_case(d_in, d_out, r, alpha, action, shape=(2, 5), bias=True):
    def make(g):
        W0 = 0.5 * torch.randn(d_out, d_in, generator=g)
        b = 0.5 * torch.randn(d_out, generator=g)
        A = 0.5 * torch.randn(r, d_in, generator=g)
        B = 0.5 * torch.randn(d_out, r, generator=g)
        x = torch.randn(*shape, d_in, generator=g)
        weights = (W0, b) if action == "init" else (W0, b, A, B) if bias else (W0, A, B)
        return d_in, d_out, r, alpha, weights, x, action, bias

    return make


class _LoRAVariant(nn.Module):
    """A wrong LoRALinear, one bug switched on by the class attributes."""

    B_init = "zeros"  # or "kaiming", "A too"
    scale = "alpha/r"  # or "none", "r/alpha", "alpha//r"
    merge_scaled = True  # False: merge() adds B A without α/r
    freeze = True
    transposed = False
    merge_guard = True
    forward_after_merge = "base only"  # or "adds the path again"

    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias)
        self.base.requires_grad_(not self.freeze)
        self.scaling = {"alpha/r": alpha / r, "none": 1.0, "r/alpha": r / alpha,
                        "alpha//r": alpha // r}[self.scale]
        shape_A, shape_B = ((in_features, r), (r, out_features)) if self.transposed \
            else ((r, in_features), (out_features, r))
        self.lora_A = nn.Parameter(torch.empty(shape_A))
        self.lora_B = nn.Parameter(torch.zeros(shape_B))
        if self.B_init == "A too":
            nn.init.zeros_(self.lora_A)
        else:
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        if self.B_init == "kaiming":
            nn.init.kaiming_uniform_(self.lora_B, a=math.sqrt(5))
        self.merged = False

    def delta(self):
        BA = self.lora_A @ self.lora_B if self.transposed else self.lora_B @ self.lora_A
        return self.scaling * (BA.T if self.transposed else BA)

    def forward(self, x):
        h = self.base(x)
        if self.merged and self.forward_after_merge == "base only":
            return h
        return h + F.linear(x, self.delta())

    @torch.no_grad()
    def merge(self):
        if self.merge_guard and self.merged:
            return
        self.base.weight += self.delta() if self.merge_scaled else self.lora_B @ self.lora_A
        self.merged = True

    @torch.no_grad()
    def unmerge(self):
        if self.merged:
            self.base.weight -= self.delta()
            self.merged = False


def _lora_variant(**bugs):
    return type("LoRALinear", (_LoRAVariant,), bugs)


LORA_CASES = [
    Case("at initialisation the layer equals W₀x + b", _lora_case(8, 6, 4, 8, "init"),
         hint="B starts at zero (nn.init.zeros_ or torch.zeros), so ΔW = BA = 0 and the adapted "
              "model starts exactly as the pre-trained one."),
    Case("only A and B are trainable", _lora_case(8, 6, 4, 8, "trainable"),
         hint="Freeze W₀ and b: self.base.requires_grad_(False). Only lora_A and lora_B may "
              "receive gradients."),
    Case("A: (r, d_in), random, Kaiming-uniform", _lora_case(16, 6, 4, 8, "A"),
         hint="lora_A has shape (r, d_in) and is drawn Kaiming-uniform (a = √5, as nn.Linear "
              "draws weights): if A were zero too, neither A nor B would ever get a gradient."),
    Case("forward, r = 4, α = 8", _lora_case(8, 6, 4, 8, "forward")),
    Case("forward, r = 2, α = 3 (α/r = 1.5)", _lora_case(5, 7, 2, 3, "forward", (3, 4)),
         hint="The update is scaled by α/r: h = W₀x + b + (α/r)·B A x."),
    Case("forward, r = 1, d_in ≠ d_out, 3-D input", _lora_case(6, 9, 1, 4, "forward", (2, 3, 4))),
    Case("merge: same outputs, W₀ + (α/r)BA", _lora_case(8, 6, 4, 2, "forward+merge"),
         hint="merge() adds ΔW = (α/r)·B A to self.base.weight, and afterwards forward computes "
              "the base layer alone (the LoRA path is inside W now)."),
    Case("merge twice = merge once", _lora_case(8, 6, 2, 8, "forward+merge+merge"),
         hint="A second merge() must do nothing: keep a flag (self.merged) and return early."),
    Case("merge then unmerge restores W₀", _lora_case(8, 6, 4, 8, "forward+merge+unmerge"),
         hint="unmerge() subtracts the same ΔW and clears the flag: W₀ and the unmerged forward "
              "pass come back."),
    Case("unmerge without merge does nothing", _lora_case(6, 6, 2, 8, "forward+unmerge")),
    Case("bias=False: a base layer without a bias", _lora_case(8, 6, 4, 8, "forward+merge",
                                                               bias=False),
         hint="Pass bias on to the base layer, nn.Linear(in_features, out_features, bias=bias): "
              "with bias=False it has no bias parameter."),
]

# ----------------------------------------------------------------------------- 09.2 is_target


def peft_is_target(name, target_modules):
    """The authority: peft's own matching of ``target_modules`` against a module name (a str,
    or any collection of names: peft's LoraConfig takes a list, a tuple or a set)."""
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists

    config = LoraConfig(target_modules=target_modules if isinstance(target_modules, str)
                        else sorted(target_modules))
    return bool(check_target_module_exists(config, name))


def run_is_target(fn, args):
    names, target_modules = args
    out = []
    for name in names:
        got = fn(name, target_modules)
        if type(got) is not bool:
            raise OutputError(f"is_target returned a {type(got).__name__}; return True or False "
                              "(re.fullmatch(...) is not None, any(...))")
        out.append(float(got))
    return torch.tensor(out)


NAMES = ("tok", "blocks.0.self_attn.q", "blocks.0.self_attn.k", "blocks.0.self_attn.v",
         "blocks.0.self_attn.out_proj", "blocks.0.ff.linear1", "blocks.0.ff.linear2",
         "blocks.1.self_attn.q", "blocks.1.self_attn.v", "blocks.1.ff.linear1", "head")


def _target_case(target_modules):
    """A str (a regex) or a list of names, as peft's LoraConfig takes them."""
    return lambda g: (NAMES, target_modules if isinstance(target_modules, str)
                      else list(target_modules))


def _matcher(rule):
    def is_target(name, target_modules):
        if isinstance(target_modules, str):
            if rule == "list only":
                return any(name == t or name.endswith("." + t) for t in target_modules)
            find = {"search": re.search, "match": re.match}.get(rule, re.fullmatch)
            return find(target_modules, name) is not None
        if rule == "substring":
            return any(t in name for t in target_modules)
        if rule == "suffix without the dot":
            return any(name.endswith(t) for t in target_modules)
        if rule == "suffix only":
            return any(name.endswith("." + t) for t in target_modules)
        if rule == "first entry only":  # a return inside the loop
            for t in target_modules:
                return name == t or name.endswith("." + t)
            return False
        return any(name == t or name.endswith("." + t) for t in target_modules)

    return is_target


TARGET_CASES = [
    Case("['q', 'v']: W_q and W_v of every block", _target_case(("q", "v"))),
    Case("['proj']: a name must end with '.proj', not with 'proj'", _target_case(("proj",)),
         hint="A list entry names a whole last part (or several): 'blocks.0.self_attn.out_proj' "
              "ends with '.out_proj', not with '.proj'. Test name == t or "
              "name.endswith('.' + t)."),
    Case("['linear']: no substring matches", _target_case(("linear",)),
         hint="'linear' is not the name of any module ('linear1' is): a list entry matches a name "
              "equal to it or ending with '.' + entry, never a substring."),
    Case("['head']: a whole name", _target_case(("head",)),
         hint="A list entry may be the whole name ('head' has no dot before it): test name == t "
              "as well as name.endswith('.' + t)."),
    Case("['self_attn.v']: a suffix of two parts", _target_case(("self_attn.v",)),
         hint="A list entry may hold dots: 'self_attn.v' matches every name that ends with "
              "'.self_attn.v', so compare the end of the name with '.' + entry, not only its "
              "last part."),
    Case("a regex over the whole name", _target_case(r"blocks\.1\.self_attn\.(q|v)"),
         hint="A string is a regular expression, not a list of names: re.fullmatch(pattern, name)."),
    Case("a regex that matches only inside the name", _target_case(r"self_attn\.(q|v)"),
         hint="The pattern must match the whole name (re.fullmatch), not somewhere inside it "
              "(re.search)."),
    Case("a regex that matches only a prefix", _target_case(r"blocks\.0"),
         hint="The pattern must match the whole name: re.fullmatch, not re.match (which "
              "accepts a match of the name's beginning)."),
    Case("a regex with a top-level alternation, 'blocks\\.0|head'", _target_case(r"blocks\.0|head"),
         hint="The whole pattern must match the whole name: re.fullmatch(pattern, name). Anchors "
              "added by hand, '^' + pattern + '$', bind to the first and the last alternative "
              "only: '^blocks\\.0|head$' accepts every name that starts with 'blocks.0'."),
]
# Anything but a string is a collection of names: a tuple as well as a list (peft's LoraConfig
# takes both, and a set; the batch grader's protocol carries lists and tuples, not sets).
TARGET_CASES.append(as_container(
    TARGET_CASES[0], 1, tuple,
    hint="This case passes the names as a tuple where the others pass a list: anything that is "
         "not a string is a collection of names. Test isinstance(target_modules, str) for the "
         "regular expression, and iterate over anything else."))
TARGET_READINGS = (
    (r"'a regex over the whole name', your output is zero everywhere",
     "No name matches your pattern: a string target_modules is a regular expression, matched "
     "against each name with re.fullmatch(target_modules, name), the pattern first (not "
     "escaped, and not compared with the name as a plain string)."),
)

# ----------------------------------------------------------------------------- 09.6 energy_shares


def numpy_energy_shares(matrix):
    """The authority: NumPy's SVD (LAPACK) in float64, where σ² of float32 inputs cannot overflow
    or underflow; the shares are cast back to the input's dtype."""
    s = np.linalg.svd(matrix.detach().double().numpy(), compute_uv=False)
    energy = s ** 2
    total = energy.sum(-1, keepdims=True)
    return torch.from_numpy(energy / np.where(total > 0, total, 1.0)).to(matrix.dtype)


def _matrix_case(*shape, scale=1.0, rank=None, values=None):
    def make(g):
        if values is not None:
            return (torch.tensor(values),)
        if rank is None:
            return (scale * torch.randn(*shape, generator=g),)
        *batch, m, n = shape
        B = torch.randn(*batch, m, rank, generator=g)
        A = torch.randn(*batch, rank, n, generator=g)
        return (scale * (B @ A),)

    return make


def _shares_variant(bug):
    def energy_shares(matrix):
        if bug == "eigenvalues":
            s = torch.linalg.eigvals(matrix).abs().sort(descending=True).values
        else:
            s = torch.linalg.svdvals(matrix)
        if bug not in ("squared first", "eigenvalues"):
            top = s[..., :1]
            s = s / (top if bug == "zero matrix" else torch.where(top > 0, top, torch.ones_like(top)))
        energy = s if bug == "sigma" else s * s
        if bug == "not normalised":
            return energy
        total = energy.sum() if bug == "whole batch" else energy.sum(-1, keepdim=True)
        if bug != "zero matrix":
            total = torch.where(total > 0, total, torch.ones_like(total))
        out = energy / total
        if bug == "ascending":
            return out.flip(-1)
        if bug == "cumulative":
            return out.cumsum(-1)
        return out

    return energy_shares


SHARES_CASES = [
    Case("diag(3, 4, 0): shares 16/25, 9/25, 0", _matrix_case(values=[[3.0, 0, 0], [0, 4.0, 0],
                                                                       [0, 0, 0]]),
         hint="The energy is Σ σ_k² = 9 + 16 + 0 = 25; the shares, largest first, are 16/25, "
              "9/25 and 0."),
    Case("a Gaussian 8 × 8", _matrix_case(8, 8)),
    Case("wide 6 × 10: min(m, n) = 6 shares", _matrix_case(6, 10),
         hint="A (m, n) matrix has min(m, n) singular values: torch.linalg.svdvals(matrix) "
              "gives them, largest first."),
    Case("tall 10 × 4", _matrix_case(10, 4)),
    Case("not symmetric: [[1, 3], [0, 1]]", _matrix_case(values=[[1.0, 3.0], [0.0, 1.0]]),
         hint="The energy is spread over the singular values, not the eigenvalues: "
              "[[1, 3], [0, 1]] has both eigenvalues 1 but singular values 3.30 and 0.30."),
    Case("rank 2, 16 × 16: two shares hold it all", _matrix_case(16, 16, rank=2)),
    Case("a batch (2, 3, 5, 4): shares per matrix", _matrix_case(2, 3, 5, 4),
         hint="matrix may hold a batch (..., m, n): normalise each matrix's shares over the last "
              "axis, sum(-1, keepdim=True), not over the whole tensor."),
    Case("a zero matrix: no energy, shares 0", _matrix_case(values=[[0.0, 0.0], [0.0, 0.0],
                                                                     [0.0, 0.0]]),
         hint="A zero matrix has no energy: return zeros (divide only where the total is "
              "positive), not 0 / 0 = NaN."),
    Case("entries of size 1e25: σ² overflows float32", _matrix_case(6, 6, scale=1e25),
         hint="With entries of size 1e25, σ_k² exceeds float32's largest number (3.4e38) and "
              "becomes inf, and inf / inf is NaN. Divide the singular values by the largest "
              "before squaring: the shares do not change."),
    Case("entries of size 1e-25: σ² underflows to 0", _matrix_case(6, 6, scale=1e-25),
         hint="With entries of size 1e-25, σ_k² is below float32's smallest number and rounds "
              "to 0. Divide the singular values by the largest before squaring: the shares do "
              "not change."),
    Case("entries of size 1e-35, near float32's smallest normal number",
         _matrix_case(6, 6, scale=1e-35),
         hint="Entries of any size have shares: divide the singular values by the largest one "
              "itself, however small, and guard only a zero (a clamp or an epsilon such as 1e-12 "
              "turns σ_k / σ_1 into numbers whose squares underflow to 0)."),
]
SHARES_CASES += [
    scaled_batch(SHARES_CASES[6], 0, (1e15, 1e-15),
                 hint="In this case the two halves of the batch differ in scale by 1e30: divide "
                      "each matrix's singular values by its own largest one, s[..., :1], not by "
                      "the largest of the whole batch."),
    in_dtype(SHARES_CASES[1], torch.float64,
             hint="This case passes a float64 matrix: return its shares in float64 (svdvals "
                  "keeps the dtype; a .float(), or a float32 constant, does not)."),
]
SHARES_READINGS = (
    (r"'entries of size 1e25: σ² overflows float32', your output is zero everywhere",
     "Your shares are all 0 for entries of size 1e25: something overflowed to inf (σ², or a norm "
     "of σ, which torch computes without rescaling) and the division by it gave 0. Divide σ by "
     "its largest value before squaring it or taking a norm."),
)

SUITES = [
    Suite(
        exercise="09.1",
        name="LoRALinear",
        points=5,
        reference=PeftLoRALinear,
        solution=lora.LoRALinear,
        call=run_lora_linear,
        arg_names=("in_features", "out_features", "r", "alpha", "weights", "x", "action", "bias"),
        cases=LORA_CASES,
        hint="h = W₀x + b + (α/r)·B A x with W₀, b frozen, A: (r, d_in) random, B: (d_out, r) "
             "zero; merge() adds (α/r)·B A to W₀ once, unmerge() subtracts it.",
        mutants=[
            Mutant("B not zero at initialisation", _lora_variant(B_init="kaiming"),
                   "B must start at zero: with a random B the adapted model differs from the "
                   "pre-trained one before any training. Initialise lora_B with zeros."),
            Mutant("A zero too", _lora_variant(B_init="A too"),
                   "A must be random: with A = 0 and B = 0 the gradients of both are zero and "
                   "the adapter never learns. Draw lora_A Kaiming-uniform (a = √5)."),
            Mutant("no scale", _lora_variant(scale="none"),
                   "The low-rank path is scaled by α/r: h = W₀x + b + (α/r)·B A x. Yours adds B A x "
                   "unscaled."),
            Mutant("scale inverted", _lora_variant(scale="r/alpha"),
                   "Your scale is r/α; LoRA scales by α/r (self.scaling = alpha / r)."),
            Mutant("W₀ left trainable", _lora_variant(freeze=False),
                   "W₀ and b must be frozen (self.base.requires_grad_(False)): only A and B are "
                   "trained, which is the point of LoRA."),
            Mutant("A and B transposed", _lora_variant(transposed=True),
                   "A is (r, d_in) and B is (d_out, r), as in ΔW = B A: (d_out, d_in). Yours are "
                   "stored the other way round."),
            Mutant("merge applied twice", _lora_variant(merge_guard=False),
                   "Calling merge() twice adds ΔW twice. Keep a flag: merge() does nothing when "
                   "self.merged is already True."),
            Mutant("the LoRA path added again after merge",
                   _lora_variant(forward_after_merge="adds the path again"),
                   "After merge() the update is inside self.base.weight: forward must then "
                   "return the base layer's output alone, or ΔW counts twice."),
            Mutant("scale as an integer division", _lora_variant(scale="alpha//r"),
                   "Your scale is α // r, an integer division: α = 3, r = 2 gives 1, not 1.5 "
                   "(and α = 2, r = 4 gives 0). Use self.scaling = alpha / r."),
            Mutant("merge without the scale", _lora_variant(merge_scaled=False),
                   "merge() adds B A without the scale: ΔW = (α/r)·B A, the same update the "
                   "forward pass adds, so that the merged layer computes what the unmerged one "
                   "did (and unmerge() subtracts that same ΔW)."),
        ],
        # the flags of the 'trainable' case are (W₀, b, A, B): (0, 1, 1, ·) against (0, 0, 1, 1)
        readings=((r"'only A and B are trainable', your output holds the expected values one "
                   r"position earlier along axis 0",
                   "The trainable flags of (W₀, b, A, B) show self.base.bias trainable: freeze "
                   "the whole base layer, self.base.requires_grad_(False); setting "
                   "self.base.weight.requires_grad = False alone leaves the bias trainable."),),
    ),
    Suite(
        exercise="09.2",
        name="is_target",
        points=2,
        reference=peft_is_target,
        solution=lora.is_target,
        call=run_is_target,
        arg_names=("names", "target_modules"),
        cases=TARGET_CASES,
        hint="A list matches a name equal to an entry or ending with '.' + entry; a string is a "
             "regular expression that must match the whole name.",
        mutants=[
            Mutant("substring", _matcher("substring"),
                   "You match substrings ('linear' in 'blocks.0.ff.linear1'). peft matches a "
                   "list entry only as the whole name or its last dotted parts: "
                   "name == t or name.endswith('.' + t)."),
            Mutant("suffix without the dot", _matcher("suffix without the dot"),
                   "name.endswith(t) also accepts 'out_proj' for 'proj': test the suffix with "
                   "its dot, name.endswith('.' + t)."),
            Mutant("suffix only", _matcher("suffix only"),
                   "A name equal to an entry ('head') matches too: add name == t."),
            Mutant("re.search", _matcher("search"),
                   "re.search finds the pattern anywhere in the name; peft requires it to match "
                   "the whole name: re.fullmatch."),
            Mutant("re.match", _matcher("match"),
                   "re.match accepts a pattern that matches only the beginning of the name; "
                   "peft requires the whole name: re.fullmatch."),
            Mutant("a string treated as a list", _matcher("list only"),
                   "A string target_modules is one regular expression (isinstance(target_modules, "
                   "str)): iterating over it goes over its characters."),
            Mutant("returns after the first entry", _matcher("first entry only"),
                   "Your code decides on the first entry alone (a return inside the loop): a "
                   "name that matches a later entry ('v' in ['q', 'v']) is missed. Return True "
                   "on a match and False only after the loop, or use any(...)."),
        ],
        readings=TARGET_READINGS,
    ),
]

SUITES.append(Suite(
    exercise="09.6",  # 09.3-09.5 are 09b's, which came first
    name="energy_shares",
    points=2,
    reference=numpy_energy_shares,
    solution=lora.energy_shares,
    arg_names=("matrix",),
    cases=SHARES_CASES,
    readings=SHARES_READINGS,
    hint="σ = torch.linalg.svdvals(matrix) (largest first), divided by σ[..., :1] where it is "
         "positive; the shares are σ² / Σ σ² over the last axis, 0 where the sum is 0.",
    mutants=[
        Mutant("σ, not σ²", _shares_variant("sigma"),
               "Your shares are σ_k / Σ σ: the energy is the sum of the squares, ‖M‖_F² = "
               "Σ σ_k², so each share is σ_k² / Σ σ²."),
        Mutant("not normalised", _shares_variant("not normalised"),
               "Your values do not sum to 1: divide the energies σ_k² by their sum over the last "
               "axis."),
        Mutant("ascending", _shares_variant("ascending"),
               "Your shares are in ascending order; the largest comes first (svdvals already "
               "returns the singular values in descending order)."),
        Mutant("cumulative", _shares_variant("cumulative"),
               "You return the cumulative shares (the top k together); return each direction's "
               "own share, σ_k² / Σ σ² (the notebook takes the cumsum afterwards)."),
        Mutant("eigenvalues", _shares_variant("eigenvalues"),
               "You use eigenvalues; the energy ‖M‖_F² is the sum of the squared singular values "
               "(torch.linalg.svdvals), which equal |eigenvalues| only for a symmetric matrix "
               "and exist for a rectangular one."),
        Mutant("normalised over the whole batch", _shares_variant("whole batch"),
               "With a batch of matrices, your shares sum to 1 over the whole batch: normalise "
               "each matrix's over the last axis, sum(-1, keepdim=True)."),
        Mutant("squared before scaling", _shares_variant("squared first"),
               "σ² overflows float32 for entries of size 1e25 (inf / inf = NaN) and underflows "
               "to 0 for entries of size 1e-25: divide the singular values by the largest "
               "before squaring."),
        Mutant("0 / 0 for a zero matrix", _shares_variant("zero matrix"),
               "A zero matrix has no energy and your shares come out NaN (0 / 0): divide only "
               "where the largest singular value and the total are positive, and return zeros "
               "otherwise."),
    ],
))
