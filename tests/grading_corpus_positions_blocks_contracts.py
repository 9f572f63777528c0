'''Plausible student code for the exercises of Chapters 5 and 6 (sinusoidal table, T5 buckets,
RoPE, LayerNorm, FeedForward, EncoderBlock, DecoderBlock), aimed at the contracts a suite can
leave unprobed: dtypes and ranks the docstring allows (float64 inputs, offsets as a matrix,
``(..., N, d)`` of any rank), hard-coded constants and caps (a table of 512 rows, ``eps``,
``num_buckets``), thresholds students write (``eps`` as a floor, a ``<=`` at the exact region's
end), numerically careless formulas, masks in the other library's convention, and correct
answers a strict suite might refuse (angles in float64, the attention weights requested and
discarded, a one-pass variance accumulated in float64).

Written from each exercise's text and docstring in ``solutions/05_positional_encoding.ipynb``
and ``solutions/06a_transformer_blocks.ipynb`` before the suites' mutants and cases were read;
the ``expect`` phrases are what a hint that names the bug would say.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug


def _edit(source, replace):
    for old, new in replace:
        assert old in source, old
        source = source.replace(old, new)
    return source


# ----------------------------------------------------------------------------- 05.1 sinusoidal
SIN = "def sinusoidal_encoding(n_positions, d_model):\n"
SIN_BODY = (
    "    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]\n"
    "    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)\n"
    "    pe = torch.zeros(n_positions, d_model)\n"
    "    pe[:, 0::2] = torch.sin(pos * omega)\n"
    "    pe[:, 1::2] = torch.cos(pos * omega)\n"
    "    return pe\n")


def sinus(*replace):
    return SIN + _edit(SIN_BODY, replace)


P1 = [
    bug("sinusoidal_encoding", "returns (1, N, d) like the Annotated Transformer's buffer",
        sinus(("    return pe\n", "    return pe.unsqueeze(0)\n")),
        expect=("unsqueeze", "extra axis", "leading axis", "shape (1,"), kind="layout"),
    bug("sinusoidal_encoding", "d_model hard-coded to 512 in the exponent", sinus((
        "dtype=torch.float32) / d_model)", "dtype=torch.float32) / 512)")),
        expect=("d_model",), kind="argument"),
    bug("sinusoidal_encoding", "cos frequencies from the odd feature index", SIN +
        "    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]\n"
        "    pe = torch.zeros(n_positions, d_model)\n"
        "    even = torch.arange(0, d_model, 2, dtype=torch.float32)\n"
        "    odd = torch.arange(1, d_model, 2, dtype=torch.float32)\n"
        "    pe[:, 0::2] = torch.sin(pos / 10000.0 ** (even / d_model))\n"
        "    pe[:, 1::2] = torch.cos(pos / 10000.0 ** (odd / d_model))\n"
        "    return pe\n", mutant="exponent from the feature index"),
    bug("sinusoidal_encoding", "linspace exponents 0..1 (slowest pair too slow)", sinus((
        "10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)",
        "1.0 / 10000.0 ** torch.linspace(0, 1, d_model // 2)")),
        expect=("exponent", "2f/d", "slowest", "last pair"), kind="boundary"),
    bug("sinusoidal_encoding", "table precomputed for 512 positions", SIN +
        "    max_len = 512\n"
        "    pos = torch.arange(max_len, dtype=torch.float32)[:, None]\n"
        "    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)\n"
        "    pe = torch.zeros(max_len, d_model)\n"
        "    pe[:, 0::2] = torch.sin(pos * omega)\n"
        "    pe[:, 1::2] = torch.cos(pos * omega)\n"
        "    return pe[:n_positions]\n",
        expect=("512", "n_positions", "rows", "max_len"), kind="boundary"),
    alt("sinusoidal_encoding", "float64 throughout, cast to float32", SIN +
        "    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]\n"
        "    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)\n"
        "    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)\n"
        "    pe[:, 0::2] = torch.sin(pos * omega)\n"
        "    pe[:, 1::2] = torch.cos(pos * omega)\n"
        "    return pe.float()\n", kind="type"),
    alt("sinusoidal_encoding", "unit complex numbers (polar), flipped to (sin, cos)", SIN +
        "    f = torch.arange(d_model // 2, dtype=torch.float32)\n"
        "    angles = torch.arange(n_positions, dtype=torch.float32)[:, None]"
        " * 10000.0 ** (-2 * f / d_model)\n"
        "    z = torch.polar(torch.ones_like(angles), angles)\n"
        "    return torch.view_as_real(z).flip(-1).reshape(n_positions, d_model)\n"),
    alt("sinusoidal_encoding", "cos written as sin(angle + π/2)", sinus((
        "pe[:, 1::2] = torch.cos(pos * omega)",
        "pe[:, 1::2] = torch.sin(pos * omega + math.pi / 2)"))),
]

# ----------------------------------------------------------------------------- 05.2 T5 buckets
RB = ("def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,"
      " max_distance=128):\n")
RB_BODY = (
    "    bucket = torch.zeros_like(relative_position)\n"
    "    if bidirectional:\n"
    "        num_buckets //= 2\n"
    "        bucket = bucket + (relative_position > 0).long() * num_buckets\n"
    "        distance = relative_position.abs()\n"
    "    else:\n"
    "        distance = (-relative_position).clamp(min=0)\n"
    "    max_exact = num_buckets // 2\n"
    "    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)\n"
    "    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long())"
    ".clamp(max=num_buckets - 1)\n"
    "    return bucket + torch.where(distance < max_exact, distance, large)\n")


def rb(*replace):
    return RB + _edit(RB_BODY, replace)


P2 = [
    bug("relative_position_bucket", "buckets halved in both modes (causal too)", rb(
        ("    bucket = torch.zeros_like(relative_position)\n    if bidirectional:\n"
         "        num_buckets //= 2\n",
         "    bucket = torch.zeros_like(relative_position)\n    num_buckets //= 2\n"
         "    if bidirectional:\n")),
        expect=("halve", "halved", "keeps all", "all num_buckets")),
    bug("relative_position_bucket", "log in float64", rb((
        "torch.log(distance.float() / max_exact)", "torch.log(distance.double() / max_exact)")),
        expect=("float32",), kind="type"),
    bug("relative_position_bucket", "cap from the number before halving (far offsets)", RB +
        "    n = num_buckets // 2 if bidirectional else num_buckets\n"
        "    bucket = (relative_position > 0).long() * n if bidirectional"
        " else torch.zeros_like(relative_position)\n"
        "    distance = relative_position.abs() if bidirectional"
        " else (-relative_position).clamp(min=0)\n"
        "    max_exact = n // 2\n"
        "    log_ratio = torch.log(distance.float() / max_exact)"
        " / math.log(max_distance / max_exact)\n"
        "    large = (max_exact + (log_ratio * (n - max_exact)).long())"
        ".clamp(max=num_buckets - 1)\n"
        "    return bucket + torch.where(distance < max_exact, distance, large)\n",
        expect=("beyond max_distance", "far offsets", "last bucket", "cap"), kind="boundary"),
    bug("relative_position_bucket", "clamp_ on the caller's offsets (causal)", rb((
        "distance = (-relative_position).clamp(min=0)",
        "distance = -relative_position.clamp_(max=0)")), expect=INPLACE, kind="in-place"),
    bug("relative_position_bucket", "int32 buckets (.int())", rb((
        "    return bucket + torch.where(distance < max_exact, distance, large)\n",
        "    return (bucket + torch.where(distance < max_exact, distance, large)).int()\n")),
        expect=("long", "int64", "int32", "dtype"), kind="type"),
    bug("relative_position_bucket", "flattened and never reshaped (a matrix of offsets)", rb((
        "    bucket = torch.zeros_like(relative_position)\n",
        "    relative_position = relative_position.flatten()\n"
        "    bucket = torch.zeros_like(relative_position)\n")),
        expect=("shape",), kind="layout"),
    bug("relative_position_bucket", "half the buckets hard-coded to 16", rb((
        "        num_buckets //= 2\n", "        num_buckets = 16\n")),
        expect=("hard-coded", "the num_buckets argument", "largest"), kind="argument"),
    alt("relative_position_bucket", "distance <= max_exact counted exact (the same bucket)", rb((
        "torch.where(distance < max_exact,", "torch.where(distance <= max_exact,"))),
    alt("relative_position_bucket", "long / int without .float() (true division)", rb((
        "torch.log(distance.float() / max_exact)", "torch.log(distance / max_exact)"))),
    alt("relative_position_bucket", "one offset at a time, float32 scalars", RB +
        "    n = num_buckets // 2 if bidirectional else num_buckets\n"
        "    exact = n // 2\n"
        "    out = torch.empty_like(relative_position)\n"
        "    flat = out.view(-1)\n"
        "    for k, r in enumerate(relative_position.reshape(-1).tolist()):\n"
        "        base = n if (bidirectional and r > 0) else 0\n"
        "        d = abs(r) if bidirectional else max(-r, 0)\n"
        "        if d < exact:\n"
        "            flat[k] = base + d\n"
        "            continue\n"
        "        ratio = torch.tensor(float(d), dtype=torch.float32) / exact\n"
        "        v = torch.log(ratio) / math.log(max_distance / exact) * (n - exact)\n"
        "        flat[k] = base + min(exact + int(v.item()), n - 1)\n"
        "    return out\n"),
]

# ----------------------------------------------------------------------------- 05.3 apply_rope
ROPE = "def apply_rope(x, positions, base=10000.0):\n    d = x.shape[-1]\n"
ROPE_HALF = (
    "    h = d // 2\n"
    "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)\n"
    "    angles = positions.float()[:, None] * theta\n"
    "    cos, sin = angles.cos(), angles.sin()\n"
    "    x1, x2 = x[..., :h], x[..., h:]\n")

P3 = [
    bug("apply_rope", "output buffer in the default dtype", ROPE + ROPE_HALF +
        "    out = torch.empty(x.shape)\n"
        "    out[..., :h] = x1 * cos - x2 * sin\n"
        "    out[..., h:] = x2 * cos + x1 * sin\n"
        "    return out\n", expect=("dtype", "float64"), kind="type"),
    bug("apply_rope", "unpacks B, N, d = x.shape (3-D only)", ROPE +
        "    B, N, _ = x.shape\n" + ROPE_HALF +
        "    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)\n",
        expect=("(..., N, d)", "leading", "unpack", "any number"), kind="layout"),
    bug("apply_rope", "integer division in the exponent", ROPE + ROPE_HALF.replace(
        "-torch.arange(0, d, 2, dtype=torch.float32) / d", "-(torch.arange(0, d, 2) // d)") +
        "    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)\n",
        expect=("integer division", "//")),
    bug("apply_rope", "cos/sin cache of 512 positions", ROPE +
        "    h = d // 2\n"
        "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)\n"
        "    table = torch.arange(512, dtype=torch.float32)[:, None] * theta\n"
        "    cos, sin = table.cos()[positions.clamp(max=511)], table.sin()[positions.clamp(max=511)]\n"
        "    x1, x2 = x[..., :h], x[..., h:]\n"
        "    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)\n",
        expect=("512", "large position", "beyond"), kind="boundary"),
    bug("apply_rope", "second half rotated in place on the caller's x", ROPE + ROPE_HALF +
        "    first = x1 * cos - x2 * sin\n"
        "    x2.mul_(cos).add_(x1 * sin)\n"
        "    return torch.cat([first, x2], dim=-1)\n", expect=INPLACE, kind="in-place"),
    alt("apply_rope", "angles in x's own dtype", ROPE +
        "    theta = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)\n"
        "    angles = positions.to(x.dtype)[:, None] * theta\n"
        "    angles = torch.cat([angles, angles], dim=-1)\n"
        "    x1, x2 = x[..., : d // 2], x[..., d // 2:]\n"
        "    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()\n",
        kind="type"),
    alt("apply_rope", "cos/sin table up to the largest position, indexed", ROPE +
        "    inv_freq = 1.0 / base ** (torch.arange(0, d, 2).float() / d)\n"
        "    t = torch.arange(int(positions.max()) + 1, dtype=torch.float32)\n"
        "    emb = torch.cat([torch.outer(t, inv_freq)] * 2, dim=-1)\n"
        "    cos, sin = emb.cos()[positions], emb.sin()[positions]\n"
        "    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)\n"
        "    return x * cos + rot * sin\n"),
    alt("apply_rope", "explicit 2×2 rotations (einsum)", ROPE + ROPE_HALF +
        "    R = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)\n"
        "    pairs = torch.stack([x1, x2], dim=-1)\n"
        "    out = torch.einsum('nfij,...nfj->...nfi', R.to(x.dtype), pairs)\n"
        "    return torch.cat([out[..., 0], out[..., 1]], dim=-1)\n"),
]

# ----------------------------------------------------------------------------- 06.1 LayerNorm
LN = '''class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
'''

Q1 = [
    bug("LayerNorm", "F.layer_norm with its default eps", LN +
        "        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias)\n",
        mutant="eps argument ignored", kind="argument"),
    bug("LayerNorm", "eps as a floor (var.clamp(min=eps))", LN +
        "        mu = x.mean(-1, keepdim=True)\n"
        "        var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
        "        return (x - mu) / var.clamp(min=self.eps).sqrt() * self.weight + self.bias\n",
        mutant="ε as a floor", kind="boundary"),
    bug("LayerNorm", "eps only where the variance is 0", LN +
        "        mu = x.mean(-1, keepdim=True)\n"
        "        var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
        "        var = torch.where(var == 0, torch.full_like(var, self.eps), var)\n"
        "        return (x - mu) / var.sqrt() * self.weight + self.bias\n",
        expect=("added to", "every token", "always"), kind="boundary"),
    bug("LayerNorm", "no centring (RMSNorm)", LN +
        "        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)\n"
        "        return x * rms * self.weight + self.bias\n",
        mutant="no centring (RMSNorm)"),
    bug("LayerNorm", "divisor x.shape[1]", LN +
        "        mu = x.mean(-1, keepdim=True)\n"
        "        var = ((x - mu) ** 2).sum(-1, keepdim=True) / x.shape[1]\n"
        "        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias\n",
        expect=("divisor", "shape[-1]", "x.shape[1]")),
    bug("LayerNorm", "variance without keepdim", LN +
        "        mu = x.mean(-1, keepdim=True)\n"
        "        var = ((x - mu) ** 2).mean(-1)\n"
        "        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias\n",
        expect=("keepdim", "broadcast"), kind="layout"),
    bug("LayerNorm", "computed in float32 whatever the input (HF-style upcast)", LN +
        "        dtype = x.dtype\n"
        "        h = x.float()\n"
        "        mu = h.mean(-1, keepdim=True)\n"
        "        var = ((h - mu) ** 2).mean(-1, keepdim=True)\n"
        "        out = ((h - mu) / torch.sqrt(var + self.eps)).to(dtype)\n"
        "        return out * self.weight + self.bias\n",
        expect=("float64", "dtype", "precision"), kind="type"),
    alt("LayerNorm", "statistics in float64, cast back", LN +
        "        h = x.double()\n"
        "        mu = h.mean(-1, keepdim=True)\n"
        "        var = (h - mu).square().mean(-1, keepdim=True)\n"
        "        y = ((h - mu) / torch.sqrt(var + self.eps)).to(x.dtype)\n"
        "        return y * self.weight + self.bias\n", kind="type"),
    alt("LayerNorm", "one-pass E[x²] − μ² accumulated in float64", LN +
        "        h = x.double()\n"
        "        mu = h.mean(-1, keepdim=True)\n"
        "        var = (h * h).mean(-1, keepdim=True) - mu * mu\n"
        "        return ((h - mu) / torch.sqrt(var + self.eps)).to(x.dtype) * self.weight"
        " + self.bias\n"),
    alt("LayerNorm", "std_mean, std² + eps under the root", LN +
        "        std, mu = torch.std_mean(x, dim=-1, keepdim=True, correction=0)\n"
        "        return (x - mu) / torch.sqrt(std ** 2 + self.eps) * self.weight + self.bias\n"),
]

# ----------------------------------------------------------------------------- 06.2 FeedForward
FF = '''class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
'''
FF_NAMED = FF.replace('self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]',
                      "self.act_name = activation")

Q2 = [
    bug("FeedForward", "dropout always on (training=True)", FF +
        "        h = self.activation(self.linear1(x))\n"
        "        return self.linear2(F.dropout(h, self.dropout.p, training=True))\n",
        expect=("training", "eval"), kind="dropout"),
    bug("FeedForward", "test-time scaling by 1 − p (classic dropout)", FF +
        "        h = self.activation(self.linear1(x))\n"
        "        h = self.dropout(h) if self.training else h * (1 - self.dropout.p)\n"
        "        return self.linear2(h)\n", expect=("eval", "1 − p", "1 - p", "scal"),
        kind="dropout"),
    bug("FeedForward", "quick GELU (x·σ(1.702x))", FF_NAMED +
        "        h = self.linear1(x)\n"
        "        h = F.relu(h) if self.act_name == 'relu' else h * torch.sigmoid(1.702 * h)\n"
        "        return self.linear2(self.dropout(h))\n",
        expect=("exact GELU", "F.gelu", "approximat")),
    bug("FeedForward", "returns (out, None) like the attention", FF +
        "        return self.linear2(self.dropout(self.activation(self.linear1(x)))), None\n",
        expect=("tuple",), kind="type"),
    bug("FeedForward", "activation on the input, before linear1", FF +
        "        return self.linear2(self.dropout(self.linear1(self.activation(x))))\n",
        expect=("between the two layers", "after linear1", "order")),
    alt("FeedForward", "in-place ReLU on the hidden layer", FF_NAMED +
        "        h = self.linear1(x)\n"
        "        h = F.relu(h, inplace=True) if self.act_name == 'relu' else F.gelu(h)\n"
        "        return self.linear2(self.dropout(h))\n"),
    alt("FeedForward", "addmm over the flattened tokens", FF +
        "        flat = x.reshape(-1, x.shape[-1])\n"
        "        h = torch.addmm(self.linear1.bias, flat, self.linear1.weight.t())\n"
        "        h = self.dropout(self.activation(h))\n"
        "        out = torch.addmm(self.linear2.bias, h, self.linear2.weight.t())\n"
        "        return out.reshape(*x.shape[:-1], -1)\n"),
    alt("FeedForward", "activation looked up by name in forward", FF_NAMED +
        "        act = getattr(F, self.act_name)\n"
        "        return self.linear2(self.dropout(act(self.linear1(x))))\n"),
]

# ----------------------------------------------------------------------------- 06.3 EncoderBlock
ENC = '''class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x, key_mask=None, is_causal=False):
'''
ENC_BODY = '''        def attend(h):
            out, _ = self.self_attn(h, key_mask=key_mask, is_causal=is_causal)
            return self.dropout1(out)

        if self.norm_first:
            x = x + attend(self.norm1(x))
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + attend(x))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x, None
'''


def enc(*replace):
    return ENC + _edit(ENC_BODY, replace)


CAUSAL_TRIU = ("        N = x.shape[1]\n"
               "        future = torch.triu(torch.ones(N, N, dtype=torch.bool), diagonal=1)\n"
               "        causal = future if is_causal else None\n\n")

Q3 = [
    bug("EncoderBlock", "causal mask from triu (True = masked, nn.MultiheadAttention's way)",
        enc(("        def attend(h):\n"
             "            out, _ = self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
             CAUSAL_TRIU + "        def attend(h):\n"
             "            out, _ = self.self_attn(h, attn_mask=causal, key_mask=key_mask)")),
        expect=("True = may attend", "inverted", "future"), kind="mask"),
    bug("EncoderBlock", "key_mask passed as attn_mask", enc((
        "self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
        "self.self_attn(h, attn_mask=key_mask, is_causal=is_causal)")),
        expect=("key_mask",), kind="mask"),
    bug("EncoderBlock", "Pre-LN with a final norm inside the block", enc((
        "            x = x + self.dropout2(self.ff(self.norm2(x)))\n",
        "            x = x + self.dropout2(self.ff(self.norm2(x)))\n"
        "            x = self.norm2(x)\n")),
        expect=("final", "after the last block")),
    bug("EncoderBlock", "Pre-LN keys and values from the raw stream", enc(
        ("        def attend(h):\n"
         "            out, _ = self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
         "        def attend(h, kv=None):\n"
         "            out, _ = self.self_attn(h, kv, key_mask=key_mask, is_causal=is_causal)"),
        ("x = x + attend(self.norm1(x))", "x = x + attend(self.norm1(x), x)")),
        expect=("keys", "norm1(x)", "normalised")),
    bug("EncoderBlock", "F.dropout without training=self.training", enc((
        "            return self.dropout1(out)",
        "            return F.dropout(out, self.dropout1.p)")),
        expect=("training", "eval"), kind="dropout"),
    bug("EncoderBlock", "returns x alone", enc(("        return x, None\n", "        return x\n")),
        expect=("tuple", "(x, None)"), kind="type"),
    alt("EncoderBlock", "weights requested and discarded (need_weights=True)", enc((
        "self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
        "self.self_attn(h, key_mask=key_mask, is_causal=is_causal, need_weights=True)"))),
    alt("EncoderBlock", "causal and padding masks combined by hand", enc((
        "        def attend(h):\n"
        "            out, _ = self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
        "        N = x.shape[1]\n"
        "        mask = torch.ones(N, N, dtype=torch.bool).tril() if is_causal else None\n"
        "        if key_mask is not None:\n"
        "            keys = key_mask[:, None, None, :]\n"
        "            mask = keys if mask is None else mask & keys\n\n"
        "        def attend(h):\n"
        "            out, _ = self.self_attn(h, attn_mask=mask)"))),
]

# ----------------------------------------------------------------------------- 06.4 DecoderBlock
DEC = '''class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, y, memory, key_mask=None, memory_mask=None, is_causal=True):
'''
DEC_BODY = '''        def self_attend(h):
            return self.dropout1(self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0])

        def cross_attend(h):
            return self.dropout2(self.cross_attn(h, memory, key_mask=memory_mask)[0])

        if self.norm_first:
            y = y + self_attend(self.norm1(y))
            y = y + cross_attend(self.norm2(y))
            y = y + self.dropout3(self.ff(self.norm3(y)))
        else:
            y = self.norm1(y + self_attend(y))
            y = self.norm2(y + cross_attend(y))
            y = self.norm3(y + self.dropout3(self.ff(y)))
        return y, None, None
'''


def dec(*replace):
    return DEC + _edit(DEC_BODY, replace)


Q4 = [
    bug("DecoderBlock", "causal mask from triu (True = masked, nn.MultiheadAttention's way)",
        dec(("        def self_attend(h):\n"
             "            return self.dropout1(self.self_attn(h, key_mask=key_mask,"
             " is_causal=is_causal)[0])",
             CAUSAL_TRIU.replace("x.shape", "y.shape") + "        def self_attend(h):\n"
             "            return self.dropout1(self.self_attn(h, attn_mask=causal,"
             " key_mask=key_mask)[0])")),
        mutant="causal mask inverted", kind="mask"),
    bug("DecoderBlock", "Pre-LN cross-attention queries from the raw stream", dec((
        "y = y + cross_attend(self.norm2(y))", "y = y + cross_attend(y)")),
        expect=("norm2", "LN₂")),
    bug("DecoderBlock", "Post-LN without the last norm", dec((
        "y = self.norm3(y + self.dropout3(self.ff(y)))", "y = y + self.dropout3(self.ff(y))")),
        expect=("norm3", "LN₃")),
    bug("DecoderBlock", "returns (y, None)", dec((
        "        return y, None, None\n", "        return y, None\n")),
        expect=("(y, None, None)", "self-attention weights, cross-attention weights"),
        kind="type"),
    bug("DecoderBlock", "memory_mask passed as attn_mask", dec((
        "self.cross_attn(h, memory, key_mask=memory_mask)",
        "self.cross_attn(h, memory, attn_mask=memory_mask)")),
        expect=("key_mask=memory_mask", "as its key_mask", "key mask of the cross-attention"),
        kind="mask"),
    alt("DecoderBlock", "weights requested and discarded (need_weights=True)", dec(
        ("self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0]",
         "self.self_attn(h, key_mask=key_mask, is_causal=is_causal, need_weights=True)[0]"),
        ("self.cross_attn(h, memory, key_mask=memory_mask)[0]",
         "self.cross_attn(h, memory, key_mask=memory_mask, need_weights=True)[0]"))),
    alt("DecoderBlock", "memory's padding as a (B, 1, 1, N_s) attn_mask", dec((
        "self.cross_attn(h, memory, key_mask=memory_mask)",
        "self.cross_attn(h, memory, attn_mask=None if memory_mask is None"
        " else memory_mask[:, None, None, :])"))),
]

VARIANTS = [*P1, *P2, *P3, *Q1, *Q2, *Q3, *Q4]
