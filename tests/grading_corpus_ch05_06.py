'''A corpus of plausible student code for the exercises of Chapters 5 and 6 (positional encoding,
transformer blocks), in the form of ``tests/grading_corpus.py``: one bug per suite mutant, bugs
the mutants did not foresee (dropout, ignored arguments, cut gradients, in-place changes,
boundary inputs, logic slips) and correct alternatives.

The ``expect`` phrases were chosen from each bug before looking at the grader's hints: they are
what a hint that names the bug would say. None of them occurs in its suite's general hint (shown
whatever the bug), so a general hint never counts as naming a bug.
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
    bug("sinusoidal_encoding", "sin and cos swapped", sinus(
        ("pe[:, 0::2] = torch.sin", "pe[:, 0::2] = torch.cos"),
        ("pe[:, 1::2] = torch.cos", "pe[:, 1::2] = torch.sin")), mutant="sin and cos swapped"),
    bug("sinusoidal_encoding", "sin | cos concatenated", SIN +
        "    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]\n"
        "    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)\n"
        "    return torch.cat([torch.sin(pos * omega), torch.cos(pos * omega)], dim=-1)\n",
        mutant="sin | cos concatenated, not interleaved"),
    bug("sinusoidal_encoding", "exponent i/d", sinus((
        "-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model",
        "-torch.arange(d_model // 2, dtype=torch.float32) / d_model")),
        mutant="exponent i/d instead of 2i/d"),
    bug("sinusoidal_encoding", "exponent from the feature index (loop)", SIN +
        "    pe = torch.zeros(n_positions, d_model)\n"
        "    for pos in range(n_positions):\n"
        "        for j in range(d_model):\n"
        "            angle = pos / 10000 ** (j / d_model)\n"
        "            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)\n"
        "    return pe\n", mutant="exponent from the feature index"),
    bug("sinusoidal_encoding", "positions 1..N", sinus((
        "torch.arange(n_positions, dtype=torch.float32)",
        "torch.arange(1, n_positions + 1, dtype=torch.float32)")), mutant="positions start at 1"),
    bug("sinusoidal_encoding", "multiplied by the power", sinus((
        "10000.0 ** (-torch.arange", "10000.0 ** (torch.arange")),
        mutant="multiplied by the power"),
    # unforeseen
    bug("sinusoidal_encoding", "numpy table returned as float64", SIN +
        "    pos = np.arange(n_positions)[:, None]\n"
        "    i = np.arange(d_model // 2)[None, :]\n"
        "    angles = pos / np.power(10000, 2 * i / d_model)\n"
        "    pe = np.zeros((n_positions, d_model))\n"
        "    pe[:, 0::2] = np.sin(angles)\n    pe[:, 1::2] = np.cos(angles)\n"
        "    return torch.from_numpy(pe)\n", expect=("float32", "dtype", "float64"), kind="type"),
    bug("sinusoidal_encoding", "2 * arange(0, d, 2): exponent 4i/d", sinus((
        "-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model",
        "-2 * torch.arange(0, d_model, 2, dtype=torch.float32) / d_model")),
        expect=("exponent", "too fast")),
    bug("sinusoidal_encoding", "integer division in the exponent", SIN +
        "    pos = torch.arange(n_positions)[:, None]\n"
        "    omega = 1 / 10000 ** (torch.arange(0, d_model, 2) // d_model)\n"
        "    pe = torch.zeros(n_positions, d_model)\n"
        "    pe[:, 0::2] = torch.sin(pos * omega)\n    pe[:, 1::2] = torch.cos(pos * omega)\n"
        "    return pe\n", expect=("integer division", "//")),
    bug("sinusoidal_encoding", "base 1000", sinus(("10000.0 **", "1000.0 **")),
        expect=("base", "not 1000")),
    bug("sinusoidal_encoding", "loop stops one pair short (slowest pair zero)", SIN +
        "    pe = torch.zeros(n_positions, d_model)\n"
        "    pos = torch.arange(n_positions, dtype=torch.float32)\n"
        "    for i in range(d_model // 2 - 1):\n"
        "        omega = 1.0 / 10000 ** (2 * i / d_model)\n"
        "        pe[:, 2 * i] = torch.sin(pos * omega)\n"
        "        pe[:, 2 * i + 1] = torch.cos(pos * omega)\n"
        "    return pe\n", expect=("slowest", "last"), kind="boundary"),
    bug("sinusoidal_encoding", "table transposed (d_model, n_positions)", SIN +
        "    pos = torch.arange(n_positions, dtype=torch.float32)[None, :]\n"
        "    omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)\n"
        "    pe = torch.zeros(d_model, n_positions)\n"
        "    pe[0::2] = torch.sin(omega[:, None] * pos)\n"
        "    pe[1::2] = torch.cos(omega[:, None] * pos)\n    return pe\n",
        expect=("transpose", "(n_positions, d_model)"), kind="layout"),
    alt("sinusoidal_encoding", "exp-log div_term (Annotated Transformer)", SIN +
        "    pe = torch.zeros(n_positions, d_model)\n"
        "    position = torch.arange(0, n_positions).unsqueeze(1)\n"
        "    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))\n"
        "    pe[:, 0::2] = torch.sin(position * div_term)\n"
        "    pe[:, 1::2] = torch.cos(position * div_term)\n    return pe\n"),
    alt("sinusoidal_encoding", "stack and flatten", SIN +
        "    i = torch.arange(d_model // 2, dtype=torch.float32)\n"
        "    angles = torch.outer(torch.arange(n_positions, dtype=torch.float32),"
        " 1.0 / 10000 ** (2 * i / d_model))\n"
        "    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)\n"),
    alt("sinusoidal_encoding", "torch.where on the feature parity", SIN +
        "    j = torch.arange(d_model)\n"
        "    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]\n"
        "    angles = pos / 10000 ** ((j - j % 2) / d_model)\n"
        "    return torch.where(j % 2 == 0, torch.sin(angles), torch.cos(angles))\n"),
    alt("sinusoidal_encoding", "numpy, converted to float32", SIN +
        "    pos = np.arange(n_positions)[:, None]\n"
        "    i = np.arange(d_model // 2)[None, :]\n"
        "    angles = pos / np.power(10000, 2 * i / d_model)\n"
        "    pe = np.zeros((n_positions, d_model))\n"
        "    pe[:, 0::2] = np.sin(angles)\n    pe[:, 1::2] = np.cos(angles)\n"
        "    return torch.tensor(pe, dtype=torch.float32)\n", kind="type"),
    alt("sinusoidal_encoding", "long table, sliced", SIN +
        "    max_len = max(n_positions, 5000)\n"
        "    pos = torch.arange(max_len, dtype=torch.float32)[:, None]\n"
        "    omega = torch.pow(10000.0, -torch.arange(0, d_model, 2).float() / d_model)\n"
        "    pe = torch.empty(max_len, d_model)\n"
        "    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * omega), torch.cos(pos * omega)\n"
        "    return pe[:n_positions].clone()\n"),
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
    bug("relative_position_bucket", "causal keeps future offsets", rb((
        "distance = (-relative_position).clamp(min=0)", "distance = relative_position.abs()")),
        mutant="causal variant keeps future offsets"),
    bug("relative_position_bucket", "log buckets start at max_exact + 1", rb((
        "(max_exact + (log_ratio", "(max_exact + 1 + (log_ratio")),
        mutant="log buckets start one late"),
    bug("relative_position_bucket", "exact region one short", rb((
        "distance < max_exact,", "distance < max_exact - 1,")), mutant="exact region one short"),
    bug("relative_position_bucket", "log bucket rounded", rb((
        "(log_ratio * (num_buckets - max_exact)).long()",
        "(log_ratio * (num_buckets - max_exact)).round().long()")),
        mutant="log bucket rounded"),
    bug("relative_position_bucket", "capped at num_buckets", rb((
        ".clamp(max=num_buckets - 1)", ".clamp(max=num_buckets)")),
        mutant="last bucket overflows"),
    bug("relative_position_bucket", "upper half for r < 0", rb((
        "(relative_position > 0).long()", "(relative_position < 0).long()")),
        mutant="direction flipped"),
    bug("relative_position_bucket", "num_buckets not halved", rb((
        "        num_buckets //= 2\n", "")), mutant="buckets not halved"),
    # unforeseen
    bug("relative_position_bucket", "bidirectional ignored", RB +
        "    num_buckets //= 2\n"
        "    bucket = (relative_position > 0).long() * num_buckets\n"
        "    distance = relative_position.abs()\n" + RB_BODY.split("\n", 7)[7],
        expect=("bidirectional", "causal"), kind="argument"),
    bug("relative_position_bucket", "max_distance hard-coded to 128", rb((
        "math.log(max_distance / max_exact)", "math.log(128 / max_exact)")),
        expect=("max_distance",), kind="argument"),
    bug("relative_position_bucket", "max_exact from the number before halving", RB +
        "    bucket = torch.zeros_like(relative_position)\n"
        "    max_exact = num_buckets // 2\n" + _edit(RB_BODY.split("\n", 1)[1], [(
            "    max_exact = num_buckets // 2\n", "")]),
        expect=("max_exact",)),
    bug("relative_position_bucket", "abs_ on the caller's offsets", rb((
        "distance = relative_position.abs()", "distance = relative_position.abs_()")),
        expect=INPLACE, kind="in-place"),
    bug("relative_position_bucket", "no cap at the last bucket (far offsets)", rb((
        ".clamp(max=num_buckets - 1)", "")),
        expect=("num_buckets - 1", "beyond max_distance", "far offsets"), kind="boundary"),
    bug("relative_position_bucket", "offset 0 in the upper half (r >= 0)", rb((
        "(relative_position > 0).long()", "(relative_position >= 0).long()")),
        expect=("offset 0", "r = 0", "r >= 0"), kind="boundary"),
    bug("relative_position_bucket", "causal distance max(r, 0)", rb((
        "(-relative_position).clamp(min=0)", "relative_position.clamp(min=0)")),
        expect=("future", "after the query")),
    bug("relative_position_bucket", "offset taken as query − key", rb((
        "    bucket = torch.zeros_like(relative_position)\n",
        "    relative_position = -relative_position\n"
        "    bucket = torch.zeros_like(relative_position)\n")),
        expect=("j − i", "key position − query", "after the query")),
    bug("relative_position_bucket", "log bucket left as float (floor)", rb((
        "(max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)",
        "(max_exact + torch.floor(log_ratio * (num_buckets - max_exact)))"
        ".clamp(max=num_buckets - 1)")), expect=("long", "dtype"), kind="type"),
    alt("relative_position_bucket", "Hugging Face's own", RB +
        "    relative_buckets = 0\n"
        "    if bidirectional:\n"
        "        num_buckets //= 2\n"
        "        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets\n"
        "        relative_position = torch.abs(relative_position)\n"
        "    else:\n"
        "        relative_position = -torch.min(relative_position,"
        " torch.zeros_like(relative_position))\n"
        "    max_exact = num_buckets // 2\n"
        "    is_small = relative_position < max_exact\n"
        "    if_large = max_exact + (torch.log(relative_position.float() / max_exact)"
        " / math.log(max_distance / max_exact) * (num_buckets - max_exact)).to(torch.long)\n"
        "    if_large = torch.min(if_large, torch.full_like(if_large, num_buckets - 1))\n"
        "    relative_buckets += torch.where(is_small, relative_position, if_large)\n"
        "    return relative_buckets\n"),
    alt("relative_position_bucket", "where, relu, trunc, clamp_max", RB +
        "    n = num_buckets // 2 if bidirectional else num_buckets\n"
        "    if bidirectional:\n"
        "        offset = torch.where(relative_position > 0, n, 0)\n"
        "        d = relative_position.abs()\n"
        "    else:\n"
        "        offset = torch.zeros_like(relative_position)\n"
        "        d = F.relu(-relative_position)\n"
        "    exact = n // 2\n"
        "    scaled = torch.log(d.float() / exact) / math.log(max_distance / exact) * (n - exact)\n"
        "    far = torch.clamp_max(exact + scaled.trunc().to(torch.int64), n - 1)\n"
        "    return offset + torch.where(d < exact, d, far)\n"),
    alt("relative_position_bucket", "masked assignment", RB +
        "    r = relative_position\n"
        "    out = torch.zeros_like(r)\n"
        "    if bidirectional:\n"
        "        num_buckets = num_buckets // 2\n"
        "        out[r > 0] = num_buckets\n"
        "        dist = r.abs()\n"
        "    else:\n"
        "        dist = torch.maximum(-r, torch.zeros_like(r))\n"
        "    max_exact = num_buckets // 2\n"
        "    small = dist < max_exact\n"
        "    val = torch.log(dist.float() / max_exact) / math.log(max_distance / max_exact)\n"
        "    val = max_exact + (val * (num_buckets - max_exact)).long()\n"
        "    val = torch.minimum(val, torch.tensor(num_buckets - 1))\n"
        "    return out + torch.where(small, dist, val)\n"),
]

# ----------------------------------------------------------------------------- 05.3 apply_rope
ROPE = "def apply_rope(x, positions, base=10000.0):\n    d = x.shape[-1]\n"
ROPE_BODY = (
    "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)\n"
    "    angles = positions.float()[:, None] * theta\n"
    "    angles = torch.cat([angles, angles], dim=-1)\n"
    "    x1, x2 = x[..., : d // 2], x[..., d // 2:]\n"
    "    return x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()\n")


def rope(*replace):
    return ROPE + _edit(ROPE_BODY, replace)


P3 = [
    bug("apply_rope", "adjacent pairs (RoFormer)", ROPE +
        "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)\n"
        "    angles = positions.float()[:, None] * theta\n"
        "    cos, sin = angles.cos(), angles.sin()\n"
        "    x1, x2 = x[..., 0::2], x[..., 1::2]\n"
        "    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)\n",
        mutant="interleaved pairs (the other convention)"),
    bug("apply_rope", "rotate_half with repeat_interleave", rope((
        "torch.cat([angles, angles], dim=-1)", "angles.repeat_interleave(2, dim=-1)")),
        mutant="pairs mixed: rotate_half with interleaved angles"),
    bug("apply_rope", "rotate every two with cat angles", rope((
        "torch.cat([-x2, x1], dim=-1)",
        "torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)")),
        mutant="pairs mixed: adjacent pairs with half-split angles"),
    bug("apply_rope", "cat(x2, -x1)", rope(("torch.cat([-x2, x1], dim=-1)",
                                            "torch.cat([x2, -x1], dim=-1)")),
        mutant="rotation by −θ"),
    bug("apply_rope", "exponent i/d", rope((
        "-torch.arange(0, d, 2, dtype=torch.float32) / d",
        "-torch.arange(d // 2, dtype=torch.float32) / d")),
        mutant="exponent i/d instead of 2i/d"),
    bug("apply_rope", "positions 0..N-1", rope((
        "positions.float()[:, None]", "torch.arange(x.shape[-2]).float()[:, None]")),
        mutant="positions ignored"),
    # unforeseen
    bug("apply_rope", "base ignored", rope(("theta = base **", "theta = 10000.0 **")),
        expect=("base argument", "ignore"), kind="argument"),
    bug("apply_rope", "computed under torch.no_grad()", ROPE +
        "    with torch.no_grad():\n" + "".join("    " + line + "\n"
                                                for line in ROPE_BODY.splitlines()),
        expect=("gradient", "no_grad"), kind="gradient"),
    bug("apply_rope", "torch.tensor(...) around the result", rope((
        "    return x * angles.cos()", "    return torch.tensor(x * angles.cos()"),
        ("* angles.sin()\n", "* angles.sin())\n")), expect=("gradient",), kind="gradient"),
    bug("apply_rope", "halves written back into x", ROPE +
        "    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)\n"
        "    angles = positions.float()[:, None] * theta\n"
        "    cos, sin = angles.cos(), angles.sin()\n"
        "    x1, x2 = x[..., : d // 2].clone(), x[..., d // 2:].clone()\n"
        "    x[..., : d // 2] = x1 * cos - x2 * sin\n"
        "    x[..., d // 2:] = x2 * cos + x1 * sin\n"
        "    return x\n", expect=INPLACE, kind="in-place"),
    bug("apply_rope", "positions rebuilt from the first one", rope((
        "positions.float()[:, None]",
        "(positions[0] + torch.arange(len(positions))).float()[:, None]")),
        expect=("positions you are given", "positions passed", "its own position"),
        kind="boundary"),
    bug("apply_rope", "cos and sin swapped", rope((
        "x * angles.cos() + torch.cat([-x2, x1], dim=-1) * angles.sin()",
        "x * angles.sin() + torch.cat([-x2, x1], dim=-1) * angles.cos()")),
        mutant="cos and sin swapped"),
    bug("apply_rope", "positive exponent (multiplies by base^(2i/d))", rope((
        "base ** (-torch.arange", "base ** (torch.arange")),
        expect=("multiply", "divide", "minus sign")),
    bug("apply_rope", "cat(-x1, x2)", rope(("torch.cat([-x2, x1], dim=-1)",
                                            "torch.cat([-x1, x2], dim=-1)")),
        expect=("cat(−x1, x2)", "−x1")),
    alt("apply_rope", "complex multiplication", ROPE +
        "    inv = 1.0 / base ** (torch.arange(0, d, 2).float() / d)\n"
        "    angles = torch.outer(positions.float(), inv)\n"
        "    z = torch.complex(x[..., : d // 2], x[..., d // 2:]) * torch.polar("
        "torch.ones_like(angles), angles)\n"
        "    return torch.cat([z.real, z.imag], dim=-1)\n"),
    alt("apply_rope", "half-size cos and sin, halves by hand", ROPE +
        "    theta = torch.exp(-math.log(base) * torch.arange(0, d, 2).float() / d)\n"
        "    m = positions[:, None].float() * theta\n"
        "    c, s = torch.cos(m), torch.sin(m)\n"
        "    x1, x2 = x.chunk(2, dim=-1)\n"
        "    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)\n"),
    alt("apply_rope", "repeat(1, 2) and rotate by flip of halves", ROPE +
        "    half = d // 2\n"
        "    theta = 1.0 / (base ** (2 * torch.arange(half, dtype=torch.float32) / d))\n"
        "    ang = (positions.unsqueeze(-1) * theta).repeat(1, 2)\n"
        "    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)\n"
        "    return x * torch.cos(ang) + rot * torch.sin(ang)\n"),
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
LN_BODY = ("        mu = x.mean(dim=-1, keepdim=True)\n"
           "        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)\n"
           "        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias\n")


def ln(*replace, head=LN):
    return head + _edit(LN_BODY, replace)


Q1 = [
    bug("LayerNorm", "x.var() (unbiased)", ln((
        "(x - mu).pow(2).mean(dim=-1, keepdim=True)", "x.var(dim=-1, keepdim=True)")),
        mutant="unbiased variance"),
    bug("LayerNorm", "sqrt(var) + eps", LN +
        "        mu = x.mean(dim=-1, keepdim=True)\n"
        "        var = x.var(dim=-1, keepdim=True, unbiased=False)\n"
        "        return (x - mu) / (var.sqrt() + self.eps) * self.weight + self.bias\n",
        mutant="ε outside the root"),
    bug("LayerNorm", "over the positions (dim=1)", ln(("dim=-1", "dim=1")),
        mutant="normalised over the positions"),
    bug("LayerNorm", "no γ and β", ln((" * self.weight + self.bias", "")), mutant="no γ and β"),
    # unforeseen
    bug("LayerNorm", "x.std() + eps", LN +
        "        mu = x.mean(dim=-1, keepdim=True)\n"
        "        std = x.std(dim=-1, keepdim=True, unbiased=False)\n"
        "        return (x - mu) / (std + self.eps) * self.weight + self.bias\n",
        expect=("square root", "root")),
    bug("LayerNorm", "eps hard-coded", ln(("var + self.eps", "var + 1e-5")),
        expect=("eps",), kind="argument"),
    bug("LayerNorm", "no eps at all", ln(("torch.sqrt(var + self.eps)", "torch.sqrt(var)")),
        expect=("eps", "σ² = 0", "finite"), kind="boundary"),
    bug("LayerNorm", "γ and β through .data", ln((
        "* self.weight + self.bias", "* self.weight.data + self.bias.data")),
        expect=("gradient",), kind="gradient"),
    bug("LayerNorm", "statistics detached", ln((
        "x.mean(dim=-1, keepdim=True)\n", "x.mean(dim=-1, keepdim=True).detach()\n"), (
        "mean(dim=-1, keepdim=True)\n        return", "mean(dim=-1, keepdim=True).detach()\n"
                                                  "        return")),
        expect=("gradient",), kind="gradient"),
    bug("LayerNorm", "statistics under torch.no_grad()", LN +
        "        with torch.no_grad():\n"
        "            mu = x.mean(dim=-1, keepdim=True)\n"
        "            sigma = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + self.eps)\n"
        "        return (x - mu) / sigma * self.weight + self.bias\n",
        expect=("gradient", "no_grad"), kind="gradient"),
    bug("LayerNorm", "x -= mu", LN +
        "        x -= x.mean(dim=-1, keepdim=True)\n"
        "        var = x.pow(2).mean(dim=-1, keepdim=True)\n"
        "        return x / torch.sqrt(var + self.eps) * self.weight + self.bias\n",
        expect=INPLACE, kind="in-place"),
    bug("LayerNorm", "E[x²] − μ² (cancels for a large mean)", ln((
        "(x - mu).pow(2).mean(dim=-1, keepdim=True)",
        "(x * x).mean(dim=-1, keepdim=True) - mu * mu")),
        expect=("cancel", "E[x²]", "large mean"), kind="boundary"),
    bug("LayerNorm", "γ, β renamed gamma, beta", LN.replace("self.weight", "self.gamma").replace(
        "self.bias", "self.beta") +
        "        mu = x.mean(dim=-1, keepdim=True)\n"
        "        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)\n"
        "        return (x - mu) / torch.sqrt(var + self.eps) * self.gamma + self.beta\n",
        expect=("weight", "gamma"), kind="naming"),
    bug("LayerNorm", "over every non-batch axis", ln(("dim=-1", "dim=(-2, -1)")),
        expect=("axis", "dim=-1", "last dimension")),
    bug("LayerNorm", "β added before γ scales", ln((
        "/ torch.sqrt(var + self.eps) * self.weight + self.bias",
        "/ torch.sqrt(var + self.eps) + self.bias) * self.weight"), ("return (x - mu)",
                                                                  "return ((x - mu)")),
        expect=("order", "after scaling", "shift after")),
    alt("LayerNorm", "F.layer_norm", LN +
        "        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)\n"),
    alt("LayerNorm", "var_mean, rsqrt, addcmul", LN +
        "        var, mu = torch.var_mean(x, dim=-1, keepdim=True, correction=0)\n"
        "        return torch.addcmul(self.bias, (x - mu) * torch.rsqrt(var + self.eps),"
        " self.weight)\n"),
    alt("LayerNorm", "γ first, std by hand", LN +
        "        centred = x - x.mean(-1, keepdim=True)\n"
        "        std = (centred.square().sum(-1, keepdim=True) / x.size(-1) + self.eps).sqrt()\n"
        "        return self.weight * centred / std + self.bias\n"),
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
FF_RIGHT = "        return self.linear2(self.dropout(self.activation(self.linear1(x))))\n"


def ff(body, head=FF, replace=()):
    return _edit(head, replace) + body


FF_NAME = ('self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]',
           "self.act_name = activation")
TANH_GELU = ("0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))")

Q2 = [
    bug("FeedForward", "no activation, no dropout", ff(
        "        return self.linear2(self.linear1(x))\n"), mutant="no activation"),
    bug("FeedForward", "always ReLU, no dropout", ff(
        "        return self.linear2(F.relu(self.linear1(x)))\n"),
        mutant="activation argument ignored"),
    bug("FeedForward", "activation after linear2 too, no dropout", ff(
        "        return self.activation(self.linear2(self.activation(self.linear1(x))))\n"),
        mutant="activation after the second layer too"),
    bug("FeedForward", "tanh GELU by hand, no dropout", ff(
        "        h = self.linear1(x)\n"
        f"        h = F.relu(h) if self.act_name == 'relu' else {TANH_GELU}\n"
        "        return self.linear2(h)\n", replace=[FF_NAME]),
        mutant="tanh-approximate GELU"),
    # unforeseen
    bug("FeedForward", "dropout missing", ff(
        "        return self.linear2(self.activation(self.linear1(x)))\n"),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("FeedForward", "dropout on the output", ff(
        "        return self.dropout(self.linear2(self.activation(self.linear1(x))))\n"),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("FeedForward", "dropout on the input", ff(
        "        return self.linear2(self.activation(self.linear1(self.dropout(x))))\n"),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("FeedForward", "F.dropout without training=self.training", ff(
        "        h = self.activation(self.linear1(x))\n"
        "        return self.linear2(F.dropout(h, self.dropout.p))\n"),
        expect=("dropout", "training"), kind="dropout"),
    bug("FeedForward", "dropout hard-coded to 0.1", ff(FF_RIGHT, replace=[(
        "nn.Dropout(dropout)", "nn.Dropout(0.1)")]), expect=("dropout", "Dropout"),
        kind="argument"),
    bug("FeedForward", "always GELU", ff(
        "        return self.linear2(self.dropout(F.gelu(self.linear1(x))))\n"),
        expect=("activation='relu'", "ReLU"), kind="argument"),
    bug("FeedForward", "no activation (dropout kept)", ff(
        "        return self.linear2(self.dropout(self.linear1(x)))\n"),
        expect=("non-linearity", "Apply the activation")),
    bug("FeedForward", "tanh GELU by hand (dropout kept)", ff(
        "        h = self.linear1(x)\n"
        f"        h = F.relu(h) if self.act_name == 'relu' else {TANH_GELU}\n"
        "        return self.linear2(self.dropout(h))\n", replace=[FF_NAME]),
        expect=("tanh", "exact GELU")),
    bug("FeedForward", "activation under torch.no_grad()", ff(
        "        h = self.linear1(x)\n"
        "        with torch.no_grad():\n"
        "            h = self.activation(h)\n"
        "        return self.linear2(self.dropout(h))\n"), expect=("gradient", "no_grad"),
        kind="gradient"),
    bug("FeedForward", "weights through .data", ff(
        "        h = F.linear(x, self.linear1.weight.data, self.linear1.bias.data)\n"
        "        return self.linear2(self.dropout(self.activation(h)))\n"),
        expect=("gradient",), kind="gradient"),
    bug("FeedForward", "residual inside, x +=", ff(
        "        x += self.linear2(self.dropout(self.activation(self.linear1(x))))\n"
        "        return x\n"), expect=INPLACE, kind="in-place"),
    bug("FeedForward", "residual inside", ff(
        "        return x + self.linear2(self.dropout(self.activation(self.linear1(x))))\n"),
        expect=("residual",)),
    bug("FeedForward", "x.squeeze() (one position)", ff(
        "        x = x.squeeze()\n" + FF_RIGHT), expect=("squeeze", "shape"), kind="boundary"),
    bug("FeedForward", "activation on the output only", ff(
        "        return self.activation(self.linear2(self.dropout(self.linear1(x))))\n"),
        expect=("between the two layers", "output of linear2")),
    alt("FeedForward", "F.linear and F.dropout(training=self.training)", ff(
        "        h = self.activation(F.linear(x, self.linear1.weight, self.linear1.bias))\n"
        "        h = F.dropout(h, p=self.dropout.p, training=self.training)\n"
        "        return F.linear(h, self.linear2.weight, self.linear2.bias)\n")),
    alt("FeedForward", "modules, linear2 created first", '''class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.linear2 = nn.Linear(d_ff, d_model)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.act = nn.ReLU() if activation == "relu" else nn.GELU()
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x):
        return self.linear2(self.drop(self.act(self.linear1(x))))
'''),
    alt("FeedForward", "einsum, exact GELU by erf", ff(
        "        h = torch.einsum('...d,fd->...f', x, self.linear1.weight) + self.linear1.bias\n"
        "        h = torch.clamp(h, min=0) if self.kind == 'relu' else"
        " 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))\n"
        "        h = self.dropout(h)\n"
        "        return torch.einsum('...f,df->...d', h, self.linear2.weight) + self.linear2.bias\n",
        replace=[(FF_NAME[0], "self.kind = activation")])),
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
NO_DROPOUT = [("return self.dropout1(out)", "return out"),
              ("x + self.dropout2(self.ff(self.norm2(x)))", "x + self.ff(self.norm2(x))"),
              ("x + self.dropout2(self.ff(x))", "x + self.ff(x)")]


def enc(*replace, dropout=True, head=ENC, head_replace=()):
    return _edit(head, head_replace) + _edit(ENC_BODY, ([] if dropout else NO_DROPOUT)
                                              + list(replace))


Q3 = [
    bug("EncoderBlock", "no residual around attention", enc(
        ("x = x + attend(self.norm1(x))", "x = attend(self.norm1(x))"),
        ("x = self.norm1(x + attend(x))", "x = self.norm1(attend(x))"), dropout=False),
        mutant="no residual around attention"),
    bug("EncoderBlock", "no residual around the FFN", enc(
        ("x = x + self.ff(self.norm2(x))", "x = self.ff(self.norm2(x))"),
        ("x = self.norm2(x + self.ff(x))", "x = self.norm2(self.ff(x))"), dropout=False),
        mutant="no residual around the FFN"),
    bug("EncoderBlock", "Pre-LN normalises the stream", enc(
        ("x = x + attend(self.norm1(x))\n            x = x + self.ff(self.norm2(x))",
         "x = self.norm1(x)\n            x = x + attend(x)\n            x = self.norm2(x)\n"
         "            x = x + self.ff(x)"), dropout=False),
        mutant="Pre-LN adds the residual after the norm"),
    bug("EncoderBlock", "always Post-LN", enc(
        ("        if self.norm_first:\n            x = x + attend(self.norm1(x))\n"
         "            x = x + self.ff(self.norm2(x))\n        else:\n"
         "            x = self.norm1(x + attend(x))\n            x = self.norm2(x + self.ff(x))\n",
         "        x = self.norm1(x + attend(x))\n        x = self.norm2(x + self.ff(x))\n"),
        dropout=False), mutant="norm_first ignored"),
    bug("EncoderBlock", "key_mask not passed", enc(
        ("self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
         "self.self_attn(h, is_causal=is_causal)"), dropout=False), mutant="key_mask ignored"),
    bug("EncoderBlock", "is_causal not passed", enc(
        ("self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
         "self.self_attn(h, key_mask=key_mask)"), dropout=False), mutant="is_causal ignored"),
    # unforeseen
    bug("EncoderBlock", "no dropout at all", enc(dropout=False),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("EncoderBlock", "no dropout on the attention output", enc(
        ("return self.dropout1(out)", "return out")), expect=("dropout", "Dropout"),
        kind="dropout"),
    bug("EncoderBlock", "dropout after the residual sum (Post-LN)", enc(
        ("x = self.norm1(x + attend(x))", "x = self.norm1(self.dropout1(x + out_of(x)))"),
        ("x = self.norm2(x + self.dropout2(self.ff(x)))",
         "x = self.norm2(self.dropout2(x + self.ff(x)))"),
        ("        if self.norm_first:", "        def out_of(h):\n"
         "            return self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0]\n\n"
         "        if self.norm_first:")), expect=("dropout", "Dropout"), kind="dropout"),
    bug("EncoderBlock", "no dropout inside the attention", enc(head_replace=[(
        "MultiHeadAttention(d_model, n_heads, dropout=dropout)",
        "MultiHeadAttention(d_model, n_heads)")]), expect=("dropout", "Dropout"),
        mutant="no dropout inside the attention", kind="dropout"),
    bug("EncoderBlock", "key_mask not passed (dropout right)", enc(
        ("self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
         "self.self_attn(h, is_causal=is_causal)")), expect=("key_mask",), kind="mask"),
    bug("EncoderBlock", "always Post-LN (dropout right)", enc(
        ("if self.norm_first:", "if False:")), expect=("norm_first",),
        kind="argument"),
    bug("EncoderBlock", "activation not passed to the FFN", enc(head_replace=[(
        "FeedForward(d_model, d_ff, dropout, activation)", "FeedForward(d_model, d_ff, dropout)")]),
        expect=("activation", "GELU"), kind="argument"),
    bug("EncoderBlock", "key_mask inverted (True = padding)", enc(
        ("key_mask=key_mask, is_causal", "key_mask=None if key_mask is None else ~key_mask,"
                                         " is_causal")),
        expect=("inverted", "True at real", "True = a real"), kind="mask"),
    bug("EncoderBlock", "x += in Pre-LN", enc(
        ("x = x + attend(self.norm1(x))", "x += attend(self.norm1(x))")),
        expect=INPLACE, kind="in-place"),
    bug("EncoderBlock", "residual kept with clone().detach()", enc(
        ("        if self.norm_first:\n            x = x + attend(self.norm1(x))",
         "        residual = x.clone().detach()\n"
         "        if self.norm_first:\n            x = residual + attend(self.norm1(x))"),
        ("x = self.norm1(x + attend(x))", "x = self.norm1(residual + attend(x))")),
        expect=("gradient", "detach"), kind="gradient"),
    bug("EncoderBlock", "norm1 and norm2 swapped (Post-LN)", enc(
        ("x = self.norm1(x + attend(x))", "x = self.norm2(x + attend(x))"),
        ("x = self.norm2(x + self.dropout2(self.ff(x)))",
         "x = self.norm1(x + self.dropout2(self.ff(x)))")), expect=("norm1", "norm2", "swapped")),
    bug("EncoderBlock", "Post-LN normalises the sub-layer output only", enc(
        ("x = self.norm1(x + attend(x))", "x = x + self.norm1(attend(x))"),
        ("x = self.norm2(x + self.dropout2(self.ff(x)))",
         "x = x + self.norm2(self.dropout2(self.ff(x)))")),
        expect=("normalise the sum", "norm placement", "inside the residual")),
    bug("EncoderBlock", "padded queries masked too", enc(
        ("        def attend(h):\n            out, _ = self.self_attn(h, key_mask=key_mask, "
         "is_causal=is_causal)",
         "        pair = None if key_mask is None else key_mask[:, None, None, :] & "
         "key_mask[:, None, :, None]\n"
         "        def attend(h):\n            out, _ = self.self_attn(h, attn_mask=pair, "
         "is_causal=is_causal)")),
        expect=("padding keys", "keys", "queries"), kind="mask"),
    alt("EncoderBlock", "causal mask built by hand (attn_mask)", enc((
        "        def attend(h):\n            out, _ = self.self_attn(h, key_mask=key_mask, "
        "is_causal=is_causal)",
        "        N = x.shape[1]\n"
        "        causal = torch.ones(N, N, dtype=torch.bool).tril() if is_causal else None\n\n"
        "        def attend(h):\n"
        "            out, _ = self.self_attn(h, attn_mask=causal, key_mask=key_mask)"))),
    alt("EncoderBlock", "sublayer helper (Annotated Transformer)", ENC +
        "        def sublayer(x, norm, fn, drop):\n"
        "            if self.norm_first:\n"
        "                return x + drop(fn(norm(x)))\n"
        "            return norm(x + drop(fn(x)))\n\n"
        "        x = sublayer(x, self.norm1, lambda h: self.self_attn(h, h, key_mask=key_mask,"
        " is_causal=is_causal)[0], self.dropout1)\n"
        "        x = sublayer(x, self.norm2, self.ff, self.dropout2)\n"
        "        return x, None\n"),
    alt("EncoderBlock", "own __init__ order, F.dropout", '''class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.p, self.norm_first = dropout, norm_first

    def forward(self, x, key_mask=None, is_causal=False):
        drop = lambda t: F.dropout(t, self.p, self.training)
        if self.norm_first:
            h = self.norm1(x)
            x = x + drop(self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0])
            return x + drop(self.ff(self.norm2(x))), None
        x = self.norm1(x + drop(self.self_attn(x, key_mask=key_mask, is_causal=is_causal)[0]))
        return self.norm2(x + drop(self.ff(x))), None
'''),
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
DEC_NO_DROPOUT = [
    ("return self.dropout1(self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0])",
     "return self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0]"),
    ("return self.dropout2(self.cross_attn(h, memory, key_mask=memory_mask)[0])",
     "return self.cross_attn(h, memory, key_mask=memory_mask)[0]"),
    ("self.dropout3(self.ff(self.norm3(y)))", "self.ff(self.norm3(y))"),
    ("self.dropout3(self.ff(y))", "self.ff(y)")]


def dec(*replace, dropout=True, head=DEC, head_replace=()):
    return _edit(head, head_replace) + _edit(DEC_BODY, ([] if dropout else DEC_NO_DROPOUT)
                                              + list(replace))


Q4 = [
    bug("DecoderBlock", "self-attention not causal", dec(
        ("key_mask=key_mask, is_causal=is_causal)", "key_mask=key_mask)"), dropout=False),
        mutant="the decoder sees the future"),
    bug("DecoderBlock", "cross-attention to itself", dec(
        ("self.cross_attn(h, memory, key_mask=memory_mask)", "self.cross_attn(h, h)"),
        dropout=False), mutant="cross-attention keys from the decoder"),
    bug("DecoderBlock", "memory_mask not passed", dec(
        ("self.cross_attn(h, memory, key_mask=memory_mask)", "self.cross_attn(h, memory)"),
        dropout=False), mutant="memory_mask ignored"),
    bug("DecoderBlock", "no residual around cross-attention", dec(
        ("y = y + cross_attend(self.norm2(y))", "y = cross_attend(self.norm2(y))"),
        ("y = self.norm2(y + cross_attend(y))", "y = self.norm2(cross_attend(y))"),
        dropout=False), mutant="no residual around cross-attention"),
    bug("DecoderBlock", "Pre-LN norm2 on memory too", dec(
        ("y = y + cross_attend(self.norm2(y))",
         "y = y + self.cross_attn(self.norm2(y), self.norm2(memory), key_mask=memory_mask)[0]"),
        dropout=False), mutant="Pre-LN normalises memory too"),
    # unforeseen
    bug("DecoderBlock", "is_causal forced True", dec((
        "key_mask=key_mask, is_causal=is_causal)", "key_mask=key_mask, is_causal=True)")),
        expect=("is_causal",), kind="argument"),
    bug("DecoderBlock", "activation not passed to the FFN", dec(head_replace=[(
        "FeedForward(d_model, d_ff, dropout, activation)", "FeedForward(d_model, d_ff, dropout)")]),
        expect=("activation",), kind="argument"),
    bug("DecoderBlock", "no dropout inside the cross-attention", dec(head_replace=[(
        "self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)",
        "self.cross_attn = MultiHeadAttention(d_model, n_heads)")]),
        mutant="no dropout inside the cross-attention", kind="dropout"),
    bug("DecoderBlock", "no dropout inside the self-attention", dec(head_replace=[(
        "self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)",
        "self.self_attn = MultiHeadAttention(d_model, n_heads)")]),
        mutant="no dropout inside the self-attention", kind="dropout"),
    bug("DecoderBlock", "no dropout at all", dec(dropout=False),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("DecoderBlock", "no dropout on the cross-attention output", dec((
        "return self.dropout2(self.cross_attn(h, memory, key_mask=memory_mask)[0])",
        "return self.cross_attn(h, memory, key_mask=memory_mask)[0]")),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("DecoderBlock", "dropout after the norm (Post-LN)", dec(
        ("y = self.norm1(y + self_attend(y))",
         "y = self.dropout1(self.norm1(y + self.self_attn(y, key_mask=key_mask,"
         " is_causal=is_causal)[0]))"),
        ("y = self.norm2(y + cross_attend(y))",
         "y = self.dropout2(self.norm2(y + self.cross_attn(y, memory,"
         " key_mask=memory_mask)[0]))"),
        ("y = self.norm3(y + self.dropout3(self.ff(y)))",
         "y = self.dropout3(self.norm3(y + self.ff(y)))")),
        expect=("dropout", "Dropout"), kind="dropout"),
    bug("DecoderBlock", "memory_mask not passed (dropout right)", dec((
        "self.cross_attn(h, memory, key_mask=memory_mask)", "self.cross_attn(h, memory)")),
        expect=("memory_mask",), kind="mask"),
    bug("DecoderBlock", "masks swapped between self- and cross-attention", dec(
        ("self.self_attn(h, key_mask=key_mask,", "self.self_attn(h, key_mask=memory_mask,"),
        ("self.cross_attn(h, memory, key_mask=memory_mask)",
         "self.cross_attn(h, memory, key_mask=key_mask)")),
        expect=("memory_mask",), kind="mask"),
    bug("DecoderBlock", "key_mask not passed", dec((
        "self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
        "self.self_attn(h, is_causal=is_causal)")), expect=("key_mask",), kind="mask"),
    bug("DecoderBlock", "y += in Pre-LN", dec(
        ("y = y + self_attend(self.norm1(y))", "y += self_attend(self.norm1(y))")),
        expect=INPLACE, kind="in-place"),
    bug("DecoderBlock", "memory detached", dec((
        "self.cross_attn(h, memory, key_mask", "self.cross_attn(h, memory.detach(), key_mask")),
        expect=("gradient", "detach"), kind="gradient"),
    bug("DecoderBlock", "cross-attention causal too", dec((
        "self.cross_attn(h, memory, key_mask=memory_mask)",
        "self.cross_attn(h, memory, key_mask=memory_mask, is_causal=is_causal)")),
        expect=("not causal", "every source position", "all of memory"), kind="mask"),
    bug("DecoderBlock", "queries from memory in cross-attention", dec((
        "self.cross_attn(h, memory, key_mask=memory_mask)",
        "self.cross_attn(memory, h, key_mask=key_mask)")),
        expect=("queries come from the decoder", "N_t rows")),
    bug("DecoderBlock", "norm2 reused before the FFN (Post-LN)", dec((
        "y = self.norm3(y + self.dropout3(self.ff(y)))",
        "y = self.norm2(y + self.dropout3(self.ff(y)))")), expect=("norm3", "LN₃")),
    bug("DecoderBlock", "cross-attention before self-attention", dec((
        "            y = self.norm1(y + self_attend(y))\n            y = self.norm2(y + cross_attend(y))\n",
        "            y = self.norm2(y + cross_attend(y))\n            y = self.norm1(y + self_attend(y))\n"),
        ("            y = y + self_attend(self.norm1(y))\n"
         "            y = y + cross_attend(self.norm2(y))\n",
         "            y = y + cross_attend(self.norm2(y))\n"
         "            y = y + self_attend(self.norm1(y))\n")),
        expect=("order", "self-attention first", "first")),
    alt("DecoderBlock", "causal mask by hand, memory as x_kv", dec(
        ("        def self_attend(h):\n",
         "        N = y.shape[1]\n"
         "        future = torch.ones(N, N, dtype=torch.bool).tril() if is_causal else None\n\n"
         "        def self_attend(h):\n"),
        ("self.self_attn(h, key_mask=key_mask, is_causal=is_causal)",
         "self.self_attn(h, h, attn_mask=future, key_mask=key_mask)"),
        ("self.cross_attn(h, memory, key_mask=memory_mask)",
         "self.cross_attn(x_q=h, x_kv=memory, key_mask=memory_mask)"))),
    alt("DecoderBlock", "loop over sub-layers", DEC +
        "        subs = [\n"
        "            (self.norm1, self.dropout1,"
        " lambda h: self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0]),\n"
        "            (self.norm2, self.dropout2,"
        " lambda h: self.cross_attn(h, memory, key_mask=memory_mask)[0]),\n"
        "            (self.norm3, self.dropout3, self.ff),\n"
        "        ]\n"
        "        for norm, drop, fn in subs:\n"
        "            y = y + drop(fn(norm(y))) if self.norm_first else norm(y + drop(fn(y)))\n"
        "        return y, None, None\n"),
    alt("DecoderBlock", "own __init__ order, F.dropout", '''class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model) for _ in range(3))
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.p, self.norm_first = dropout, norm_first

    def forward(self, y, memory, key_mask=None, memory_mask=None, is_causal=True):
        drop = lambda t: F.dropout(t, self.p, self.training)
        sa = lambda h: drop(self.self_attn(h, key_mask=key_mask, is_causal=is_causal)[0])
        ca = lambda h: drop(self.cross_attn(h, memory, key_mask=memory_mask)[0])
        fn = lambda h: drop(self.ff(h))
        if self.norm_first:
            y = y + sa(self.norm1(y))
            y = y + ca(self.norm2(y))
            return y + fn(self.norm3(y)), None, None
        y = self.norm1(y + sa(y))
        y = self.norm2(y + ca(y))
        return self.norm3(y + fn(y)), None, None
'''),
]

VARIANTS = [*P1, *P2, *P3, *Q1, *Q2, *Q3, *Q4]
