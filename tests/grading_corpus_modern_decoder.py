'''Corpus of plausible student code for the exercises of 07d (see grading_corpus.py): 07.11
``rms_norm``, 07.12 ``SwiGLU``, 07.13 ``grouped_query_attention``. One bug per suite mutant, bugs
the mutants did not foresee, and correct alternatives. Each bug's ``expect`` was written from the
bug itself, as the words a hint must use to name it.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug

# ----------------------------------------------------------------------------- 07.11 rms_norm
RN = "def rms_norm(x, weight, eps=1e-6):\n"
MS = "x.pow(2).mean(dim=-1, keepdim=True)"

RMS = [
    bug("rms_norm", "mean subtracted", RN + "    x = x - x.mean(dim=-1, keepdim=True)\n"
        f"    return x / torch.sqrt({MS} + eps) * weight\n", mutant="mean subtracted"),
    bug("rms_norm", "eps after the sqrt", RN + f"    return x / (torch.sqrt({MS}) + eps) * weight\n",
        mutant="ε outside the square root"),
    bug("rms_norm", "no weight", RN + f"    return x * torch.rsqrt({MS} + eps)\n", mutant="no gain"),
    bug("rms_norm", "(1 + weight)", RN + f"    return x * torch.rsqrt({MS} + eps) * (1 + weight)\n",
        mutant="gain 1 + γ"),
    bug("rms_norm", "sum of squares", RN +
        "    return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True) + eps) * weight\n",
        mutant="sum instead of mean"),
    bug("rms_norm", "1e-6 hard-coded", RN + f"    return x / torch.sqrt({MS} + 1e-6) * weight\n",
        mutant="eps argument ignored"),
    bug("rms_norm", "x.var", RN +
        "    return x / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps) * weight\n",
        mutant="variance instead of mean square"),
    # unforeseen
    bug("rms_norm", "computed in float32", RN + "    y = x.float()\n"
        "    return y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()\n",
        expect=("dtype",), kind="type"),
    bug("rms_norm", "x scaled in place", RN + f"    x *= torch.rsqrt({MS} + eps)\n"
        "    return x * weight\n", expect=INPLACE, kind="in-place"),
    bug("rms_norm", "unbiased x.var, mean subtracted", RN +
        "    mu = x.mean(dim=-1, keepdim=True)\n"
        "    return (x - mu) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight\n",
        expect=("mean",)),
    alt("rms_norm", "F.rms_norm", RN + "    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n"),
    alt("rms_norm", "the norm over √d", RN +
        "    rms = torch.sqrt(x.norm(dim=-1, keepdim=True) ** 2 / x.shape[-1] + eps)\n"
        "    return weight * (x / rms)\n"),
    alt("rms_norm", "nn.RMSNorm", RN + "    norm = nn.RMSNorm(x.shape[-1], eps=eps).to(x.dtype)\n"
        "    return norm(x) * weight\n"),
]

# ----------------------------------------------------------------------------- 07.12 SwiGLU
SW = '''class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
'''


def sw(hidden):
    return SW + f"        return self.down_proj({hidden})\n"


SWIGLU = [
    bug("SwiGLU", "SiLU on up", sw("F.silu(self.up_proj(x)) * self.gate_proj(x)"),
        mutant="gate and up swapped"),
    bug("SwiGLU", "GELU", sw("F.gelu(self.gate_proj(x)) * self.up_proj(x)"), mutant="GELU gate"),
    bug("SwiGLU", "sigmoid", sw("torch.sigmoid(self.gate_proj(x)) * self.up_proj(x)"),
        mutant="sigmoid gate"),
    bug("SwiGLU", "ReLU", sw("torch.relu(self.gate_proj(x)) * self.up_proj(x)"),
        mutant="ReLU gate"),
    bug("SwiGLU", "no activation", sw("self.gate_proj(x) * self.up_proj(x)"),
        mutant="no activation"),
    bug("SwiGLU", "SiLU of the product", sw("F.silu(self.gate_proj(x) * self.up_proj(x))"),
        mutant="activation after the product"),
    bug("SwiGLU", "SiLU on both", sw("F.silu(self.gate_proj(x)) * F.silu(self.up_proj(x))"),
        mutant="SiLU on both branches"),
    bug("SwiGLU", "no up branch", sw("F.silu(self.gate_proj(x))"), mutant="up branch missing"),
    # unforeseen
    bug("SwiGLU", "linears with biases", SW.replace("bias=False", "bias=True") +
        "        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))\n",
        expect=("extra parameter",), kind="namespace"),
    bug("SwiGLU", "tanh-approximate GELU", sw(
        "F.gelu(self.gate_proj(x), approximate='tanh') * self.up_proj(x)"),
        expect=("GELU",)),
    bug("SwiGLU", "sum instead of product", sw("F.silu(self.gate_proj(x)) + self.up_proj(x)"),
        expect=("add the two branches",)),
    alt("SwiGLU", "x·σ(x) by hand", SW + "        g = self.gate_proj(x)\n"
        "        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))\n"),
    alt("SwiGLU", "nn.SiLU module", SW.replace(
        "        self.down_proj = nn.Linear(d_ff, d_model, bias=False)\n",
        "        self.down_proj = nn.Linear(d_ff, d_model, bias=False)\n        self.act = nn.SiLU()\n")
        + "        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))\n"),
]

# ----------------------------------------------------------------------------- 07.13 grouped_query_attention
GQ = "def grouped_query_attention(q, k, v, mask=None):\n    g = q.shape[1] // k.shape[1]\n"
ATTEND = '''    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''


def gq(expand, attend=ATTEND):
    return GQ + expand + attend


INTERLEAVE = "    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)\n"

GQA = [
    bug("grouped_query_attention", "repeat", gq("    k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)\n"),
        mutant="heads tiled"),
    bug("grouped_query_attention", "first K/V head broadcast", gq("    k, v = k[:, :1], v[:, :1]\n"),
        mutant="only the first K/V head"),
    bug("grouped_query_attention", "mask ignored", gq(INTERLEAVE, ATTEND.replace(
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float(\"-inf\"))\n", "")),
        mutant="mask ignored"),
    bug("grouped_query_attention", "no scale", gq(INTERLEAVE, ATTEND.replace(
        " / math.sqrt(q.shape[-1])", "")), mutant="missing scale"),
    bug("grouped_query_attention", "softmax over dim=-2", gq(INTERLEAVE, ATTEND.replace(
        "dim=-1", "dim=-2")), mutant="softmax over the queries"),
    # unforeseen
    bug("grouped_query_attention", "queries viewed as (B, g, H_kv, ...)", GQ +
        "    B, H, N, d = q.shape\n"
        "    qg = q.view(B, g, H // g, N, d)                  # groups taken the wrong way\n"
        "    scores = qg @ k[:, None].transpose(-2, -1) / math.sqrt(d)\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    out = weights @ v[:, None]\n"
        "    return out.reshape(B, H, N, -1), weights.reshape(B, H, N, -1)\n",
        expect=("repeat_interleave",)),
    bug("grouped_query_attention", "scaled by √(d · g)", gq(INTERLEAVE, ATTEND.replace(
        "math.sqrt(q.shape[-1])", "math.sqrt(q.shape[-1] * g)")),
        expect=("whatever the group size",)),
    bug("grouped_query_attention", "weights of the first group only", gq(INTERLEAVE, ATTEND.replace(
        "    return weights @ v, weights\n", "    return weights @ v, weights[:, ::g]\n")),
        expect=("shape",), kind="layout"),
    alt("grouped_query_attention", "F.scaled_dot_product_attention for the output", GQ +
        "    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)\n"
        "    kk = k.repeat_interleave(g, dim=1)\n"
        "    scores = q @ kk.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return out, torch.softmax(scores, dim=-1)\n"),
    alt("grouped_query_attention", "queries viewed as (B, H_kv, g, ...)", GQ +
        "    B, H, N, d = q.shape\n"
        "    qg = q.view(B, H // g, g, N, d)                  # query heads grouped in a row\n"
        "    scores = qg @ k[:, :, None].transpose(-2, -1) / math.sqrt(d)\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask.unsqueeze(1) if mask.dim() == 4 else ~mask,\n"
        "                                    float('-inf'))\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    out = weights @ v[:, :, None]\n"
        "    return out.reshape(B, H, N, -1), weights.reshape(B, H, N, -1)\n"),
    alt("grouped_query_attention", "expand and reshape", GQ +
        "    B, H_kv, N_k, d = k.shape\n"
        "    k = k[:, :, None].expand(B, H_kv, g, N_k, d).reshape(B, H_kv * g, N_k, d)\n"
        "    v = v[:, :, None].expand(B, H_kv, g, N_k, v.shape[-1]).reshape(B, H_kv * g, N_k, -1)\n"
        + ATTEND),
]

VARIANTS = [*RMS, *SWIGLU, *GQA]
