"""Chapter 3 — self-attention: ``scaled_dot_product_attention``, ``causal_mask`` and
``SelfAttention``, graded against ``F.scaled_dot_product_attention``.

The references never use coursekit's own attention: the output comes from PyTorch's fused
``F.scaled_dot_product_attention``, and so do the weights, by attending to the identity matrix
(with V = I the output *is* the weight matrix).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from coursekit import attention
from coursekit.grading.suite import (
    Case,
    Mutant,
    Suite,
    backward,
    in_dtype,
    load_parameters,
    scaled_batch,
)
from coursekit.grading.suites.attention_readings import (
    DTYPE_READING,
    NAN_GRADIENT_READING,
    dtype_observation,
    first_of,
    nan_gradient_observation,
    weights_observation,
    weights_readings,
)

NEG_INF = float("-inf")


def torch_attention(q, k, v, mask=None):
    """(output, weights) from ``F.scaled_dot_product_attention`` alone."""
    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-2], -1, -1)
    output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
    return output, weights


# ----------------------------------------------------------------------------- 03.1 cases


def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


def _one_query(g):
    return _randn(g, 1, 2), _randn(g, 3, 2), _randn(g, 3, 2)


def _rectangular(g):
    return _randn(g, 2, 3, 4), _randn(g, 2, 5, 4), _randn(g, 2, 5, 6)


def _heads(g):
    return _randn(g, 2, 3, 6, 64), _randn(g, 2, 3, 6, 64), _randn(g, 2, 3, 6, 8)


def _padding(g):
    q, k, v = _randn(g, 3, 4, 8), _randn(g, 3, 6, 8), _randn(g, 3, 6, 5)
    lengths = torch.tensor([6, 4, 1])
    return q, k, v, attention.padding_mask(lengths, 6)[:, None, :]  # (B, 1, N_k)


def _causal(g):
    q, k, v = _randn(g, 2, 5, 16), _randn(g, 2, 5, 16), _randn(g, 2, 5, 3)
    return q, k, v, torch.ones(5, 5, dtype=torch.bool).tril()


def _scores_near_minus_1e6(g):
    """Allowed scores are exactly -1e6 - s with small integers s: a -1e6 fill is *not* small here.

    Integers, d = 16 (so 1/√d = 1/4 and its square root 1/2 are exact): every score is computed
    exactly, whatever the order of the sums.
    """
    n_q, n_k, d = 3, 5, 16
    q = torch.zeros(1, n_q, d)
    q[..., 0], q[..., 1] = 4000.0, 4.0
    k = torch.zeros(1, n_k, d)
    k[..., 0] = -1000.0
    k[..., 1] = -torch.randint(0, 4, (1, n_k), generator=g).float()
    v = _randn(g, 1, n_k, 4)
    mask = torch.rand(1, n_q, n_k, generator=g) < 0.5
    mask[..., 0] = True  # every row keeps at least one key
    return q, k, v, mask


def _fully_masked_row(g):
    q, k, v = _randn(g, 2, 3, 4), _randn(g, 2, 4, 4), _randn(g, 2, 4, 2)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of sequence 0 may see nothing
    mask[1, :, 2:] = False
    return q, k, v, mask


def _scores_near_minus_4e9(g):
    """Allowed scores are all exactly -2³² ≈ -4.3·10⁹ (powers of two: no rounding), far below a
    -1e9 fill; the masked keys must still get no weight."""
    n_q, n_k, d = 3, 5, 16
    q = torch.zeros(2, n_q, d)
    q[..., 0] = 2.0 ** 17
    k = torch.zeros(2, n_k, d)
    k[..., 0] = -(2.0 ** 17)
    v = _randn(g, 2, n_k, 3)
    mask = torch.rand(2, n_q, n_k, generator=g) < 0.5
    mask[..., 0] = True
    return q, k, v, mask


def _four_d_mask(g):
    q, k, v = _randn(g, 2, 3, 4, 8), _randn(g, 2, 3, 5, 8), _randn(g, 2, 3, 5, 6)
    mask = torch.rand(2, 3, 4, 5, generator=g) < 0.6
    mask[..., 2] = True
    return q, k, v, mask


def _large_scores(g):
    """Integer q, k (exact scores) of size ±300: exp overflows float32 without the max trick."""
    q = torch.randint(-30, 31, (2, 4, 16), generator=g).float()
    k = torch.randint(-30, 31, (2, 6, 16), generator=g).float()
    return q, k, _randn(g, 2, 6, 3)


# ----------------------------------------------------------------------------- 03.1 mutants


def _sdpa(scale=lambda q, v: math.sqrt(q.shape[-1]), dim=-1, fill=NEG_INF, after=False,
          inverted=False, guard=True, stable=True, mask_3d=False):
    """A family of scaled_dot_product_attention variants; the defaults give the right answer."""

    def softmax(scores):
        if stable:
            return torch.softmax(scores, dim=dim)
        e = torch.exp(scores)
        return e / e.sum(dim=dim, keepdim=True)

    def sdpa(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / scale(q, v)
        if mask is not None and inverted:
            mask = ~mask
        if mask is not None and mask_3d:  # the mask forced to (B, N_q, N_k)
            mask = mask.view(-1, *scores.shape[-2:]).expand(scores.shape[0], -1, -1)
        if mask is None:
            weights = softmax(scores)
        elif after:
            weights = softmax(scores) * mask
        else:
            scores = scores.masked_fill(~mask, fill)
            weights = softmax(scores)
            if guard:
                weights = weights.nan_to_num(0.0)
        return weights @ v, weights

    return sdpa


def _three_axes_only(q, k, v, mask=None):
    """Right on (B, N, d) inputs, an error on any other number of axes (bmm, permute(0, 2, 1))."""
    if q.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    return _sdpa()(q, k, v, mask)


def _axes_of_weights(ndim: int) -> dict[int, str]:
    """The axes of (..., N_q, N_k) weights other than the keys."""
    named = {2: ["the queries"], 3: ["the batch", "the queries"],
             4: ["the batch", "the heads", "the queries"]}.get(ndim, [])
    return dict(enumerate(named))


SDPA_CASES = [
    Case("one query over three keys (d=2)", _one_query),
    Case("N_q=3 ≠ N_k=5, d_k=4 ≠ d_v=6", _rectangular, 2,
         hint="The weights are (N_q, N_k): softmax over the keys, the last axis of QKᵀ; the output "
              "is weights @ V, of shape (N_q, d_v)."),
    Case("(B, H, N, d) with d_k=64", _heads, 2,
         hint="Transpose only the last two axes of K (k.transpose(-2, -1)), and divide by √d_k."),
    Case("padding mask (B, 1, N_k)", _padding, 2,
         hint="The mask is True where attention is allowed and broadcasts over the queries."),
    Case("causal mask (N, N)", _causal,
         hint="Fill the masked scores with -inf before the softmax."),
    Case("scores of size ±300", _large_scores, 1,
         hint="exp(300) overflows float32: use torch.softmax (it subtracts the row maximum)."),
    Case("allowed scores near -1e6", _scores_near_minus_1e6, 2,
         hint="Masked scores must be -inf: any finite fill can be larger than a real score.",
         grad=False),
    Case("allowed scores near -4·10⁹", _scores_near_minus_4e9, 1,
         hint="Masked scores must be -inf: real scores can be below any finite fill, -1e9 "
              "included.", grad=False),
    Case("mask (B, H, N_q, N_k)", _four_d_mask, 1,
         hint="The mask can have every leading axis of the scores, (B, H, N_q, N_k): apply it "
              "elementwise (masked_fill broadcasts), whatever its number of dimensions."),
    Case("a query with every key masked", _fully_masked_row, 1,
         hint="A row where every key is masked gets all-zero weights and a zero output, as in "
              "F.scaled_dot_product_attention, never NaN."),
]
SDPA_CASES += [
    in_dtype(SDPA_CASES[3], torch.float64),  # float64 attention maps, with a padding mask
    # the two examples' scores are ±300 and ±5 (q times 2⁻⁶, exact): a maximum taken over the
    # whole batch underflows the second example's exp to 0
    scaled_batch(SDPA_CASES[5], 0, (1.0, 2.0 ** -6)),
]

# ----------------------------------------------------------------------------- 03.2 causal mask


def torch_causal_mask(n_q, n_k=None):
    """Read the mask off F.scaled_dot_product_attention's own causal bias: with q = k = 0 every
    allowed key gets a positive weight. Lower-right alignment: the queries are the last N_q."""
    # imported here: torch.nn.attention.bias loads torch._dynamo (1.0 s with bytecode, 3.4 s
    # without), which every check() of every chapter would otherwise pay when the registry
    # imports this module
    from torch.nn.attention.bias import causal_lower_right

    n_k = n_q if n_k is None else n_k
    q, k = torch.zeros(1, 1, n_q, 1), torch.zeros(1, 1, n_k, 1)
    eye = torch.eye(n_k)[None, None]
    weights = F.scaled_dot_product_attention(q, k, eye, attn_mask=causal_lower_right(n_q, n_k))
    return weights[0, 0] > 0


def _mask_case(*sizes):
    return lambda g: sizes


def _triu(n_q, n_k=None):
    n_k = n_q if n_k is None else n_k
    return torch.ones(n_q, n_k, dtype=torch.bool).triu(n_k - n_q)


def _tril(diagonal=0, transpose=False, invert=False, offset=True, dtype=torch.bool):
    def causal_mask(n_q, n_k=None):
        n_k = n_q if n_k is None else n_k
        shift = (n_k - n_q if offset else 0) + diagonal
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(shift)
        if transpose:
            mask = torch.ones(n_k, n_q, dtype=torch.bool).tril(shift).T
        if invert:
            mask = ~mask
        return mask.to(dtype)

    return causal_mask


MASK_CASES = [
    Case("N = 1", _mask_case(1)),
    Case("N = 4", _mask_case(4), 2),
    Case("N = 7", _mask_case(7), 2),
    Case("N_q = N_k = 5 given explicitly", _mask_case(5, 5)),
    Case("N_q = 3 new queries over N_k = 6 keys", _mask_case(3, 6), 2,
         hint="With N_k > N_q the queries are the last N_q positions: query i sits at position "
              "i + N_k - N_q and sees keys j ≤ i + N_k - N_q (tril with diagonal N_k - N_q)."),
]

# ----------------------------------------------------------------------------- 03.3 SelfAttention


class TorchSelfAttention(nn.Module):
    """The reference layer: the same parameters, projected with F.linear, attended with F.sdpa."""

    def __init__(self, d_model, d_k=None, d_v=None):
        super().__init__()
        d_k = d_model if d_k is None else d_k
        d_v = d_k if d_v is None else d_v
        self.W_Q = nn.Linear(d_model, d_k, bias=False)
        self.W_K = nn.Linear(d_model, d_k, bias=False)
        self.W_V = nn.Linear(d_model, d_v, bias=False)

    def forward(self, x, mask=None):
        return torch_attention(self.W_Q(x), self.W_K(x), self.W_V(x), mask)


def run_layer(cls, args):
    """Build the submitted class, load the case's weights into its parameters, run it."""
    x, W_Q, W_K, W_V, mask = args
    layer = cls(x.shape[-1], W_Q.shape[0], W_V.shape[0])
    load_parameters(layer, {"W_Q.weight": W_Q, "W_K.weight": W_K, "W_V.weight": W_V})
    # trained through: the gradients with respect to x and the three weights are compared too
    return backward(layer, (x,) if mask is None else (x, mask), {"x": 0}, params=True)


def _layer_case(B, N, d_model, d_k, d_v, mask=None):
    def make(g):
        x = _randn(g, B, N, d_model)
        W = [_randn(g, d, d_model, scale=d_model ** -0.5) for d in (d_k, d_k, d_v)]
        m = None
        if mask == "causal":
            m = torch.ones(N, N, dtype=torch.bool).tril()
        elif mask == "padding":
            m = attention.padding_mask(torch.arange(N, N - B, -1).clamp_min(1), N)[:, None, :]
        elif mask == "empty row":
            m = torch.ones(B, N, N, dtype=torch.bool).tril()
            m[0, 1] = False  # query 1 of sequence 0 may see nothing
        return (x, *W, m)

    return make


class _SwappedQK(attention.SelfAttention):
    def forward(self, x, mask=None):
        return attention.scaled_dot_product_attention(self.W_K(x), self.W_Q(x), self.W_V(x), mask)


class _ScaledByModel(attention.SelfAttention):
    def forward(self, x, mask=None):
        q, k, v = self.W_Q(x), self.W_K(x), self.W_V(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])
        weights = attention.masked_softmax(scores, mask)
        return weights @ v, weights


class _NoValueProjection(attention.SelfAttention):
    def forward(self, x, mask=None):
        return attention.scaled_dot_product_attention(self.W_Q(x), self.W_K(x), x, mask)


class _MaskIgnored(attention.SelfAttention):
    def forward(self, x, mask=None):
        return attention.scaled_dot_product_attention(self.W_Q(x), self.W_K(x), self.W_V(x))


class _SoftmaxOverQueries(attention.SelfAttention):
    def forward(self, x, mask=None):
        return _sdpa(dim=-2)(self.W_Q(x), self.W_K(x), self.W_V(x), mask)


class _Untransposed(attention.SelfAttention):
    def forward(self, x, mask=None):
        q, k, v = (x @ layer.weight for layer in (self.W_Q, self.W_K, self.W_V))
        return attention.scaled_dot_product_attention(q, k, v, mask)


class _MaskInverted(attention.SelfAttention):
    def forward(self, x, mask=None):
        return attention.scaled_dot_product_attention(
            self.W_Q(x), self.W_K(x), self.W_V(x), None if mask is None else ~mask)


class _WeightsFirst(attention.SelfAttention):
    def forward(self, x, mask=None):
        output, weights = super().forward(x, mask)
        return weights, output


class _CausalByDefault(attention.SelfAttention):
    def forward(self, x, mask=None):
        if mask is None:
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        return super().forward(x, mask)


class _ScaledByValues(attention.SelfAttention):
    def forward(self, x, mask=None):
        return _sdpa(scale=lambda q, v: math.sqrt(v.shape[-1]))(
            self.W_Q(x), self.W_K(x), self.W_V(x), mask)


LAYER_CASES = [
    Case("B=1, N=3, d_model = d_k = d_v = 4", _layer_case(1, 3, 4, 4, 4), 2),
    Case("d_model=8, d_k=4, d_v=6", _layer_case(2, 5, 8, 4, 6), 3,
         hint="W_Q and W_K map d_model to d_k, W_V maps d_model to d_v; scale by √d_k."),
    Case("d_model=16, d_k=8, d_v=16", _layer_case(2, 6, 16, 8, 16), 2),
    Case("causal mask (N, N)", _layer_case(2, 5, 8, 8, 8, mask="causal"), 3,
         hint="Pass the mask on to the attention: forward(x, mask) must use it."),
    Case("padding mask (B, 1, N)", _layer_case(3, 6, 8, 4, 4, mask="padding"), 2,
         hint="A (B, 1, N) padding mask broadcasts over the queries: pass it on unchanged."),
    Case("a query with every key masked", _layer_case(2, 4, 8, 4, 4, mask="empty row"), 1,
         hint="A query whose keys are all masked gets zero weights and a zero output, never "
              "NaN: guard the softmax as scaled_dot_product_attention does."),
]


SUITES = [
    Suite(
        exercise="03.1",
        name="scaled_dot_product_attention",
        grad=("q", "k", "v"),
        points=3,
        reference=torch_attention,
        solution=attention.scaled_dot_product_attention,
        cases=SDPA_CASES,
        hint="softmax(QKᵀ/√d_k) V: scores q @ k.transpose(-2, -1) / √d_k, masked positions set to "
             "-inf, softmax over the keys (the last axis), then weights @ v.",
        mutants=[
            Mutant("missing scale", _sdpa(scale=lambda q, v: 1.0),
                   "Your scores are not scaled: divide QKᵀ by √d_k, with d_k = q.shape[-1]."),
            Mutant("scaled by d", _sdpa(scale=lambda q, v: q.shape[-1]),
                   "You divide the scores by d_k; the scale is √d_k (math.sqrt(q.shape[-1]))."),
            Mutant("scaled by √d_v", _sdpa(scale=lambda q, v: math.sqrt(v.shape[-1])),
                   "You scale by √d_v (the size of the values); the scale is √d_k, the size of "
                   "the queries and keys."),
            Mutant("softmax over the queries", _sdpa(dim=-2),
                   "Your softmax runs over the wrong axis: each query's weights over the keys "
                   "must sum to 1, so take the softmax over the last axis (dim=-1)."),
            Mutant("mask after the softmax", _sdpa(after=True),
                   "You apply the mask after the softmax, so the weights no longer sum to 1: set "
                   "masked scores to -inf *before* the softmax."),
            Mutant("-1e6 fill", _sdpa(fill=-1e6),
                   "You fill masked scores with a large finite number (like -1e6); when real "
                   "scores are that small too, masked keys get weight. Use float('-inf')."),
            Mutant("mask inverted", _sdpa(inverted=True),
                   "Your mask is inverted: in this book (and in F.scaled_dot_product_attention) "
                   "True means 'may attend', so fill where the mask is False (~mask)."),
            Mutant("NaN for a fully masked row", _sdpa(guard=False),
                   "A query whose keys are all masked gets NaN weights (softmax of all -inf); "
                   "give such rows zero weights, e.g. with torch.nan_to_num or masked_fill."),
            Mutant("softmax without the max trick", _sdpa(stable=False),
                   "Your softmax overflows for large scores: exp(s) / Σ exp(s) needs the row "
                   "maximum subtracted first; torch.softmax does this for you."),
            Mutant("mask forced to (B, N_q, N_k)", _sdpa(mask_3d=True),
                   "Your code reshapes the mask to (B, N_q, N_k) and fails on masks of other "
                   "shapes: the mask broadcasts to the scores whatever its shape, (N_q, N_k), "
                   "(B, 1, N_k) or (B, H, N_q, N_k), so use it as given in masked_fill."),
            Mutant("scale fixed at √64", _sdpa(scale=lambda q, v: 8.0),
                   "Your scale is a constant, 8 = √64 (the paper's d_k): compute it from the "
                   "inputs, math.sqrt(q.shape[-1]), so that it is right for every d_k."),
            Mutant("three axes only", _three_axes_only,
                   "Your code works on (B, N, d) inputs only and raises on the others: q, k, v "
                   "may have any number of leading axes, (N, d) or (B, H, N, d) too. Transpose "
                   "the last two axes of k (k.transpose(-2, -1)) and multiply with @, not "
                   "torch.bmm or permute(0, 2, 1), which assume three axes."),
        ],
        observe=first_of(dtype_observation, nan_gradient_observation,
                         weights_observation(1, _axes_of_weights, "the keys")),
        readings=(DTYPE_READING, NAN_GRADIENT_READING, *weights_readings("the keys")),
    ),
    Suite(
        exercise="03.2",
        name="causal_mask",
        points=2,
        reference=torch_causal_mask,
        solution=attention.causal_mask,
        cases=MASK_CASES,
        hint="A boolean (N_q, N_k) matrix, True where query i may attend to key j, i.e. j ≤ i: "
             "torch.ones(N_q, N_k, dtype=torch.bool).tril(N_k - N_q).",
        mutants=[
            Mutant("transposed", _tril(transpose=True),
                   "Your mask is transposed: rows are queries and columns keys, and query i may "
                   "see keys j ≤ i — the lower triangle (tril), not the upper one."),
            Mutant("upper triangle", _triu,
                   "Your mask is the upper triangle (triu): query i may see keys "
                   "j ≤ i + N_k - N_q, the lower one, torch.ones(N_q, N_k, dtype=torch.bool)"
                   ".tril(N_k - N_q)."),
            Mutant("diagonal excluded", _tril(diagonal=-1),
                   "Your mask hides the diagonal: a token may attend to itself (j ≤ i, not "
                   "j < i)."),
            Mutant("one step ahead", _tril(diagonal=1),
                   "Your mask lets each token see the next one (j ≤ i + 1): that is off by one, "
                   "the future must be hidden from j = i + 1 on."),
            Mutant("inverted", _tril(invert=True),
                   "Your mask is inverted: True must mean 'may attend' (the past and the token "
                   "itself), as in F.scaled_dot_product_attention's boolean attn_mask."),
            Mutant("float mask", _tril(dtype=torch.float32),
                   "Return a boolean mask (dtype=torch.bool), not 0/1 floats: a float attn_mask "
                   "is *added* to the scores."),
            Mutant("top-left alignment", _tril(offset=False),
                   "With more keys than queries your queries see too little: the N_q queries are "
                   "the last N_q positions, so use tril(diagonal=N_k - N_q)."),
        ],
    ),
    Suite(
        exercise="03.3",
        name="SelfAttention",
        points=3,
        reference=TorchSelfAttention,
        solution=attention.SelfAttention,
        call=run_layer,
        arg_names=("x", "W_Q.weight", "W_K.weight", "W_V.weight", "mask"),
        upstream=("scaled_dot_product_attention",),
        cases=LAYER_CASES,
        hint="Project x three times (self.W_Q, self.W_K, self.W_V, nn.Linear without bias), then "
             "return scaled_dot_product_attention(q, k, v, mask).",
        mutants=[
            Mutant("queries and keys swapped", _SwappedQK,
                   "Your weights are transposed: queries come from W_Q and keys from W_K; "
                   "swapping them attends from keys to queries."),
            Mutant("scaled by √d_model", _ScaledByModel,
                   "You scale by √d_model (the input size); the scale is √d_k, the size of the "
                   "projected queries and keys."),
            Mutant("no value projection", _NoValueProjection,
                   "You average the raw inputs: the values are V = x W_V (self.W_V(x))."),
            Mutant("mask ignored", _MaskIgnored,
                   "Your layer ignores its mask: pass it on to scaled_dot_product_attention."),
            Mutant("softmax over the queries", _SoftmaxOverQueries,
                   "Your layer normalises the weights over the queries: the softmax runs over "
                   "the keys (the last axis of QKᵀ)."),
            Mutant("weights used untransposed", _Untransposed,
                   "You multiply x by the layers' weights as stored: nn.Linear(d_model, d_k) "
                   "keeps its weight as (d_k, d_model), i.e. (W^Q)ᵀ, so x W^Q is self.W_Q(x) "
                   "(or x @ self.W_Q.weight.T)."),
            Mutant("mask inverted", _MaskInverted,
                   "Your layer inverts the mask: True means 'may attend' (as in "
                   "scaled_dot_product_attention), so pass the mask on unchanged."),
            Mutant("returns (weights, output)", _WeightsFirst,
                   "Your layer returns (weights, output): return (output, weights), the order "
                   "scaled_dot_product_attention uses."),
            Mutant("causal mask by default", _CausalByDefault,
                   "With mask=None your layer applies a causal mask: no mask means every query "
                   "may attend to every key. Pass mask (None included) on unchanged."),
            Mutant("scaled by √d_v", _ScaledByValues,
                   "You scale by √d_v (the size of the values); the scale is √d_k, the size of "
                   "the projected queries and keys."),
        ],
        observe=first_of(dtype_observation, nan_gradient_observation),
        readings=(DTYPE_READING, NAN_GRADIENT_READING,
                  (r"returned 1 tensor\(s\), expected 2",
                   "Return (output, weights), both, as scaled_dot_product_attention does: the "
                   "weights are what the chapter plots.")),
    ),
]
