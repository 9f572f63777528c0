'''A corpus of plausible student code for the exercises of Chapters 1–4, kept apart from the
suites: bugs the suites' mutants foresaw (one per mutant), bugs they did not, and correct
alternatives. ``tests/test_grading_corpus.py`` grades each source with ``check()``'s path and
with ``coursekit grade`` and measures what the issue "verdicts students can trust" asks for.

Each variant is the source of an exercise cell. A bug names the phrase a hint must contain to
name it (``expect``; a bug that *is* a suite mutant must get that mutant's hint); ``kind`` says
which class of problem it represents.
'''

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    exercise: str  # the exercise (suite) name
    name: str
    source: str
    bug: bool = True
    mutant: str = ""  # the suite mutant this bug is, if any
    expect: tuple[str, ...] = ()  # phrases, any of which names the bug in a hint
    kind: str = "logic"  # logic, in-place, fill, mask, namespace, layout, type, buffer
    # A bug the suites knowingly do not catch, and why: the test checks that it still earns
    # full marks (so a fix that catches it must remove the mark) and counts it.
    missed: str = ""


def bug(exercise, name, source, mutant="", expect=(), kind="logic", missed=""):
    expect = (expect,) if isinstance(expect, str) else tuple(expect)
    return Variant(exercise, name, source, True, mutant, expect, kind, missed)


def alt(exercise, name, source, kind="logic"):
    return Variant(exercise, name, source, False, kind=kind)


INPLACE = ("in place",)

# ----------------------------------------------------------------------------- 01.1 rnn_cell
RNN = "def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):\n"
R = [
    bug("rnn_cell", "relu", RNN + "    return torch.relu(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)\n",
        mutant="relu"),
    bug("rnn_cell", "no recurrence", RNN + "    return torch.tanh(x @ W_ih.T + b_ih + b_hh)\n",
        mutant="no recurrence"),
    bug("rnn_cell", "one bias", RNN + "    return torch.tanh(x @ W_ih.T + h @ W_hh.T + b_ih)\n",
        mutant="one bias"),
    bug("rnn_cell", "bias += in place", RNN + "    bias = b_ih\n    bias += b_hh\n"
        "    return torch.tanh(x @ W_ih.T + h @ W_hh.T + bias)\n", expect=INPLACE, kind="in-place"),
    bug("rnn_cell", "result written into h", RNN +
        "    return h.copy_(torch.tanh(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh))\n",
        expect=INPLACE, kind="in-place"),
    bug("rnn_cell", "sigmoid", RNN +
        "    return torch.sigmoid(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)\n", mutant="sigmoid"),
    bug("rnn_cell", "weights not transposed", RNN +
        "    return torch.tanh(x @ W_ih + b_ih + h @ W_hh + b_hh)\n", mutant="weights not transposed"),
    bug("rnn_cell", "input weights on h", RNN +
        "    return torch.tanh(h @ W_ih.T + b_ih + x @ W_hh.T + b_hh)\n",
        mutant="input and recurrent weights swapped"),
    alt("rnn_cell", "F.linear", RNN +
        "    return torch.tanh(F.linear(x, W_ih, b_ih) + F.linear(h, W_hh, b_hh))\n"),
    alt("rnn_cell", "addmm", RNN +
        "    return torch.tanh(torch.addmm(b_ih, x, W_ih.t()) + torch.addmm(b_hh, h, W_hh.t()))\n"),
    alt("rnn_cell", "concatenated weights", RNN +
        "    W = torch.cat([W_ih, W_hh], dim=1)\n"
        "    return torch.tanh(torch.cat([x, h], dim=1) @ W.T + b_ih + b_hh)\n"),
]

# ----------------------------------------------------------------------------- 01.2 lstm_cell
LSTM = "def lstm_cell(x, state, W_ih, W_hh, b_ih, b_hh):\n    h, c = state\n"


def lstm(order="i, f, g, o", gate="torch.sigmoid", c_next="{f} * c + {i} * torch.tanh(g)",
         h_next="{o} * torch.tanh(c_next)", ret="h_next, c_next", pre=""):
    sig = {k: f"{gate}({k})" for k in "ifo"}
    return (LSTM + pre + f"    {order} = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)\n"
            f"    c_next = {c_next.format(**sig)}\n    h_next = {h_next.format(**sig)}\n"
            f"    return {ret}\n")


L = [
    bug("lstm_cell", "gate order i,f,o,g", lstm(order="i, f, o, g"), mutant="gate order i,f,o,g"),
    bug("lstm_cell", "gate order f,i,g,o", lstm(order="f, i, g, o"), mutant="gate order f,i,g,o"),
    bug("lstm_cell", "tanh gates", lstm(gate="torch.tanh"), mutant="tanh gates"),
    bug("lstm_cell", "cell state not carried", lstm(c_next="{i} * torch.tanh(g)"),
        mutant="cell state not carried"),
    bug("lstm_cell", "no tanh on c'", lstm(h_next="{o} * c_next"), mutant="no tanh on c'"),
    bug("lstm_cell", "c.mul_ on the caller's cell state",
        LSTM + "    i, f, g, o = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)\n"
        "    c.mul_(torch.sigmoid(f)).add_(torch.sigmoid(i) * torch.tanh(g))\n"
        "    return torch.sigmoid(o) * torch.tanh(c), c\n", expect=INPLACE, kind="in-place"),
    bug("lstm_cell", "bias += in place", lstm(pre="    b_ih += b_hh\n").replace(
        "+ b_ih + h @ W_hh.T + b_hh", "+ b_ih + h @ W_hh.T"), expect=INPLACE, kind="in-place"),
    bug("lstm_cell", "h.mul_ reuses the caller's h", lstm(
        h_next="h.mul_(0).add_({o} * torch.tanh(c_next))"), expect=INPLACE, kind="in-place"),
    bug("lstm_cell", "returns (c, h)", lstm(ret="c_next, h_next"), mutant="returns (c', h')"),
    bug("lstm_cell", "returns the caller's c", lstm(ret="h_next, c"),
        mutant="returns the old cell state", kind="alias"),
    bug("lstm_cell", "output gate without sigmoid", lstm(h_next="o * torch.tanh(c_next)"),
        mutant="output gate without sigmoid"),
    alt("lstm_cell", "namedtuple", "from collections import namedtuple\n\n"
        "LSTMState = namedtuple('LSTMState', ['h', 'c'])\n\n\n" + lstm(
            ret="LSTMState(h_next, c_next)"), kind="type"),
    alt("lstm_cell", "list", lstm(ret="[h_next, c_next]"), kind="type"),
    alt("lstm_cell", "view as (B, 4, H)", LSTM +
        "    gates = F.linear(x, W_ih, b_ih) + F.linear(h, W_hh, b_hh)\n"
        "    i, f, g, o = gates.view(x.shape[0], 4, -1).unbind(1)\n"
        "    c2 = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)\n"
        "    return torch.sigmoid(o) * torch.tanh(c2), c2\n"),
    alt("lstm_cell", "split", LSTM +
        "    H = h.shape[-1]\n"
        "    i, f, g, o = torch.split(x @ W_ih.T + h @ W_hh.T + (b_ih + b_hh), H, dim=1)\n"
        "    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)\n"
        "    return torch.sigmoid(o) * torch.tanh(c), c\n"),
]

# ----------------------------------------------------------------------------- 02.1 additive_score
SCORE = "def additive_score(s, h, W, U, v):\n"
A = [
    bug("additive_score", "missing tanh", SCORE + "    return ((s @ W.T)[:, None, :] + h @ U.T) @ v\n",
        mutant="missing tanh"),
    bug("additive_score", "W and U swapped",
        SCORE + "    return torch.tanh((s @ U.T)[:, None, :] + h @ W.T) @ v\n",
        mutant="W and U swapped"),
    bug("additive_score", "state not broadcast",
        SCORE + "    return torch.tanh(s @ W.T + h @ U.T) @ v\n",
        mutant="state not broadcast over positions"),
    bug("additive_score", "no v", SCORE + "    return torch.tanh((s @ W.T)[:, None, :] + h @ U.T).sum(-1)\n",
        mutant="no v"),
    bug("additive_score", "softmax applied",
        SCORE + "    return torch.softmax(torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v, dim=-1)\n",
        mutant="softmax applied"),
    bug("additive_score", "state unsqueezed on the wrong axis",
        SCORE + "    return torch.tanh((s @ W.T).unsqueeze(0) + h @ U.T) @ v\n",
        expect="Insert the positions axis"),
    bug("additive_score", "relu", SCORE + "    return torch.relu((s @ W.T)[:, None, :] + h @ U.T) @ v\n",
        mutant="relu instead of tanh"),
    alt("additive_score", "einsum", SCORE +
        "    return torch.einsum('bta,a->bt', torch.tanh(torch.einsum('as,bs->ba', W, s)[:, None]"
        " + torch.einsum('ah,bth->bta', U, h)), v)\n"),
    alt("additive_score", "F.linear and sum", SCORE +
        "    e = torch.tanh(F.linear(s, W).unsqueeze(1) + F.linear(h, U))\n"
        "    return (e * v).sum(dim=-1)\n"),
]

# ----------------------------------------------------------------------------- 02.2 masked_softmax
SM = "def masked_softmax(scores, mask=None):\n"
SM_NONE = "    if mask is None:\n        return torch.softmax(scores, dim=-1)\n"
S = [
    bug("masked_softmax", "batch axis", SM + "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return torch.softmax(scores, dim=0)\n", mutant="softmax over the batch axis"),
    bug("masked_softmax", "mask after softmax", SM + SM_NONE +
        "    return torch.softmax(scores, dim=-1) * mask\n", mutant="mask applied after the softmax"),
    bug("masked_softmax", "mask ignored", SM + "    return torch.softmax(scores, dim=-1)\n",
        mutant="mask ignored"),
    bug("masked_softmax", "inverted", SM + SM_NONE + "    mask = (~mask).expand_as(scores)\n"
        "    out = torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)\n"
        "    return out.nan_to_num(0.0)\n", mutant="inverted mask"),
    bug("masked_softmax", "NaN rows", SM + SM_NONE +
        "    return torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)\n",
        mutant="NaN on a fully masked row"),
    bug("masked_softmax", "uniform rows", SM + SM_NONE +
        "    return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), -1)\n",
        mutant="uniform weights on a fully masked row"),
    bug("masked_softmax", "-1e6 fill", SM + SM_NONE +
        "    return torch.softmax(scores.masked_fill(~mask, -1e6), dim=-1)\n", mutant="-1e6 fill",
        kind="fill"),
    bug("masked_softmax", "exp without max", SM +
        "    e = torch.exp(scores) if mask is None else torch.exp(scores) * mask\n"
        "    return e / e.sum(dim=-1, keepdim=True)\n", mutant="exp without the max subtracted"),
    bug("masked_softmax", "-1e9 fill, empty rows zeroed", SM + SM_NONE +
        "    w = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)\n"
        "    return w * mask.any(dim=-1, keepdim=True)\n", expect="below any finite fill",
        kind="fill"),
    bug("masked_softmax", "masked_fill_ on the caller's scores", SM + SM_NONE +
        "    scores.masked_fill_(~mask, float('-inf'))\n"
        "    return torch.softmax(scores, dim=-1).nan_to_num(0.0)\n", expect=INPLACE,
        kind="in-place"),
    bug("masked_softmax", "mask |= on empty rows", SM + SM_NONE +
        "    empty = ~mask.any(dim=-1, keepdim=True)\n    mask |= empty\n"
        "    w = torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)\n"
        "    return w.masked_fill(empty, 0.0)\n", expect=INPLACE, kind="in-place"),
    bug("masked_softmax", "mask viewed as the scores' shape", SM + SM_NONE +
        "    mask = mask.view(scores.shape)\n"
        "    return torch.softmax(scores.masked_fill(~mask, float('-inf')), -1).nan_to_num(0.0)\n",
        expect="broadcasts", kind="mask"),
    bug("masked_softmax", "(B, N) masks only", SM + SM_NONE +
        "    if scores.dim() == 3:\n        mask = mask[:, None, :]\n"
        "    return torch.softmax(scores.masked_fill(~mask, float('-inf')), -1).nan_to_num(0.0)\n",
        expect=("broadcasts", "full shape"), kind="mask"),
    alt("masked_softmax", "finfo.min fill, empty rows zeroed", SM + SM_NONE +
        "    w = torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)\n"
        "    return w * mask.any(dim=-1, keepdim=True)\n", kind="fill"),
    alt("masked_softmax", "nan_to_num", SM + SM_NONE +
        "    return torch.softmax(scores.masked_fill(~mask, float('-inf')), -1).nan_to_num(0.0)\n"),
    alt("masked_softmax", "by hand, stable", SM +
        "    if mask is None:\n        mask = torch.ones_like(scores, dtype=torch.bool)\n"
        "    mask = mask.expand_as(scores)\n"
        "    m = scores.masked_fill(~mask, float('-inf')).amax(dim=-1, keepdim=True)\n"
        "    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))\n"
        "    e = torch.where(mask, torch.exp(scores - m), torch.zeros_like(scores))\n"
        "    total = e.sum(dim=-1, keepdim=True)\n"
        "    return e / torch.where(total > 0, total, torch.ones_like(total))\n"),
    alt("masked_softmax", "torch.where", SM + SM_NONE +
        "    s = torch.where(mask, scores, torch.tensor(float('-inf')))\n"
        "    w = torch.softmax(s, dim=-1)\n"
        "    return torch.where(torch.isnan(w), torch.zeros_like(w), w)\n"),
]

# ----------------------------------------------------------------------------- 02.3 context_vector
CTX = "def context_vector(weights, h):\n"
C = [
    bug("context_vector", "feature axis", CTX + "    return (weights[:, :, None] * h).sum(dim=-1)\n",
        mutant="summed over the feature axis"),
    bug("context_vector", "batch axis", CTX + "    return (weights[:, :, None] * h).sum(dim=0)\n",
        mutant="summed over the batch axis"),
    bug("context_vector", "plain average", CTX + "    return h.mean(dim=1)\n",
        mutant="plain average of encoder states"),
    bug("context_vector", "mean", CTX + "    return (weights[:, :, None] * h).mean(dim=1)\n",
        mutant="weighted mean instead of sum"),
    bug("context_vector", "weights @ h", CTX + "    return weights @ h\n",
        mutant="weights @ h broadcast over the batch"),
    bug("context_vector", "h *= in place", CTX + "    h *= weights[:, :, None]\n"
        "    return h.sum(dim=1)\n", expect=INPLACE, kind="in-place"),
    alt("context_vector", "einsum", CTX + "    return torch.einsum('bt,btd->bd', weights, h)\n"),
    alt("context_vector", "bmm", CTX + "    return torch.bmm(weights.unsqueeze(1), h).squeeze(1)\n"),
    alt("context_vector", "broadcast sum", CTX + "    return (weights.unsqueeze(-1) * h).sum(1)\n"),
]

# ----------------------------------------------------------------------------- 03.1 sdpa
SDPA = "def scaled_dot_product_attention(q, k, v, mask=None):\n"


def sdpa(scale="math.sqrt(q.shape[-1])", fill="float('-inf')", dim="-1", guard=".nan_to_num(0.0)",
         scores="q @ k.transpose(-2, -1)", pre=""):
    return (SDPA + pre + f"    scores = {scores} / {scale}\n    if mask is not None:\n"
            f"        scores = scores.masked_fill(~mask, {fill})\n"
            f"    weights = torch.softmax(scores, dim={dim}){guard}\n    return weights @ v, weights\n")


D = [
    bug("scaled_dot_product_attention", "missing scale", sdpa(scale="1"), mutant="missing scale"),
    bug("scaled_dot_product_attention", "scaled by d", sdpa(scale="q.shape[-1]"),
        mutant="scaled by d"),
    bug("scaled_dot_product_attention", "scaled by √d_v", sdpa(scale="math.sqrt(v.shape[-1])"),
        mutant="scaled by √d_v"),
    bug("scaled_dot_product_attention", "softmax over queries", sdpa(dim="-2"),
        mutant="softmax over the queries"),
    bug("scaled_dot_product_attention", "mask after softmax", SDPA +
        "    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)\n"
        "    if mask is not None:\n        weights = weights * mask\n    return weights @ v, weights\n",
        mutant="mask after the softmax"),
    bug("scaled_dot_product_attention", "-1e6 fill", sdpa(fill="-1e6"), mutant="-1e6 fill",
        kind="fill"),
    bug("scaled_dot_product_attention", "mask inverted", sdpa(fill="float('-inf')").replace(
        "~mask", "mask"), mutant="mask inverted"),
    bug("scaled_dot_product_attention", "NaN rows", sdpa(guard=""),
        mutant="NaN for a fully masked row"),
    bug("scaled_dot_product_attention", "softmax by hand", SDPA +
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    e = torch.exp(scores)\n    weights = e / e.sum(dim=-1, keepdim=True)\n"
        "    if mask is not None:\n        weights = weights.nan_to_num(0.0)\n"
        "    return weights @ v, weights\n", mutant="softmax without the max trick"),
    bug("scaled_dot_product_attention", "softmax by hand, NaN zeroed", SDPA +
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    e = torch.exp(scores)\n    weights = (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0)\n"
        "    return weights @ v, weights\n", expect="overflows"),
    bug("scaled_dot_product_attention", "-1e9 fill", sdpa(fill="-1e9", guard="") .replace(
        "    return weights @ v", "    if mask is not None:\n"
        "        weights = weights * mask.any(dim=-1, keepdim=True)\n    return weights @ v"),
        expect="any finite fill", kind="fill"),
    bug("scaled_dot_product_attention", "q /= √d_k in place", SDPA +
        "    q /= math.sqrt(q.shape[-1])\n    scores = q @ k.transpose(-2, -1)\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n    return weights @ v, weights\n",
        expect=INPLACE, kind="in-place"),
    bug("scaled_dot_product_attention", "transpose(1, 2)", sdpa(scores="q @ k.transpose(1, 2)"),
        expect="last two axes"),
    bug("scaled_dot_product_attention", "(B, N_q, N_k) masks only", sdpa().replace(
        "masked_fill(~mask,",
        "masked_fill(~mask.view(-1, *scores.shape[-2:]).expand(scores.shape[0], -1, -1),"),
        mutant="mask forced to (B, N_q, N_k)", kind="mask"),
    # The reference itself, imported inside the cell: refused in the worker and by check() alike.
    bug("scaled_dot_product_attention", "imports coursekit at the top of the cell",
        "from coursekit.attention import scaled_dot_product_attention as reference\n\n\n" + SDPA +
        "    return reference(q, k, v, mask)\n", expect="without coursekit", kind="namespace"),
    bug("scaled_dot_product_attention", "imports coursekit inside the function", SDPA +
        "    from coursekit.attention import masked_softmax as softmax\n"
        "    weights = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask)\n"
        "    return weights @ v, weights\n", expect="without coursekit", kind="namespace"),
    alt("scaled_dot_product_attention", "masked_softmax from the set-up", SDPA +
        "    weights = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask)\n"
        "    return weights @ v, weights\n", kind="namespace"),
    alt("scaled_dot_product_attention", "torch.where", SDPA +
        "    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5\n"
        "    if mask is not None:\n"
        "        scores = torch.where(mask, scores, torch.full_like(scores, float('-inf')))\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)\n"
        "    return torch.matmul(weights, v), weights\n"),
    alt("scaled_dot_product_attention", "scale q first", SDPA +
        "    q = q / math.sqrt(q.shape[-1])\n    scores = q @ k.mT\n"
        "    if mask is not None:\n        scores = scores.masked_fill(mask == 0, float('-inf'))\n"
        "    weights = scores.softmax(-1).nan_to_num(0.0)\n    return weights @ v, weights\n"),
]

# ----------------------------------------------------------------------------- 03.2 causal_mask
CM = "def causal_mask(n_q, n_k=None):\n    n_k = n_q if n_k is None else n_k\n"
M = [
    bug("causal_mask", "transposed", CM +
        "    return torch.ones(n_k, n_q, dtype=torch.bool).tril(diagonal=n_k - n_q).T\n",
        mutant="transposed"),
    bug("causal_mask", "diagonal excluded", CM +
        "    return torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q - 1)\n",
        mutant="diagonal excluded"),
    bug("causal_mask", "one step ahead", CM +
        "    return torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q + 1)\n",
        mutant="one step ahead"),
    bug("causal_mask", "inverted", CM +
        "    return ~torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_k - n_q)\n",
        mutant="inverted"),
    bug("causal_mask", "float", CM + "    return torch.ones(n_q, n_k).tril(diagonal=n_k - n_q)\n",
        mutant="float mask"),
    bug("causal_mask", "top-left", CM + "    return torch.ones(n_q, n_k, dtype=torch.bool).tril()\n",
        mutant="top-left alignment"),
    bug("causal_mask", "square only", CM + "    return torch.ones(n_q, n_q, dtype=torch.bool).tril()\n",
        expect="N_k > N_q"),
    bug("causal_mask", "upper triangle", CM +
        "    return torch.ones(n_q, n_k, dtype=torch.bool).triu(diagonal=n_k - n_q)\n",
        mutant="upper triangle"),
    alt("causal_mask", "arange comparison", CM +
        "    return torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + (n_k - n_q)\n"),
    alt("causal_mask", "not triu", CM +
        "    return ~torch.ones(n_q, n_k, dtype=torch.bool).triu(diagonal=n_k - n_q + 1)\n"),
    alt("causal_mask", "tril of a float, as bool", CM +
        "    return torch.tril(torch.ones(n_q, n_k), diagonal=n_k - n_q).bool()\n"),
]

# ----------------------------------------------------------------------------- 03.3 SelfAttention
SA_INIT = ("class SelfAttention(nn.Module):\n    def __init__(self, d_model, d_k=None, d_v=None):\n"
           "        super().__init__()\n        d_k = d_model if d_k is None else d_k\n"
           "        d_v = d_k if d_v is None else d_v\n"
           "        self.W_Q = nn.Linear(d_model, d_k, bias=False)\n"
           "        self.W_K = nn.Linear(d_model, d_k, bias=False)\n"
           "        self.W_V = nn.Linear(d_model, d_v, bias=False)\n")


def sa(forward, init_extra=""):
    return SA_INIT + init_extra + "\n    def forward(self, x, mask=None):\n" + forward


T = [
    bug("SelfAttention", "Q and K swapped", sa(
        "        return scaled_dot_product_attention(self.W_K(x), self.W_Q(x), self.W_V(x), mask)\n"),
        mutant="queries and keys swapped"),
    bug("SelfAttention", "√d_model", sa(
        "        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])\n"
        "        if mask is not None:\n            scores = scores.masked_fill(~mask, float('-inf'))\n"
        "        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n        return w @ v, w\n"),
        mutant="scaled by √d_model"),
    bug("SelfAttention", "no value projection", sa(
        "        return scaled_dot_product_attention(self.W_Q(x), self.W_K(x), x, mask)\n"),
        mutant="no value projection"),
    bug("SelfAttention", "mask ignored", sa(
        "        return scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x))\n"),
        mutant="mask ignored"),
    bug("SelfAttention", "softmax over queries", sa(
        "        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "        if mask is not None:\n            scores = scores.masked_fill(~mask, float('-inf'))\n"
        "        w = torch.softmax(scores, dim=-2).nan_to_num(0.0)\n        return w @ v, w\n"),
        mutant="softmax over the queries"),
    bug("SelfAttention", "unguarded softmax (NaN rows)", sa(
        "        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "        if mask is not None:\n            scores = scores.masked_fill(~mask, float('-inf'))\n"
        "        w = torch.softmax(scores, dim=-1)\n        return w @ v, w\n"),
        expect="never NaN", kind="mask"),
    bug("SelfAttention", "output only", sa(
        "        return scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)[0]\n"),
        expect="Return (output, weights)", kind="type"),
    alt("SelfAttention", "causal-mask buffer (nanoGPT style)", sa(
        "        return scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)\n",
        "        self.register_buffer('scale', torch.tensor(d_k ** -0.5))\n"), kind="buffer"),
    alt("SelfAttention", "masked_softmax from the set-up", sa(
        "        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)\n"
        "        w = masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask)\n"
        "        return w @ v, w\n"), kind="namespace"),
    alt("SelfAttention", "stores sizes", sa(
        "        out, w = scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)\n"
        "        return out, w\n", "        self.d_k, self.d_v = d_k, d_v\n")),
]

# ----------------------------------------------------------------------------- 04.1 / 04.2
SH = "def split_heads(x, n_heads):\n    B, N, d_model = x.shape\n"
MH = "def merge_heads(x):\n    B, H, N, d_head = x.shape\n"
H = [
    bug("split_heads", "no transpose", SH + "    return x.view(B, n_heads, N, d_model // n_heads)\n",
        mutant="view without transpose"),
    bug("split_heads", "interleaved", SH +
        "    return x.view(B, N, d_model // n_heads, n_heads).permute(0, 3, 1, 2)\n",
        mutant="heads split along the wrong dimension"),
    bug("split_heads", "heads last", SH + "    return x.view(B, N, n_heads, d_model // n_heads)\n",
        mutant="heads last"),
    bug("split_heads", "transpose(1, 3)", SH +
        "    return x.view(B, N, n_heads, d_model // n_heads).transpose(1, 3)\n",
        mutant="transpose(1, 3)"),
    alt("split_heads", "reshape and permute", SH +
        "    return x.reshape(B, N, n_heads, -1).permute(0, 2, 1, 3)\n"),
    alt("split_heads", "stack of chunks", SH + "    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)\n"),
    alt("split_heads", "contiguous copy", SH +
        "    return x.view(B, N, n_heads, -1).transpose(1, 2).contiguous()\n", kind="layout"),
    bug("merge_heads", "no transpose", MH + "    return x.reshape(B, N, H * d_head)\n",
        mutant="reshape without transpose"),
    bug("merge_heads", "interleaved", MH + "    return x.permute(0, 2, 3, 1).reshape(B, N, d_head * H)\n",
        mutant="heads interleaved"),
    bug("merge_heads", "mean", MH + "    return x.mean(dim=1)\n", mutant="heads averaged"),
    bug("merge_heads", "view after transpose", MH + "    return x.transpose(1, 2).view(B, N, H * d_head)\n",
        expect="reshape", kind="layout"),
    alt("merge_heads", "permute", MH + "    return x.permute(0, 2, 1, 3).reshape(B, N, -1)\n"),
    alt("merge_heads", "cat of heads", MH + "    return torch.cat(x.unbind(dim=1), dim=-1)\n"),
    alt("merge_heads", "contiguous view", MH +
        "    return x.transpose(1, 2).contiguous().view(B, N, H * d_head)\n", kind="layout"),
]

# ----------------------------------------------------------------------------- 04.3 MHA
MHA_HEAD = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
{init}
    def forward(self, x_q, x_kv=None, attn_mask=None, key_mask=None, is_causal=False,
                need_weights=False):
        x_kv = x_q if x_kv is None else x_kv
        d, H = self.d_model, self.n_heads
        W, b = self.in_proj.weight, self.in_proj.bias
        q = split_heads(F.linear(x_q, W[:d], b[:d]), H)
        k = split_heads(F.linear(x_kv, W[d:2 * d], b[d:2 * d]), H)
        v = split_heads(F.linear(x_kv, W[2 * d:], b[2 * d:]), H)
'''
SCORES = "        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
MASKS = '''        n_q, n_k = scores.shape[-2:]
        allowed = torch.ones(n_q, n_k, dtype=torch.bool)
        if is_causal:
            allowed = allowed.tril(diagonal=n_k - n_q)
        if attn_mask is not None:
            allowed = allowed & attn_mask
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]
'''
TAIL = '''        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        weights = weights.nan_to_num(0.0)
        return self.out_proj(merge_heads(weights @ v)), weights
'''


def mha(scores=SCORES, masks=MASKS, tail=TAIL, init="", replace=()):
    source = MHA_HEAD.format(init=init) + scores + masks + tail
    for old, new in replace:
        assert old in source, old
        source = source.replace(old, new)
    return source


X = [
    bug("MultiHeadAttention", "no out_proj", mha(replace=[(
        "self.out_proj(merge_heads(weights @ v))", "merge_heads(weights @ v)")]),
        mutant="missing output projection"),
    bug("MultiHeadAttention", "√d_model", mha(replace=[("math.sqrt(q.shape[-1])", "math.sqrt(d)")]),
        mutant="scale by d_model"),
    bug("MultiHeadAttention", "one head", mha(replace=[("d, H = self.d_model, self.n_heads",
                                                        "d, H = self.d_model, 1")]),
        mutant="no head split"),
    bug("MultiHeadAttention", "softmax over queries", mha(replace=[("dim=-1)", "dim=-2)")]),
        mutant="softmax over queries"),
    bug("MultiHeadAttention", "key mask inverted", mha(replace=[(
        "allowed & key_mask[", "allowed & ~key_mask[")]), mutant="key padding mask inverted"),
    bug("MultiHeadAttention", "attn_mask inverted", mha(replace=[(
        "allowed & attn_mask", "allowed & ~attn_mask")]), mutant="attn_mask inverted"),
    bug("MultiHeadAttention", "causal ignored", mha(replace=[(
        "allowed = allowed.tril(diagonal=n_k - n_q)", "pass")]), mutant="causal mask missing"),
    bug("MultiHeadAttention", "causal triu", mha(replace=[(
        "allowed.tril(diagonal=n_k - n_q)", "allowed.triu()")]), mutant="causal mask transposed"),
    bug("MultiHeadAttention", "causal tril() without the offset", mha(replace=[(
        "allowed.tril(diagonal=n_k - n_q)", "allowed.tril()")]),
        mutant="causal mask aligned top-left"),
    bug("MultiHeadAttention", "NaN for a query with no allowed key", mha(replace=[(
        "        weights = weights.nan_to_num(0.0)\n", "")]), expect="never NaN", kind="mask"),
    bug("MultiHeadAttention", "x_kv ignored", mha(replace=[(
        "x_kv = x_q if x_kv is None else x_kv", "x_kv = x_q")]), mutant="x_kv ignored"),
    bug("MultiHeadAttention", "each mask replaces the previous one", mha(replace=[
        ("allowed = allowed & attn_mask", "allowed = attn_mask"),
        ("allowed = allowed & key_mask[:, None, None, :]", "allowed = key_mask[:, None, None, :]")]),
        mutant="each mask replaces the previous one", kind="mask"),
    bug("MultiHeadAttention", "2-D attn_mask only", mha(replace=[(
        "allowed & attn_mask", "allowed & attn_mask.reshape(n_q, n_k)")]),
        expect="(B, H, N_q, N_k)", kind="mask"),
    bug("MultiHeadAttention", ".view on split_heads' output", mha(replace=[(
        SCORES, "        B = q.shape[0]\n        qf = q.view(B * H, q.shape[2], -1)\n"
                "        kf = k.view(B * H, k.shape[2], -1)\n"
                "        scores = (qf @ kf.transpose(1, 2)).view(B, H, q.shape[2], k.shape[2])"
                " / math.sqrt(q.shape[-1])\n")]), expect="reshape", kind="layout"),
    bug("MultiHeadAttention", "key mask on the query axis", mha(replace=[(
        "key_mask[:, None, None, :]", "key_mask[:, None, :, None]")]),
        mutant="key mask on the query axis", kind="mask"),
    alt("MultiHeadAttention", "sdpa from the set-up", mha(masks=MASKS, tail=(
        "        out, weights = scaled_dot_product_attention(q, k, v, allowed)\n"
        "        return self.out_proj(merge_heads(out)), weights\n")), kind="namespace"),
    alt("MultiHeadAttention", "causal buffer (nanoGPT style)", mha(
        init="        self.register_buffer('bias', torch.ones(64, 64, dtype=torch.bool).tril()"
             ".view(1, 1, 64, 64))\n",
        replace=[("allowed = allowed.tril(diagonal=n_k - n_q)",
                  "allowed = allowed & self.bias[0, 0, n_k - n_q:n_k, :n_k]")]), kind="buffer"),
    alt("MultiHeadAttention", "reshape on split_heads' output", mha(replace=[(
        SCORES, "        B = q.shape[0]\n        qf = q.reshape(B * H, q.shape[2], -1)\n"
                "        kf = k.reshape(B * H, k.shape[2], -1)\n"
                "        scores = (qf @ kf.transpose(1, 2)).view(B, H, q.shape[2], k.shape[2])"
                " / math.sqrt(q.shape[-1])\n")]), kind="layout"),
    alt("MultiHeadAttention", "in-place scale on split_heads' view", mha(replace=[(
        SCORES, "        q.div_(math.sqrt(q.shape[-1]))\n        scores = q @ k.transpose(-2, -1)\n")]),
        kind="layout"),
    bug("MultiHeadAttention", "keys and values from one split (aliased)", mha(replace=[(
        "        v = split_heads(F.linear(x_kv, W[2 * d:], b[2 * d:]), H)\n", "        v = k\n")]),
        mutant="values are the keys", kind="alias"),
    alt("MultiHeadAttention", "namedtuple result", "from collections import namedtuple\n\n"
        "Result = namedtuple('Result', 'output weights')\n\n\n" + mha(replace=[(
            "return self.out_proj(merge_heads(weights @ v)), weights",
            "return Result(self.out_proj(merge_heads(weights @ v)), weights)")]), kind="type"),
    alt("MultiHeadAttention", "masks combined with logical_and", mha(masks=(
        "        n_q, n_k = scores.shape[-2:]\n"
        "        allowed = torch.ones_like(scores, dtype=torch.bool)\n"
        "        if is_causal:\n"
        "            allowed = allowed.logical_and(torch.ones(n_q, n_k, dtype=torch.bool)"
        ".tril(n_k - n_q))\n"
        "        if attn_mask is not None:\n            allowed = allowed.logical_and(attn_mask)\n"
        "        if key_mask is not None:\n"
        "            allowed = allowed.logical_and(key_mask.view(key_mask.shape[0], 1, 1, -1))\n"))),
]

VARIANTS = [*R, *L, *A, *S, *C, *D, *M, *T, *H, *X]
