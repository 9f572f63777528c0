"""Chapter 7d — the modern decoder: ``rms_norm``, ``SwiGLU`` and ``grouped_query_attention``.

The authorities: ``F.rms_norm``; Hugging Face's ``LlamaMLP`` loaded with the case's weights
(drawn with std 0.5, so that a swapped gate or another activation moves the outputs far past the
tolerance); ``F.scaled_dot_product_attention(..., enable_gqa=True)``, whose weights come from
attending to the identity matrix (with V = I the output *is* the weight matrix).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.attention import causal_mask, padding_mask
from coursekit.grading.suite import Case, Mutant, Suite, backward, in_dtype, load_parameters
from coursekit.grading.suites.ch07_readings import DTYPE_READING, capitalised, dtype_observation
from coursekit.models import llama
from coursekit.transformer import rms_norm

# ----------------------------------------------------------------------------- 07.11 rms_norm


def torch_rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rms_case(shape, eps=1e-6, dtype=torch.float32, by_hand=False, scale=1.0, offset=0.0,
              zero_token=False):
    def make(g):
        d = shape[-1]
        if by_hand:  # (1, 2, 3, 4): mean of squares 7.5, RMS √7.5 ≈ 2.739, γ = 1
            return torch.arange(1.0, d + 1).expand(shape).clone(), torch.ones(d), eps
        weight = (1 + 0.5 * torch.randn(d, generator=g)).to(dtype)
        x = torch.randn(shape, generator=g, dtype=dtype) * scale + offset
        if zero_token:
            x[..., 0, :] = 0.0
        return x, weight, eps

    return make


def _rms_variant(*, centre=False, eps_outside=False, gain=True, one_plus=False, l2=False,
                 fixed_eps=None, variance=False, unbiased=False):
    def rms_norm(x, weight, eps=1e-6):
        eps = eps if fixed_eps is None else fixed_eps
        if centre:
            x = x - x.mean(dim=-1, keepdim=True)
        if variance or unbiased:
            square = x.var(dim=-1, keepdim=True, unbiased=unbiased)
        elif l2:
            square = x.pow(2).sum(dim=-1, keepdim=True)
        else:
            square = x.pow(2).mean(dim=-1, keepdim=True)
        y = x / (square.sqrt() + eps) if eps_outside else x / (square + eps).sqrt()
        if one_plus:
            return y * (1 + weight)
        return y * weight if gain else y

    return rms_norm


# ε matters in these cases: a fixed ε, an ε added after the root and an ε used as a clamp fail
# them alike, so their hint names what the case probes and every way to get it wrong
EPS_HINT = ("In this case ε matters (ε = 0.5, or inputs whose mean(x²) is about ε, or a token of "
            "zeros, where the output is 0 and its gradient is γ/√ε): use the `eps` argument, not a "
            "fixed ε, and add it to mean(x²) inside the square root, x / √(mean(x²) + ε), not "
            "after the root and not as a clamp.")

RMS_CASES = [
    Case("by hand: one token (1, 2, 3, 4), γ = 1", _rms_case((1, 1, 4), by_hand=True)),
    Case("B=2, N=3, d_model=8, random γ", _rms_case((2, 3, 8))),
    Case("tokens whose mean is far from 0", _rms_case((2, 3, 8), offset=3.0),
         hint="RMSNorm does not centre: divide x itself by √(mean(x²) + ε); no mean is "
              "subtracted, so a token's mean survives the norm."),
    Case("N = d_model = 6", _rms_case((2, 6, 6)),
         hint="Normalise each token over its own d_model features: the mean of x² over the last "
              "dimension, not over the positions."),
    Case("large ε = 0.5", _rms_case((2, 3, 8), eps=0.5), hint=EPS_HINT),
    Case("small inputs (about 1e-3): ε matters", _rms_case((2, 3, 8), scale=1e-3), hint=EPS_HINT),
    Case("a zero token", _rms_case((2, 3, 8), zero_token=True), hint=EPS_HINT),
    Case("inputs of magnitude 1e4", _rms_case((2, 3, 8), scale=1e4), grad=False),
    Case("one vector (d_model,) with no leading axes", _rms_case((16,))),
    Case("float64", _rms_case((2, 4, 8), eps=1e-8, dtype=torch.float64),
         hint="Compute in the input's dtype: a float64 input gives a float64 output."),
]
# the text asks for the input's dtype: a model in bfloat16 normalises in bfloat16
RMS_CASES.append(in_dtype(RMS_CASES[1], torch.bfloat16))


def observe_rms(expected, got) -> str:
    """Tokens that point the right way with the wrong length (one factor per token), or
    elements divided by a root mean square taken along another axis than the last."""
    if said := dtype_observation(expected, got):
        return said
    e, a = expected[0], got[0]
    if a.shape != e.shape or a.dtype != e.dtype or not a.is_floating_point() or e.dim() < 1:
        return ""
    e, a = e.detach().double(), a.detach().double()
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()) or torch.allclose(
            a, e, atol=1e-5, rtol=1e-4):
        return ""
    d = e.shape[-1]
    te, ta = e.reshape(-1, d), a.reshape(-1, d)
    nonzero = te.abs() > 1e-9 * te.abs().max()
    if not nonzero.all():
        return ""
    ratio = ta / te
    factor = ratio.mean(-1, keepdim=True)
    if torch.allclose(ratio, factor.expand_as(ratio), rtol=1e-3, atol=0) and (factor > 0).all():
        shown = ", ".join(f"{float(f):.3g}" for f in factor[:4, 0])
        more = ", ..." if len(factor) > 4 else ""
        return (f"each token of your output is the expected token times a factor of its own "
                f"({shown}{more}): every token points the right way, with the wrong length")
    log = ratio.log() if (ratio > 0).all() else None
    if log is None or e.dim() < 2:
        return ""
    log = log.reshape(e.shape)
    for axis in range(e.dim() - 1):
        if e.shape[axis] < 2:
            continue
        rest = (log - log.mean(-1, keepdim=True) - log.mean(axis, keepdim=True)
                + log.mean((axis, -1), keepdim=True))
        if rest.abs().max() < 1e-4:
            return (f"your output is the expected one with each element divided by a root mean "
                    f"square taken along axis {axis} instead of the last axis (the features)")
    return ""


RMS_READINGS = (
    DTYPE_READING,
    (r"every token points the right way, with the wrong length",
     "Each token's divisor is wrong. Divide each token x by √(mean(x²) + ε): the mean of the "
     "squares (not of |x|) of x itself (γ multiplies after normalising), over that token's own "
     "d_model features (the last axis: not the whole tensor, nor another axis), with ε the "
     "`eps` argument (not a fixed ε) added inside the square root (not after it, not as a "
     "clamp)."),
    (r"root mean square taken along axis \d+ instead of the last axis",
     "Normalise each token over its own features, the last axis: "
     "x.pow(2).mean(dim=-1, keepdim=True)."),
)

# ----------------------------------------------------------------------------- 07.12 SwiGLU

SWIGLU_NAMES = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")


def hf_swiglu(d_model, d_ff):
    """The authority: Hugging Face's ``LlamaMLP`` (the same parameter names) of that shape."""
    # from the modules themselves, not through ``transformers``' lazy top level, which two
    # grading threads importing at once can catch half-initialised
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    return LlamaMLP(LlamaConfig(hidden_size=d_model, intermediate_size=d_ff, hidden_act="silu",
                                num_attention_heads=1, num_key_value_heads=1))


def run_swiglu(cls, args):
    d_model, d_ff, *weights, x = args
    module = cls(d_model, d_ff)
    load_parameters(module, dict(zip(SWIGLU_NAMES, weights, strict=True)))
    module.to(x.dtype)  # a model moved to bfloat16: the module computes in it
    module.eval()
    return backward(module, (x,), {"x": 0}, params=True)


def _swiglu_case(B, N, d_model, d_ff, scale=1.0):
    def make(g):
        weights = [0.5 * torch.randn(d_ff, d_model, generator=g),
                   0.5 * torch.randn(d_ff, d_model, generator=g),
                   0.5 * torch.randn(d_model, d_ff, generator=g)]
        return (d_model, d_ff, *weights, scale * torch.randn(B, N, d_model, generator=g))

    return make


def _swiglu_variant(form):
    class SwiGLU(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
            self.up_proj = nn.Linear(d_model, d_ff, bias=False)
            self.down_proj = nn.Linear(d_ff, d_model, bias=False)

        def forward(self, x):
            gate, up = self.gate_proj(x), self.up_proj(x)
            hidden = {
                "swapped": lambda: F.silu(up) * gate,
                "gelu": lambda: F.gelu(gate) * up,
                "sigmoid": lambda: torch.sigmoid(gate) * up,
                "relu": lambda: F.relu(gate) * up,
                "bilinear": lambda: gate * up,
                "after": lambda: F.silu(gate * up),
                "both": lambda: F.silu(gate) * F.silu(up),
                "no up": lambda: F.silu(gate),
                "tanh gelu": lambda: F.gelu(gate, approximate="tanh") * up,
                "sigmoid gelu": lambda: gate * torch.sigmoid(1.702 * gate) * up,
                "sum": lambda: F.silu(gate) + up,
            }[form]()
            return self.down_proj(hidden)

    return SwiGLU


GELU_HINT = ("You gate with {}: that is GEGLU. SwiGLU's gate is SiLU, z·σ(z) (F.silu).")

SWIGLU_CASES = [
    Case("B=2, N=3, d_model=8, d_ff=16", _swiglu_case(2, 3, 8, 16)),
    Case("d_ff < d_model: d_model=8, d_ff=4", _swiglu_case(2, 3, 8, 4),
         hint="gate_proj and up_proj map d_model -> d_ff, down_proj maps d_ff -> d_model "
              "(nn.Linear(d_model, d_ff, bias=False), ...)."),
    Case("one position", _swiglu_case(1, 1, 6, 12)),
    Case("d_model=12, d_ff=32 (2/3 · 4 · 12 rounded up to a multiple of 8)",
         _swiglu_case(3, 4, 12, 32)),
    Case("inputs of magnitude 10", _swiglu_case(2, 3, 8, 16, scale=10.0), grad=False),
]
SWIGLU_CASES.append(in_dtype(SWIGLU_CASES[0], torch.bfloat16, hint=(
    "This case runs the module in bfloat16 (module.to(torch.bfloat16), as a model is run): "
    "compute in x's dtype, with no .float() or float32 constant on the way, and return "
    "bfloat16.")))

# ----------------------------------------------------------------------------- 07.13 grouped_query_attention


def torch_gqa(q, k, v, mask=None):
    """(output, weights) from ``F.scaled_dot_product_attention(..., enable_gqa=True)`` alone."""
    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-2], -1, -1)
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, enable_gqa=True)
    return output, weights


def _gqa_case(B, H, H_kv, n_q, n_k, d=8, d_v=None, mask="causal", scale=1.0, dtype=torch.float32):
    def make(g):
        q = scale * torch.randn(B, H, n_q, d, generator=g, dtype=dtype)
        k = scale * torch.randn(B, H_kv, n_k, d, generator=g, dtype=dtype)
        v = torch.randn(B, H_kv, n_k, d_v or d, generator=g, dtype=dtype)
        if mask == "causal":  # the new queries are the last n_q positions (a cache holds the rest)
            return q, k, v, causal_mask(n_q, n_k)
        if mask == "padding":  # (B, 1, 1, N_k): the second row's last two keys are padding
            lengths = torch.tensor([n_k] + [n_k - 2] * (B - 1))
            return q, k, v, padding_mask(lengths, n_k)[:, None, None, :]
        return q, k, v

    return make


def _gqa_variant(*, expand="interleave", use_mask=True, scale=True, dim=-1, group_scale=False,
                 fixed_group=None):
    def grouped_query_attention(q, k, v, mask=None):
        group = q.shape[-3] // k.shape[-3] if fixed_group is None else fixed_group
        if expand == "interleave":
            k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
        elif expand == "tile":
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        else:  # every query head reads the first key/value head
            k, v = (t[:, :1].expand(-1, q.shape[-3], -1, -1) for t in (k, v))
        scores = q @ k.transpose(-2, -1)
        if scale:
            scores = scores / math.sqrt(q.shape[-1] * (group if group_scale else 1))
        if use_mask and mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=dim)
        return weights @ v, weights

    return grouped_query_attention


def _gqa_grouped_wrong_way(q, k, v, mask=None):
    """q viewed as (B, g, H_kv, N, d): query head h meets K/V head h mod H_kv (and a mask that
    is not (N_q, N_k) meets a five-axis score tensor)."""
    g = q.shape[1] // k.shape[1]
    B, H, N, d = q.shape
    scores = q.view(B, g, H // g, N, d) @ k[:, None].transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v[:, None]).reshape(B, H, N, -1), weights.reshape(B, H, N, -1)


GQA_CASES = [
    Case("H = 4, H_kv = 2, N = 5, causal", _gqa_case(2, 4, 2, 5, 5)),
    Case("H_kv = 1: multi-query", _gqa_case(2, 4, 1, 5, 5),
         hint="With H_kv = 1 every query head reads the one key/value head."),
    Case("H_kv = H: multi-head", _gqa_case(2, 4, 4, 5, 5),
         hint="With H_kv = H each query head reads its own key/value head: group size 1."),
    Case("H = 8, H_kv = 2: groups of four", _gqa_case(1, 8, 2, 4, 4),
         hint="Query heads 0–3 share key/value head 0 and heads 4–7 head 1: repeat each key/value "
              "head H / H_kv times in a row (repeat_interleave along the head axis)."),
    Case("one new query, seven cached keys (N_q = 1, no mask)", _gqa_case(2, 6, 3, 1, 7, mask=None),
         hint="N_q and N_k may differ: with a KV cache one new query attends over every cached "
              "key, q: (B, H, 1, d) against k: (B, H_kv, N_k, d)."),
    Case("a full cache: 3 new queries after 5 cached keys", _gqa_case(2, 4, 2, 3, 8),
         hint="Apply the mask as given, True = may attend: here it is causal_mask(3, 8), whose "
              "rows are the last three positions."),
    Case("padding mask (B, 1, 1, N_k)", _gqa_case(3, 4, 2, 5, 6, mask="padding"),
         hint="The mask broadcasts to (B, H, N_q, N_k): a padding mask (B, 1, 1, N_k) hides the "
              "same keys from every head."),
    Case("d_v = 5 ≠ d_k = 8", _gqa_case(2, 4, 2, 4, 4, d_v=5),
         hint="The scale is 1/√d_k, from the queries' last axis, not from the values'."),
    Case("scores of large magnitude", _gqa_case(2, 4, 2, 5, 5, scale=30.0), grad=False,
         hint="Use torch.softmax (it subtracts the row's maximum): exp of scores in the "
              "thousands overflows."),
    Case("float64", _gqa_case(1, 4, 2, 3, 3, dtype=torch.float64)),
]


SUITES = [
    Suite(
        exercise="07.11",
        name="rms_norm",
        points=2,
        reference=torch_rms_norm,
        solution=rms_norm,
        grad=("x", "weight"),
        cases=RMS_CASES,
        hint="RMSNorm(x) = x / √(mean(x²) + ε) · γ, the mean over the last dimension, no mean "
             "subtracted and no shift.",
        observe=capitalised(observe_rms),
        readings=RMS_READINGS,
        mutants=[
            Mutant("mean subtracted", _rms_variant(centre=True),
                   "You subtract the mean before dividing: that is LayerNorm (without δ). "
                   "RMSNorm keeps x as it is and divides by its root mean square, "
                   "√(mean(x²) + ε)."),
            Mutant("mean subtracted, unbiased variance", _rms_variant(centre=True, unbiased=True),
                   "You subtract the mean and divide by the standard deviation (unbiased, at "
                   "that): that is LayerNorm. RMSNorm keeps x as it is and divides by its root "
                   "mean square, √(mean(x²) + ε)."),
            Mutant("ε outside the square root", _rms_variant(eps_outside=True),
                   "You add ε after the square root, √mean(x²) + ε; it goes inside: "
                   "√(mean(x²) + ε)."),
            Mutant("no gain", _rms_variant(gain=False),
                   "Your output is not multiplied by the gain: RMSNorm ends with · γ "
                   "(the weight argument)."),
            Mutant("gain 1 + γ", _rms_variant(one_plus=True),
                   "You multiply by (1 + γ): the gain is γ itself, y = x / RMS(x) · γ "
                   "(Gemma stores its gain as γ − 1; Llama and T5 do not)."),
            Mutant("sum instead of mean", _rms_variant(l2=True),
                   "You divide by the vector's length √(Σx² + ε), which is √d_model times its "
                   "root mean square: take the mean of x², not the sum."),
            Mutant("eps argument ignored", _rms_variant(fixed_eps=1e-6),
                   "You ignore the eps argument (a fixed 1e-6): use the ε the call passes."),
            Mutant("variance instead of mean square", _rms_variant(variance=True),
                   "You divide by √(Var(x) + ε): the variance subtracts the mean. RMSNorm uses "
                   "the mean of x² itself, x.pow(2).mean(-1, keepdim=True)."),
        ],
    ),
    Suite(
        exercise="07.12",
        name="SwiGLU",
        points=3,
        reference=hf_swiglu,
        solution=llama.SwiGLU,
        call=run_swiglu,
        arg_names=("d_model", "d_ff", *SWIGLU_NAMES, "x"),
        cases=SWIGLU_CASES,
        hint="SwiGLU(x) = down_proj(SiLU(gate_proj(x)) ⊙ up_proj(x)), three nn.Linear without "
             "bias.",
        mutants=[
            Mutant("gate and up swapped", _swiglu_variant("swapped"),
                   "Your SiLU acts on up_proj(x) and gates gate_proj(x): it is the other way "
                   "round, SiLU(gate_proj(x)) ⊙ up_proj(x)."),
            Mutant("GELU gate", _swiglu_variant("gelu"), GELU_HINT.format("GELU")),
            Mutant("tanh-approximate GELU gate", _swiglu_variant("tanh gelu"),
                   GELU_HINT.format("GELU's tanh approximation")),
            Mutant("sigmoid-approximate GELU gate", _swiglu_variant("sigmoid gelu"),
                   GELU_HINT.format("GELU's sigmoid approximation, z·σ(1.702 z)")),
            Mutant("branches added", _swiglu_variant("sum"),
                   "You add the two branches: SwiGLU multiplies them, feature by feature, "
                   "SiLU(gate_proj(x)) ⊙ up_proj(x) (the gate scales each feature of the up "
                   "branch)."),
            Mutant("sigmoid gate", _swiglu_variant("sigmoid"),
                   "You gate with σ(z) (that is the original GLU); SwiGLU's gate is SiLU, z·σ(z) "
                   "(F.silu)."),
            Mutant("ReLU gate", _swiglu_variant("relu"),
                   "You gate with ReLU (that is ReGLU); SwiGLU's gate is SiLU, z·σ(z) (F.silu)."),
            Mutant("no activation", _swiglu_variant("bilinear"),
                   "Your gate has no activation, gate_proj(x) ⊙ up_proj(x): apply SiLU to the "
                   "gate branch."),
            Mutant("activation after the product", _swiglu_variant("after"),
                   "You apply SiLU to the product; it acts on the gate branch alone, "
                   "SiLU(gate_proj(x)) ⊙ up_proj(x)."),
            Mutant("SiLU on both branches", _swiglu_variant("both"),
                   "You apply SiLU to both branches; the up branch stays linear: "
                   "SiLU(gate_proj(x)) ⊙ up_proj(x)."),
            Mutant("up branch missing", _swiglu_variant("no up"),
                   "Your hidden layer is SiLU(gate_proj(x)) alone: multiply it, feature by "
                   "feature, by up_proj(x)."),
        ],
    ),
    Suite(
        exercise="07.13",
        name="grouped_query_attention",
        points=3,
        reference=torch_gqa,
        solution=llama.grouped_query_attention,
        grad=("q", "k", "v"),
        cases=GQA_CASES,
        hint="Repeat each key/value head H / H_kv times in a row (repeat_interleave on the head "
             "axis, dim=-3), then softmax(QKᵀ/√d_k) V with the mask applied before the softmax.",
        readings=(
            (r"fails exactly the cases where `mask` is given",
             "Apply the mask as given, True = may attend: set the scores where it is False to "
             "−inf before the softmax (not where it is True, and not after the softmax), and "
             "let it broadcast to (B, H, N_q, N_k)."),
        ),
        mutants=[
            Mutant("heads tiled", _gqa_variant(expand="tile"),
                   "You tile the key/value heads (repeat), so query head h reads K/V head "
                   "h mod H_kv. A group is H / H_kv *consecutive* query heads: use "
                   "repeat_interleave(H / H_kv, dim=-3), which gives K/V head h // (H / H_kv)."),
            Mutant("only the first K/V head", _gqa_variant(expand="first"),
                   "Every query head of yours reads the first key/value head: query head h "
                   "reads K/V head h // (H / H_kv)."),
            Mutant("mask ignored", _gqa_variant(use_mask=False),
                   "You ignore the mask: set the scores where it is False to -inf before the "
                   "softmax."),
            Mutant("missing scale", _gqa_variant(scale=False),
                   "Your scores are not scaled: divide QKᵀ by √d_k, with d_k = q.shape[-1]."),
            Mutant("scaled by √(d_k · group)", _gqa_variant(group_scale=True),
                   "Your scores are divided by √(d_k · H / H_kv): the scale is 1/√d_k, with d_k = "
                   "q.shape[-1], whatever the group size (a shared key/value head changes nothing "
                   "in each query head's scores)."),
            Mutant("group size fixed at 2", _gqa_variant(fixed_group=2),
                   "Your code passes exactly the cases where H / H_kv is 2: take the group size "
                   "from the shapes, q.shape[1] // k.shape[1], since each case has its own."),
            Mutant("queries grouped as (B, H / H_kv, H_kv, ...)", _gqa_grouped_wrong_way,
                   "Your query head h reads K/V head h mod H_kv, as tiled heads would: viewing q "
                   "as (B, H / H_kv, H_kv, N, d) puts heads h, h + H_kv, h + 2·H_kv and so on "
                   "in one group. A group is H / H_kv *consecutive* query heads: view q as "
                   "(B, H_kv, H / H_kv, "
                   "N, d), or repeat_interleave(H / H_kv, dim=-3) on k and v."),
            Mutant("softmax over the queries", _gqa_variant(dim=-2),
                   "Your softmax runs over the queries: each query's weights over the keys sum "
                   "to 1, so take it over the last axis."),
        ],
    ),
]
