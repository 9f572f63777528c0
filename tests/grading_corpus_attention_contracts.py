'''Plausible student code for the exercises of Chapters 1–4 (the RNN and LSTM cells, the additive
score, the masked softmax, the context vector, scaled dot-product attention, the causal mask, the
self-attention layer, split/merge heads and multi-head attention), aimed at the contracts' edges:
dtypes the text allows (float64 scores, states and attention maps), batches whose elements differ
in scale by orders of magnitude (a max or normalisation taken over the whole batch), the
hard-coded constants, clamps and thresholds students write, numerically careless formulas, wrong
axes, off-by-one offsets, in-place edits, and the NaN-through-``where`` trap of an additive mask.

Written from each exercise's text and docstring in ``solutions/`` before the suites' mutants and
cases were read; ``expect`` names the phrases a hint must hold to name the bug (see
``tests/grading_corpus.py`` for ``bug`` and ``alt``).
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug

# ----------------------------------------------------------------------------- 01.1 rnn_cell
RNN = "def rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):\n"
PRE = "x @ W_ih.T + b_ih + h @ W_hh.T + b_hh"
R = [
    bug("rnn_cell", "cast to float32", RNN + f"    return torch.tanh(({PRE}).float())\n",
        expect="dtype", kind="dtype"),
    bug("rnn_cell", "only W_hh not transposed", RNN +
        "    return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh + b_hh)\n", mutant="W_hh not transposed"),
    bug("rnn_cell", "tanh of each term", RNN +
        "    return torch.tanh(x @ W_ih.T + b_ih) + torch.tanh(h @ W_hh.T + b_hh)\n",
        mutant="tanh of each term"),
    bug("rnn_cell", "pre-activation clamped to [-5, 5]", RNN +
        f"    return torch.tanh(({PRE}).clamp(-5, 5))\n", expect=("clamp", "saturat"),
        kind="threshold"),
    bug("rnn_cell", "tanh from exp (overflows)", RNN +
        f"    a = {PRE}\n    e = torch.exp(2 * a)\n    return (e - 1) / (e + 1)\n",
        expect=("overflow", "large pre-activation"), kind="numerics"),
    bug("rnn_cell", "hidden state normalised by the batch max", RNN +
        f"    h_next = torch.tanh({PRE})\n    return h_next / h_next.abs().max()\n",
        expect=("normalis", "scale"), kind="scale"),
    alt("rnn_cell", "2·sigmoid(2a) − 1", RNN +
        f"    return 2 * torch.sigmoid(2 * ({PRE})) - 1\n"),
    alt("rnn_cell", "column layout, transposed back", RNN +
        "    return torch.tanh((W_ih @ x.T + W_hh @ h.T).T + (b_ih + b_hh))\n"),
    alt("rnn_cell", "torch.rnn_tanh_cell", RNN +
        "    return torch.rnn_tanh_cell(x, h, W_ih, W_hh, b_ih, b_hh)\n"),
]

# ----------------------------------------------------------------------------- 01.2 lstm_cell
LSTM = "def lstm_cell(x, state, W_ih, W_hh, b_ih, b_hh):\n    h, c = state\n"
GATES = "    i, f, g, o = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1)\n"


def lstm(c_next="torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)",
         h_next="torch.sigmoid(o) * torch.tanh(c_next)", gates=GATES, ret="h_next, c_next"):
    return (LSTM + gates + f"    c_next = {c_next}\n    h_next = {h_next}\n    return {ret}\n")


L = [
    bug("lstm_cell", "forget bias +1 (TensorFlow's forget_bias)", lstm(
        c_next="torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(g)"),
        mutant="forget gate bias +1"),
    bug("lstm_cell", "candidate without tanh", lstm(
        c_next="torch.sigmoid(f) * c + torch.sigmoid(i) * g"), mutant="candidate without tanh"),
    bug("lstm_cell", "h' from the old cell", lstm(h_next="torch.sigmoid(o) * torch.tanh(c)"),
        mutant="h' from the old cell state"),
    bug("lstm_cell", "gates interleaved (B, d_h, 4)", lstm(gates=(
        "    a = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh\n"
        "    i, f, g, o = a.view(a.shape[0], -1, 4).unbind(-1)\n")),
        mutant="gates interleaved"),
    bug("lstm_cell", "cast to float32", lstm(gates=(
        "    a = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).float()\n"
        "    i, f, g, o = a.chunk(4, dim=-1)\n")), expect="dtype", kind="dtype"),
    bug("lstm_cell", "tanh from exp (overflows)", LSTM +
        "    th = lambda a: (torch.exp(2 * a) - 1) / (torch.exp(2 * a) + 1)\n" + GATES +
        "    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * th(g)\n"
        "    return torch.sigmoid(o) * th(c_next), c_next\n",
        expect=("overflow", "large pre-activation"), kind="numerics"),
    bug("lstm_cell", "c.mul_(f) on the caller's cell", LSTM + GATES +
        "    c_next = c.mul_(torch.sigmoid(f)) + torch.sigmoid(i) * torch.tanh(g)\n"
        "    return torch.sigmoid(o) * torch.tanh(c_next), c_next\n", expect=INPLACE,
        kind="in-place"),
    alt("lstm_cell", "torch.lstm_cell", LSTM +
        "    return tuple(torch.lstm_cell(x, (h, c), W_ih, W_hh, b_ih, b_hh))\n"),
    alt("lstm_cell", "sigmoid by hand", LSTM +
        "    sig = lambda a: 1 / (1 + torch.exp(-a))\n" + GATES +
        "    c_next = sig(f) * c + sig(i) * torch.tanh(g)\n"
        "    return sig(o) * torch.tanh(c_next), c_next\n"),
    alt("lstm_cell", "slices by d_h", LSTM +
        "    H = h.shape[1]\n    a = F.linear(x, W_ih, b_ih) + F.linear(h, W_hh, b_hh)\n"
        "    i, f = torch.sigmoid(a[:, :H]), torch.sigmoid(a[:, H:2 * H])\n"
        "    g, o = torch.tanh(a[:, 2 * H:3 * H]), torch.sigmoid(a[:, 3 * H:])\n"
        "    c2 = f * c + i * g\n    return o * torch.tanh(c2), c2\n"),
]

# ----------------------------------------------------------------------------- 02.1 additive_score
SCORE = "def additive_score(s, h, W, U, v):\n"
A = [
    bug("additive_score", "tanh of each side", SCORE +
        "    return (torch.tanh(s @ W.T)[:, None, :] + torch.tanh(h @ U.T)) @ v\n",
        mutant="tanh on each term"),
    bug("additive_score", "v before the tanh", SCORE +
        "    return torch.tanh(((s @ W.T)[:, None, :] + h @ U.T) @ v)\n",
        mutant="v inside the tanh"),
    bug("additive_score", "scaled by √d_a", SCORE +
        "    return torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v / math.sqrt(W.shape[0])\n",
        expect="no scale factor"),
    bug("additive_score", "scores shifted by their row max", SCORE +
        "    e = torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v\n"
        "    return e - e.amax(dim=-1, keepdim=True)\n", expect="stability trick"),
    bug("additive_score", "scores shifted by the batch max", SCORE +
        "    e = torch.tanh((s @ W.T)[:, None, :] + h @ U.T) @ v\n    return e - e.max()\n",
        expect="stability trick", kind="scale"),
    bug("additive_score", "cast to float32", SCORE +
        "    return torch.tanh((s.float() @ W.float().T)[:, None, :] + h.float() @ U.float().T)"
        " @ v.float()\n", expect="dtype", kind="dtype"),
    alt("additive_score", "matmul with v as a column", SCORE +
        "    hidden = torch.tanh(W @ s.unsqueeze(-1) + (h @ U.T).transpose(1, 2))\n"
        "    return (v @ hidden)\n"),
    alt("additive_score", "precomputed keys, loop over positions", SCORE +
        "    keys, query = h @ U.T, s @ W.T\n"
        "    return torch.stack([torch.tanh(query + keys[:, j]) @ v for j in range(h.shape[1])], 1)\n"),
]

# ----------------------------------------------------------------------------- 02.2 masked_softmax
SM = "def masked_softmax(scores, mask=None):\n"
SM_NONE = "    if mask is None:\n        return torch.softmax(scores, dim=-1)\n"
S = [
    bug("masked_softmax", "additive -inf mask, where guard on the output (NaN gradients)", SM +
        SM_NONE +
        "    bias = torch.zeros_like(scores).masked_fill(~mask, float('-inf'))\n"
        "    w = torch.softmax(scores + bias, dim=-1)\n"
        "    return torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))\n",
        expect="NaN-through-where", kind="gradient"),
    bug("masked_softmax", "softmax over axis 1", SM +
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return torch.softmax(scores, dim=1).nan_to_num(0.0)\n",
        expect="sum to 1 along axis 1", kind="axis"),
    bug("masked_softmax", "cast to float32", SM + "    scores = scores.float()\n" + SM_NONE +
        "    return torch.softmax(scores.masked_fill(~mask, float('-inf')), -1).nan_to_num(0.0)\n",
        expect="dtype", kind="dtype"),
    bug("masked_softmax", "by hand, max over the whole batch", SM +
        "    if mask is None:\n        mask = torch.ones_like(scores, dtype=torch.bool)\n"
        "    e = torch.exp(scores - scores.max()) * mask\n"
        "    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)\n",
        expect="whole batch", kind="scale"),
    bug("masked_softmax", "by hand, max over masked positions too", SM +
        "    if mask is None:\n        return torch.softmax(scores, dim=-1)\n"
        "    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask\n"
        "    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-12)\n",
        expect=("includes masked scores", "includes the masked scores"), kind="numerics"),
    bug("masked_softmax", "fill just below the batch's smallest score", SM + SM_NONE +
        "    fill = scores.min() - 1.0\n"
        "    w = torch.softmax(scores.masked_fill(~mask, fill), dim=-1)\n"
        "    return w * mask.any(dim=-1, keepdim=True)\n", expect="below any finite fill",
        kind="fill"),
    bug("masked_softmax", "mask multiplies the scores", SM + SM_NONE +
        "    w = torch.softmax(scores * mask, dim=-1)\n"
        "    return w * mask.any(dim=-1, keepdim=True)\n",
        expect="multiplying them by the mask", kind="mask"),
    alt("masked_softmax", "log-sum-exp", SM +
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    w = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))\n"
        "    return torch.nan_to_num(w, nan=0.0)\n"),
    alt("masked_softmax", "double where (safe scores, then zeroed rows)", SM + SM_NONE +
        "    mask = mask.expand_as(scores)\n    keep = mask.any(dim=-1, keepdim=True)\n"
        "    s = torch.where(mask, scores, torch.full_like(scores, float('-inf')))\n"
        "    s = torch.where(keep, s, torch.zeros_like(s))\n"
        "    w = torch.softmax(s, dim=-1)\n    return torch.where(keep, w, torch.zeros_like(w))\n"),
    alt("masked_softmax", "finfo of the scores' dtype, rows zeroed by masked_fill", SM + SM_NONE +
        "    low = torch.finfo(scores.dtype).min\n"
        "    w = F.softmax(scores.masked_fill(~mask, low), dim=-1)\n"
        "    return w.masked_fill(~mask, 0.0)\n"),
]

# ----------------------------------------------------------------------------- 02.3 context_vector
CTX = "def context_vector(weights, h):\n"
C = [
    bug("context_vector", "weights renormalised", CTX +
        "    weights = weights / weights.sum(dim=-1, keepdim=True)\n"
        "    return torch.einsum('bn,bnd->bd', weights, h)\n", expect="Renormalising"),
    bug("context_vector", "softmax applied again", CTX +
        "    return torch.einsum('bn,bnd->bd', torch.softmax(weights, dim=-1), h)\n",
        mutant="softmax applied to the weights"),
    bug("context_vector", "float32 accumulator", CTX +
        "    c = torch.zeros(h.shape[0], h.shape[2])\n"
        "    for j in range(h.shape[1]):\n        c += weights[:, j, None] * h[:, j]\n"
        "    return c\n", expect="dtype", kind="dtype"),
    bug("context_vector", "unsqueeze_ on the caller's weights", CTX +
        "    weights.unsqueeze_(-1)\n    return (weights * h).sum(dim=1)\n", expect=INPLACE,
        kind="in-place"),
    bug("context_vector", "divided by the batch's total weight", CTX +
        "    return (weights[:, :, None] * h).sum(dim=1) / weights.sum()\n",
        expect="Renormalising", kind="scale"),
    alt("context_vector", "loop with zeros_like accumulator", CTX +
        "    c = torch.zeros_like(h[:, 0])\n"
        "    for j in range(h.shape[1]):\n        c = c + weights[:, j:j + 1] * h[:, j]\n"
        "    return c\n"),
    alt("context_vector", "h transposed times a column", CTX +
        "    return (h.transpose(1, 2) @ weights.unsqueeze(-1)).squeeze(-1)\n"),
    alt("context_vector", "matmul, index the middle axis", CTX +
        "    return torch.matmul(weights.unsqueeze(-2), h)[:, 0]\n"),
]

# ----------------------------------------------------------------------------- 03.1 sdpa
SDPA = "def scaled_dot_product_attention(q, k, v, mask=None):\n"


def sdpa(scale="math.sqrt(q.shape[-1])", fill="float('-inf')", dim="-1", guard=".nan_to_num(0.0)",
         scores="q @ k.transpose(-2, -1)", softmax="torch.softmax(scores, dim={dim})"):
    return (SDPA + f"    scores = {scores} / {scale}\n    if mask is not None:\n"
            f"        scores = scores.masked_fill(~mask, {fill})\n"
            f"    weights = {softmax.format(dim=dim)}{guard}\n    return weights @ v, weights\n")


D = [
    bug("scaled_dot_product_attention", "softmax over axis 1", sdpa(dim="1"),
        expect="sum to 1 along axis 1", kind="axis"),
    bug("scaled_dot_product_attention", "scale hard-coded for d_k = 64", sdpa(scale="8"),
        mutant="scale fixed at √64", kind="constant"),
    bug("scaled_dot_product_attention", "softmax in float32 (dtype=torch.float32)", sdpa(
        softmax="torch.softmax(scores, dim={dim}, dtype=torch.float32)"),
        expect="dtype", kind="dtype"),
    bug("scaled_dot_product_attention", "by hand, max over the whole batch", SDPA +
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    e = torch.exp(scores - scores.max())\n"
        "    weights = (e / e.sum(dim=-1, keepdim=True)).nan_to_num(0.0)\n"
        "    return weights @ v, weights\n", expect="whole batch", kind="scale"),
    bug("scaled_dot_product_attention", "mask multiplies the scores", SDPA +
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n        scores = scores * mask\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    if mask is not None:\n        weights = weights * mask.any(dim=-1, keepdim=True)\n"
        "    return weights @ v, weights\n", expect="multiplying them by the mask", kind="mask"),
    bug("scaled_dot_product_attention", "permute(0, 2, 1): three axes only", sdpa(
        scores="q @ k.permute(0, 2, 1)"), mutant="three axes only", kind="axis"),
    bug("scaled_dot_product_attention", "bmm: three axes only", sdpa(
        scores="torch.bmm(q, k.transpose(1, 2))"), mutant="three axes only", kind="axis"),
    # the docstring promises finite gradients for a query with no allowed key
    bug("scaled_dot_product_attention", "additive -inf mask, where guard on the output", SDPA +
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "    if mask is not None:\n"
        "        scores = scores + torch.zeros_like(scores).masked_fill(~mask, float('-inf'))\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    if mask is not None:\n"
        "        weights = torch.where(mask.any(dim=-1, keepdim=True), weights,"
        " torch.zeros_like(weights))\n"
        "    return weights @ v, weights\n", expect="NaN-through-where", kind="gradient"),
    alt("scaled_dot_product_attention", "einsum, d_k^-1/4 on each side", SDPA +
        "    d = k.size(-1)\n"
        "    scores = torch.einsum('...qd,...kd->...qk', q * d ** -0.25, k * d ** -0.25)\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    weights = scores.softmax(dim=-1).nan_to_num(0.0)\n"
        "    return torch.einsum('...qk,...kd->...qd', weights, v), weights\n"),
    alt("scaled_dot_product_attention", "finfo of the scores' dtype, rows zeroed", SDPA +
        "    scores = q @ k.mT / math.sqrt(k.shape[-1])\n"
        "    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)\n"
        "    weights = torch.softmax(scores, dim=-1)\n"
        "    if mask is not None:\n        weights = weights * mask.any(dim=-1, keepdim=True)\n"
        "    return weights @ v, weights\n", kind="fill"),
]

# ----------------------------------------------------------------------------- 03.2 causal_mask
CM = "def causal_mask(n_q, n_k=None):\n    n_k = n_q if n_k is None else n_k\n"
M = [
    bug("causal_mask", "offset sign flipped", CM +
        "    return torch.ones(n_q, n_k, dtype=torch.bool).tril(diagonal=n_q - n_k)\n",
        expect=("N_k − N_q", "n_k - n_q", "last N_q", "sign")),
    bug("causal_mask", "uint8 mask", CM +
        "    return torch.ones(n_q, n_k, dtype=torch.uint8).tril(diagonal=n_k - n_q)\n",
        expect=("bool", "dtype"), kind="dtype"),
    bug("causal_mask", "additive 0/-inf float mask", CM +
        "    return torch.full((n_q, n_k), float('-inf')).triu(diagonal=n_k - n_q + 1)\n",
        expect=("bool", "additive"), kind="dtype"),
    bug("causal_mask", "first N_q rows of the square mask", CM +
        "    return torch.ones(n_k, n_k, dtype=torch.bool).tril()[:n_q]\n",
        mutant="top-left alignment"),
    bug("causal_mask", "nested lists", CM +
        "    return [[j <= i + n_k - n_q for j in range(n_k)] for i in range(n_q)]\n",
        expect="expected a torch.Tensor", kind="type"),
    alt("causal_mask", "last N_q rows of the square mask", CM +
        "    return torch.ones(n_k, n_k, dtype=torch.bool).tril()[n_k - n_q:]\n"),
    alt("causal_mask", "triu == 0", CM +
        "    return torch.triu(torch.ones(n_q, n_k), diagonal=n_k - n_q + 1) == 0\n"),
    alt("causal_mask", "loop", CM +
        "    m = torch.zeros(n_q, n_k, dtype=torch.bool)\n"
        "    for i in range(n_q):\n        m[i, :i + n_k - n_q + 1] = True\n    return m\n"),
]

# ----------------------------------------------------------------------------- 03.3 SelfAttention
SA = ("class SelfAttention(nn.Module):\n    def __init__(self, d_model, d_k=None, d_v=None):\n"
      "        super().__init__()\n        d_k = d_model if d_k is None else d_k\n"
      "        d_v = d_k if d_v is None else d_v\n")
LIN = ("        self.W_Q = nn.Linear(d_model, d_k, bias=False)\n"
       "        self.W_K = nn.Linear(d_model, d_k, bias=False)\n"
       "        self.W_V = nn.Linear(d_model, d_v, bias=False)\n")
FWD = "\n    def forward(self, x, mask=None):\n"
CALL = "        return scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)\n"


def sa(forward=CALL, lin=LIN):
    return SA + lin + FWD + forward


T = [
    bug("SelfAttention", "projections with bias", sa(lin=LIN.replace(", bias=False", "")),
        expect="bias"),
    bug("SelfAttention", "W_V sized d_k", sa(lin=LIN.replace("(d_model, d_v,", "(d_model, d_k,")),
        expect="W_V.weight"),
    bug("SelfAttention", "weight used untransposed", sa(
        "        q, k, v = x @ self.W_Q.weight, x @ self.W_K.weight, x @ self.W_V.weight\n"
        "        return scaled_dot_product_attention(q, k, v, mask)\n"),
        mutant="weights used untransposed"),
    bug("SelfAttention", "mask inverted", sa(CALL.replace(", mask)", ", ~mask if mask is not None"
                                                          " else None)")), mutant="mask inverted"),
    bug("SelfAttention", "returns (weights, output)", sa(
        "        out, w = scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)\n"
        "        return w, out\n"), mutant="returns (weights, output)", kind="type"),
    bug("SelfAttention", "causal by default", sa(
        "        if mask is None:\n"
        "            n = x.shape[1]\n"
        "            mask = torch.ones(n, n, dtype=torch.bool).tril()\n" + CALL),
        mutant="causal mask by default", kind="mask"),
    bug("SelfAttention", "scaled by √d_v", sa(
        "        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)\n"
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1])\n"
        "        if mask is not None:\n            scores = scores.masked_fill(~mask, float('-inf'))\n"
        "        w = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n        return w @ v, w\n"),
        mutant="scaled by √d_v"),
    alt("SelfAttention", "F.linear on the weights", sa(
        "        q = F.linear(x, self.W_Q.weight)\n        k = F.linear(x, self.W_K.weight)\n"
        "        v = F.linear(x, self.W_V.weight)\n"
        "        return scaled_dot_product_attention(q, k, v, mask=mask)\n")),
    alt("SelfAttention", "scale kept from __init__, softmax inline", sa(
        "        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)\n"
        "        scores = torch.einsum('bqd,bkd->bqk', q, k) * self.scale\n"
        "        if mask is not None:\n"
        "            scores = torch.where(mask, scores, float('-inf'))\n"
        "        w = torch.softmax(scores, dim=-1)\n"
        "        w = torch.where(torch.isnan(w), 0.0, w)\n        return w @ v, w\n",
        lin=LIN + "        self.scale = 1.0 / math.sqrt(d_k)\n")),
]

# ----------------------------------------------------------------------------- 04.1 / 04.2
SH = "def split_heads(x, n_heads):\n    B, N, d_model = x.shape\n"
MH = "def merge_heads(x):\n    B, H, N, d_head = x.shape\n"
H = [
    bug("split_heads", "tokens last in each head", SH +
        "    return x.view(B, N, n_heads, -1).permute(0, 2, 3, 1)\n",
        expect="last two axes swapped"),
    bug("split_heads", "chunks of tokens", SH +
        "    return torch.stack(x.chunk(n_heads, dim=1), dim=1)\n", mutant="tokens split into heads"),
    bug("split_heads", "d_head hard-coded to 64", SH +
        "    return x.view(B, N, n_heads, 64).transpose(1, 2)\n",
        mutant="d_head fixed at 64", kind="constant"),
    bug("split_heads", "(B·H, N, d_head) as inside nn.MultiheadAttention", SH +
        "    return x.transpose(0, 1).reshape(N, B * n_heads, -1).transpose(0, 1)\n",
        mutant="(B·H, N, d_head) as inside nn.MultiheadAttention"),
    alt("split_heads", "unflatten and swapaxes", SH +
        "    return x.unflatten(-1, (n_heads, -1)).swapaxes(1, 2)\n"),
    alt("split_heads", "stack of feature slices", SH +
        "    dh = d_model // n_heads\n"
        "    return torch.stack([x[..., j * dh:(j + 1) * dh] for j in range(n_heads)], dim=1)\n"),
    bug("merge_heads", "heads concatenated along tokens", MH +
        "    return torch.cat(x.unbind(dim=1), dim=1)\n",
        mutant="heads concatenated along the tokens"),
    bug("merge_heads", "heads summed", MH + "    return x.sum(dim=1)\n",
        mutant="heads summed"),
    bug("merge_heads", "transpose(2, 3)", MH + "    return x.transpose(2, 3).reshape(B, N, -1)\n",
        mutant="transpose(2, 3)"),
    bug("merge_heads", "flatten(2) without the transpose", MH + "    return x.flatten(2)\n",
        mutant="each head flattened"),
    alt("merge_heads", "transpose and flatten", MH + "    return x.transpose(1, 2).flatten(2)\n"),
    alt("merge_heads", "cat of head slices", MH +
        "    return torch.cat([x[:, j] for j in range(H)], dim=-1)\n"),
]

# ----------------------------------------------------------------------------- 04.3 MHA
MHA = '''class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x_q, x_kv=None, attn_mask=None, key_mask=None, is_causal=False,
                need_weights=False):
        x_kv = x_q if x_kv is None else x_kv
        d, H = self.d_model, self.n_heads
        W, b = self.in_proj.weight, self.in_proj.bias
        q = split_heads(F.linear(x_q, W[:d], b[:d]), H)
        k = split_heads(F.linear(x_kv, W[d:2 * d], b[d:2 * d]), H)
        v = split_heads(F.linear(x_kv, W[2 * d:], b[2 * d:]), H)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        n_q, n_k = scores.shape[-2:]
        allowed = torch.ones(n_q, n_k, dtype=torch.bool)
        if is_causal:
            allowed = allowed.tril(diagonal=n_k - n_q)
        if attn_mask is not None:
            allowed = allowed & attn_mask
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        weights = weights.nan_to_num(0.0)
        return self.out_proj(merge_heads(weights @ v)), weights
'''


def mha(*replace):
    source = MHA
    for old, new in replace:
        assert old in source, old
        source = source.replace(old, new)
    return source


RETURN = "        return self.out_proj(merge_heads(weights @ v)), weights\n"
X = [
    bug("MultiHeadAttention", "weights averaged over heads", mha((
        RETURN, "        return self.out_proj(merge_heads(weights @ v)), weights.mean(dim=1)\n")),
        expect="one map per head"),
    bug("MultiHeadAttention", "key mask without a head axis", mha((
        "key_mask[:, None, None, :]", "key_mask[:, None, :]")),
        mutant="key mask without the head axis"),
    bug("MultiHeadAttention", "queries projected from x_kv", mha((
        "split_heads(F.linear(x_q, W[:d]", "split_heads(F.linear(x_kv, W[:d]")),
        mutant="queries from x_kv"),
    bug("MultiHeadAttention", "in_proj bias dropped", mha(
        ("F.linear(x_q, W[:d], b[:d])", "F.linear(x_q, W[:d])"),
        ("F.linear(x_kv, W[d:2 * d], b[d:2 * d])", "F.linear(x_kv, W[d:2 * d])"),
        ("F.linear(x_kv, W[2 * d:], b[2 * d:])", "F.linear(x_kv, W[2 * d:])")),
        mutant="in_proj bias dropped"),
    bug("MultiHeadAttention", "K and V slices swapped", mha(
        ("F.linear(x_kv, W[d:2 * d], b[d:2 * d])", "F.linear(x_kv, W[2 * d:], b[2 * d:])"),
        ("v = split_heads(F.linear(x_kv, W[2 * d:], b[2 * d:]), H)",
         "v = split_heads(F.linear(x_kv, W[d:2 * d], b[d:2 * d]), H)")),
        mutant="K and V rows swapped"),
    bug("MultiHeadAttention", "masks combined with or", mha(
        ("allowed = allowed & attn_mask", "allowed = allowed | attn_mask"),
        ("allowed = allowed & key_mask", "allowed = allowed | key_mask")),
        mutant="masks combined with |"),
    bug("MultiHeadAttention", "bool attn_mask added to the scores", mha(
        ("        if attn_mask is not None:\n            allowed = allowed & attn_mask\n", ""),
        ("scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n",
         "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
         "        if attn_mask is not None:\n            scores = scores + attn_mask.float()\n")),
        mutant="boolean attn_mask added to the scores", kind="mask"),
    # need_weights is nn.MultiheadAttention's flag: weights only when asked, as coursekit's own
    alt("MultiHeadAttention", "weights only when need_weights", mha((
        RETURN, "        out = self.out_proj(merge_heads(weights @ v))\n"
                "        return out, (weights if need_weights else None)\n")), kind="type"),
    alt("MultiHeadAttention", "fused projection for self-attention", mha((
        "        q = split_heads(F.linear(x_q, W[:d], b[:d]), H)\n"
        "        k = split_heads(F.linear(x_kv, W[d:2 * d], b[d:2 * d]), H)\n"
        "        v = split_heads(F.linear(x_kv, W[2 * d:], b[2 * d:]), H)\n",
        "        if x_kv is x_q:\n"
        "            q, k, v = (split_heads(t, H) for t in F.linear(x_q, W, b).chunk(3, dim=-1))\n"
        "        else:\n"
        "            q = split_heads(F.linear(x_q, W[:d], b[:d]), H)\n"
        "            k, v = (split_heads(t, H) for t in F.linear(x_kv, W[d:], b[d:]).chunk(2, -1))\n"
        ))),
    alt("MultiHeadAttention", "masked_fill after the softmax zeroes empty rows", mha((
        "        weights = weights.nan_to_num(0.0)\n",
        "        weights = weights.masked_fill(~allowed, 0.0)\n"))),
    # the docstring promises finite gradients for a query with no allowed key
    bug("MultiHeadAttention", "causal_mask from the set-up, additive bias", mha(
        ("allowed = allowed.tril(diagonal=n_k - n_q)", "allowed = causal_mask(n_q, n_k)"),
        ("        weights = torch.softmax(scores.masked_fill(~allowed, float(\"-inf\")), dim=-1)\n",
         "        bias = torch.zeros_like(scores).masked_fill(~allowed, float('-inf'))\n"
         "        weights = torch.softmax(scores + bias, dim=-1)\n")),
        expect="NaN-through-where", kind="gradient"),
]

VARIANTS = [*R, *L, *A, *S, *C, *D, *M, *T, *H, *X]
