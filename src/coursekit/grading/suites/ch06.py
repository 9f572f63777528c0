"""Chapter 6 — transformer blocks: ``LayerNorm``, ``FeedForward``, ``EncoderBlock``, ``DecoderBlock``.

The authorities are ``torch.nn`` modules loaded with the case's weights: ``nn.LayerNorm``, a
two-layer MLP of ``nn.Linear`` and ``nn.ReLU``/``nn.GELU``, ``nn.TransformerEncoderLayer`` and
``nn.TransformerDecoderLayer`` (``batch_first=True``; their boolean masks mean "blocked", so they
are inverted here). Weights are drawn with a large spread (std 0.5), so that a missing residual,
a misplaced norm or a wrong activation moves the outputs far past the tolerance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from coursekit import transformer
from coursekit.attention import causal_mask
from coursekit.grading.suite import (
    Backward,
    Case,
    Mutant,
    OutputError,
    Suite,
    backward,
    in_dtype,
    load_parameters,
    scaled_batch,
)

# ----------------------------------------------------------------------------- 06.1 LayerNorm


def run_layer_norm(cls, args):
    d_model, eps, weight, bias, x = args
    module = cls(d_model, eps)
    if x.dtype == torch.float64:  # a model converted with .double(), then given its weights
        module.double()
    load_parameters(module, {"weight": weight, "bias": bias})
    return backward(module, (x,), {"x": 0}, params=True)  # trained through: gradients too


def _ln_case(shape, eps=1e-5, constant=False, by_hand=False, offset=0.0):
    def make(g):
        d = shape[-1]
        if by_hand:  # (1, 2, 3, 4): μ = 2.5, σ² = 1.25, γ = 1, δ = 0
            return d, eps, torch.ones(d), torch.zeros(d), torch.arange(1.0, d + 1).expand(shape)
        weight = 1 + 0.5 * torch.randn(d, generator=g)
        bias = 0.5 * torch.randn(d, generator=g)
        x = torch.randn(shape, generator=g) * 3 + torch.randn(shape[:-1] + (1,), generator=g)
        x = x + offset
        if constant:  # the second token is constant: σ² = 0
            x[..., 1, :] = 2.0
        return d, eps, weight, bias, x

    return make


def _ln_variant(*, unbiased=False, eps_outside=False, dim=-1, affine=True, eps="added",
                centre=True):
    """A wrong LayerNorm, one bug switched on: ``eps`` "fixed" (1e-5 whatever the argument) or
    "floor" (max(σ², ε) instead of σ² + ε); ``centre=False`` divides x by its RMS (RMSNorm)."""

    class Variant(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d_model))
            self.bias = nn.Parameter(torch.zeros(d_model))

        def forward(self, x):
            mu = x.mean(dim=dim, keepdim=True) if centre else torch.zeros_like(x[..., :1])
            var = (x - mu).pow(2).sum(dim, keepdim=True) / (x.shape[dim] - unbiased)
            e = 1e-5 if eps == "fixed" else self.eps
            y = (x - mu) / (var.sqrt() + e if eps_outside else
                            var.clamp(min=e).sqrt() if eps == "floor" else (var + e).sqrt())
            return y * self.weight + self.bias if affine else y

    return Variant


# One hint for the cases that probe ε, whichever way a submission gets it wrong.
EPS_HINT = ("ε is the eps argument (self.eps), added to σ² under the square root for every "
            "token: (x − μ) / √(σ² + ε). It keeps a constant token (σ² = 0) finite (its output "
            "is the bias), and it shows wherever ε is large or σ² small: a fixed ε, ε added to σ "
            "outside the root, ε as a floor max(σ², ε), or ε only where σ² = 0 all differ "
            "there.")

LN_CASES = [
    Case("by hand: one token (1, 2, 3, 4), γ = 1, δ = 0", _ln_case((1, 1, 4), by_hand=True)),
    Case("B=2, N=3, d_model=8, random γ and δ", _ln_case((2, 3, 8))),
    Case("N = d_model = 6", _ln_case((2, 6, 6)),
         hint="Normalise each token over its own d_model features: mean and variance over the "
              "last dimension, not over the positions."),
    Case("d_model = 3: the variance's divisor shows", _ln_case((2, 4, 3)),
         hint="The variance is the biased one: divide by d_model, not d_model − 1 "
              "(x.var(..., unbiased=False))."),
    Case("large ε = 0.5", _ln_case((2, 3, 8), eps=0.5), hint=EPS_HINT),
    Case("tokens with a mean near 1000", _ln_case((2, 3, 8), offset=1000.0),
         hint="Compute σ² as the mean of (x − μ)², after subtracting the mean: E[x²] − μ² "
              "cancels catastrophically in float32 when the mean is large.", grad=False),
    Case("a constant token (σ² = 0)", _ln_case((2, 3, 8), constant=True), hint=EPS_HINT),
]
LN_CASES += [
    # the second sequence's tokens at a thousandth of the scale: σ² ≈ 1e-5, the size of ε
    scaled_batch(LN_CASES[1], 4, (1.0, 1e-3), hint=EPS_HINT),
    # a model converted with .double(): computed in float64 to float64's precision (float32
    # rounding is 1e-7 of the values). ε = 0 keeps where ε goes, which moves the outputs by
    # ε/σ² ~ 1e-6 of them, out of this case: the cases above probe it.
    in_dtype(Case("B=2, N=3, d_model=8, ε = 0", _ln_case((2, 3, 8), eps=0.0)), torch.float64,
             atol=1e-10, rtol=1e-8),
]

# ----------------------------------------------------------------------------- 06.2 FeedForward


class TorchFeedForward(nn.Module):
    """The authority: nn.Linear -> nn.ReLU or nn.GELU -> nn.Linear, the parts of
    nn.TransformerEncoderLayer's feed-forward block."""

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.act = {"relu": nn.ReLU(), "gelu": nn.GELU()}[activation]
        self.dropout = nn.Dropout(dropout)  # where nn.TransformerEncoderLayer._ff_block has it
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.dropout(self.act(self.linear1(x))))


FF_NAMES = ("linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias")


def _mode(module, dropout):
    """Training mode for a case with dropout = 1 (every dropout site zeroes its input, with no
    random draws, so the reference and the submission agree exactly), eval mode otherwise (a
    case with 0 < dropout < 1 checks that dropout is off in eval mode)."""
    module.train(dropout == 1)


def run_feed_forward(cls, args):
    d_model, d_ff, activation, dropout, *weights, x = args
    module = cls(d_model, d_ff, dropout=dropout, activation=activation)
    load_parameters(module, dict(zip(FF_NAMES, weights, strict=True)))
    _mode(module, dropout)
    run = backward(module, (x,), {"x": 0}, params=True)
    if type(run.value) is not torch.Tensor:
        raise OutputError(f"forward returned a {type(run.value).__name__}; it should return "
                          "one tensor, (B, N, d_model)")
    return run


def _ff_case(B, N, d_model, d_ff, activation, dropout=0.0):
    def make(g):
        weights = [0.5 * torch.randn(d_ff, d_model, generator=g), 0.5 * torch.randn(d_ff, generator=g),
                   0.5 * torch.randn(d_model, d_ff, generator=g), 0.5 * torch.randn(d_model, generator=g)]
        return (d_model, d_ff, activation, dropout, *weights,
                torch.randn(B, N, d_model, generator=g))

    return make


def _ff_variant(*, act=None, output_act=False, approximate="none"):
    class Variant(nn.Module):
        def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
            super().__init__()
            self.activation = activation if act is None else act
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)

        def forward(self, x):
            phi = {"relu": F.relu, "gelu": lambda h: F.gelu(h, approximate=approximate),
                   "none": lambda h: h}[self.activation]
            y = self.linear2(phi(self.linear1(x)))
            return phi(y) if output_act else y

    return Variant


FF_CASES = [
    Case("ReLU, B=2, N=3, d_model=8, d_ff=32", _ff_case(2, 3, 8, 32, "relu")),
    Case("GELU, B=2, N=4, d_model=8, d_ff=16", _ff_case(2, 4, 8, 16, "gelu"),
         hint="activation='gelu' is the exact GELU, x·Φ(x) (F.gelu), between the two layers."),
    Case("ReLU, one position, d_ff=4", _ff_case(1, 1, 6, 4, "relu"),
         hint="With B = N = 1 the output keeps its shape (1, 1, d_model): the FFN acts on the "
              "last axis only (x.squeeze() would drop the two axes of size 1)."),
    Case("GELU, B=3, N=5, d_model=4, d_ff=16", _ff_case(3, 5, 4, 16, "gelu")),
    Case("eval mode, dropout = 0.5: no dropout", _ff_case(2, 3, 8, 16, "gelu", dropout=0.5),
         hint="Dropout acts only in training mode: in eval mode (module.eval(), "
              "self.training False) the layer is deterministic. nn.Dropout does this by itself; "
              "F.dropout needs training=self.training."),
    Case("training mode, dropout = 1", _ff_case(2, 3, 8, 16, "relu", dropout=1.0),
         hint="Dropout acts on the hidden activations, between the two layers: "
              "linear2(dropout(φ(linear1(x)))), and only in training mode (nn.Dropout(dropout)). "
              "With p = 1 every hidden unit is dropped, so the output is linear2's bias."),
]

# ----------------------------------------------------------------------------- 06.3 / 06.4 blocks


def torch_names(state):
    """coursekit's parameter names -> nn.TransformerEncoderLayer/DecoderLayer's."""
    renamed = {}
    for name, value in state.items():
        name = name.replace("cross_attn.", "multihead_attn.").replace("ff.linear", "linear")
        name = name.replace("in_proj.weight", "in_proj_weight").replace("in_proj.bias", "in_proj_bias")
        renamed[name] = value
    return renamed


def _exercise_names(module: nn.Module, names: tuple[str, ...], *args, **kwargs):
    """``module.named_parameters()`` under the exercise's names (the gradients are compared by
    name); ``names`` are the exercise's, torch_names maps them to torch's."""
    inverse = {next(iter(torch_names({n: None}))): n for n in names}
    for name, p in nn.Module.named_parameters(module, *args, **kwargs):
        yield inverse.get(name.removeprefix("layer."), name), p


class TorchEncoderLayer(nn.Module):
    """The authority: ``nn.TransformerEncoderLayer`` behind the exercise's interface."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=dropout,
                                                activation=activation, batch_first=True,
                                                norm_first=norm_first)

    def load_state_dict(self, state, strict=True, assign=False):
        return self.layer.load_state_dict(torch_names(state), strict=strict, assign=assign)

    def named_parameters(self, *args, **kwargs):
        return _exercise_names(self, ENC_NAMES, *args, **kwargs)

    def forward(self, x, key_mask=None, is_causal=False):
        N = x.shape[1]
        return self.layer(x, src_mask=~causal_mask(N) if is_causal else None,
                          src_key_padding_mask=None if key_mask is None else ~key_mask,
                          is_causal=is_causal), None


class TorchDecoderLayer(nn.Module):
    """The authority: ``nn.TransformerDecoderLayer`` behind the exercise's interface."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d_model, n_heads, d_ff, dropout=dropout,
                                                activation=activation, batch_first=True,
                                                norm_first=norm_first)

    def load_state_dict(self, state, strict=True, assign=False):
        return self.layer.load_state_dict(torch_names(state), strict=strict, assign=assign)

    def named_parameters(self, *args, **kwargs):
        return _exercise_names(self, DEC_NAMES, *args, **kwargs)

    def forward(self, y, memory, key_mask=None, memory_mask=None, is_causal=True):
        N = y.shape[1]
        return self.layer(y, memory, tgt_mask=~causal_mask(N) if is_causal else None,
                          tgt_is_causal=is_causal,
                          tgt_key_padding_mask=None if key_mask is None else ~key_mask,
                          memory_key_padding_mask=None if memory_mask is None else ~memory_mask
                          ), None, None


def _parameter_shapes(cls_name, d_model, d_ff):
    d = d_model
    attn = {"in_proj.weight": (3 * d, d), "in_proj.bias": (3 * d,),
            "out_proj.weight": (d, d), "out_proj.bias": (d,)}
    shapes = {f"self_attn.{k}": s for k, s in attn.items()}
    if cls_name == "DecoderBlock":
        shapes.update({f"cross_attn.{k}": s for k, s in attn.items()})
    shapes.update({"ff.linear1.weight": (d_ff, d), "ff.linear1.bias": (d_ff,),
                   "ff.linear2.weight": (d, d_ff), "ff.linear2.bias": (d,)})
    for i in range(1, 4 if cls_name == "DecoderBlock" else 3):
        shapes.update({f"norm{i}.weight": (d,), f"norm{i}.bias": (d,)})
    return shapes


def _random_parameters(g, shapes):
    out = {}
    for name, shape in shapes.items():
        noise = 0.5 * torch.randn(shape, generator=g)
        out[name] = 1 + noise if name.startswith("norm") and name.endswith("weight") else noise
    return out


ENC_NAMES = tuple(_parameter_shapes("EncoderBlock", 1, 1))
DEC_NAMES = tuple(_parameter_shapes("DecoderBlock", 1, 1))


def _check_tuple(result, n, what):
    if not isinstance(result, tuple) or len(result) != n:
        raise OutputError(f"forward returned a {type(result).__name__}; it should return the "
                          f"tuple {what}")
    return result[0]


def varying_share(module, call, x, draws):
    """Training mode, 0 < dropout < 1, a Pre-LN block whose FFN (and, in a decoder block, one of
    its two attentions) outputs zeros: what ``call()`` adds to x is Dropout(MHA(LN(x), ...)) of
    the one attention left. Called ``draws`` times, each element of it is either 0 (dropped by
    the sub-layer's dropout) or, where it is kept, a value that varies from call to call only if
    that attention drops some of its weights too (nn.MultiheadAttention's ``dropout``). Returns
    the share of elements whose kept values are not all the same: about 1 for the authority,
    exactly 0 for a block whose attention drops nothing. No random draws need to match between
    the grader and the submission."""
    module.train(True)
    with torch.no_grad():
        added = torch.stack([call() - x for _ in range(draws)]).double()  # (draws, B, N, d)
    kept = added != 0
    high = torch.where(kept, added, -torch.inf).amax(0)
    low = torch.where(kept, added, torch.inf).amin(0)
    seen = kept.sum(0) >= 2  # kept at least twice: whether it varies can show
    varies = (high - low) > 1e-6 * (1 + high.abs())
    return torch.tensor([(varies & seen).sum().item() / max(seen.sum().item(), 1)])


def run_encoder_block(cls, args):
    (d_model, n_heads, d_ff, activation, norm_first, dropout, *weights, x, key_mask, is_causal,
     draws) = args
    module = cls(d_model, n_heads, d_ff, dropout=dropout, activation=activation,
                 norm_first=norm_first)
    load_parameters(module, dict(zip(ENC_NAMES, weights, strict=True)))
    if draws:
        return Backward(varying_share(module, lambda: _check_tuple(
            module(x), 2, "(output, weights)"), x, draws), {})
    _mode(module, dropout)
    # trained through (Chapters 7-9 stack these blocks): the gradients of the output with
    # respect to x and to every parameter are compared too
    run = backward(module, (x,), {"x": 0}, dict(key_mask=key_mask, is_causal=is_causal),
                   params=True, first=1)
    return Backward(_check_tuple(run.value, 2, "(output, weights)"), run.grads)


def run_decoder_block(cls, args):
    (d_model, n_heads, d_ff, activation, norm_first, dropout, *weights, y, memory, key_mask,
     memory_mask, is_causal, draws) = args
    module = cls(d_model, n_heads, d_ff, dropout=dropout, activation=activation,
                 norm_first=norm_first)
    load_parameters(module, dict(zip(DEC_NAMES, weights, strict=True)))
    what = "(output, self-attention weights, cross-attention weights)"
    if draws:
        return Backward(varying_share(module, lambda: _check_tuple(
            module(y, memory), 3, what), y, draws), {})
    _mode(module, dropout)
    # the default is_causal is left out of the call, as the chapter calls the block
    options = dict(key_mask=key_mask, memory_mask=memory_mask) | (
        {} if is_causal else {"is_causal": False})
    run = backward(module, (y, memory), {"y": 0, "memory": 1}, options, params=True, first=1)
    return Backward(_check_tuple(run.value, 3, what), run.grads)


def _enc_case(*, norm_first, activation="relu", B=2, N=5, d_model=16, n_heads=4, d_ff=32,
              lengths=None, causal=False, dropout=0.0, draws=0):
    def make(g):
        params = _random_parameters(g, _parameter_shapes("EncoderBlock", d_model, d_ff))
        if draws:  # the FFN outputs zeros: only the attention's sub-layer adds to x
            params["ff.linear2.weight"].zero_()
            params["ff.linear2.bias"].zero_()
        x = torch.randn(B, N, d_model, generator=g)
        key_mask = None if lengths is None else torch.arange(N) < torch.tensor(lengths)[:, None]
        return (d_model, n_heads, d_ff, activation, norm_first, dropout, *params.values(), x,
                key_mask, causal, draws)

    return make


def _dec_case(*, norm_first, B=2, N_t=4, N_s=6, d_model=16, n_heads=4, d_ff=32,
              tgt_lengths=None, src_lengths=None, activation="relu", dropout=0.0, causal=True,
              draws=0, silent=""):
    def make(g):
        params = _random_parameters(g, _parameter_shapes("DecoderBlock", d_model, d_ff))
        # the FFN, and the attention named by ``silent``, output zeros: only the other
        # attention's sub-layer adds to y
        for name in ["ff.linear2.weight", "ff.linear2.bias"] + (
                [f"{silent}.out_proj.weight", f"{silent}.out_proj.bias"] if silent else []):
            if draws:
                params[name].zero_()
        y = torch.randn(B, N_t, d_model, generator=g)
        memory = torch.randn(B, N_s, d_model, generator=g)
        tgt = None if tgt_lengths is None else torch.arange(N_t) < torch.tensor(tgt_lengths)[:, None]
        src = None if src_lengths is None else torch.arange(N_s) < torch.tensor(src_lengths)[:, None]
        return (d_model, n_heads, d_ff, activation, norm_first, dropout, *params.values(), y,
                memory, tgt, src, causal, draws)

    return make


class _EncoderVariant(transformer.EncoderBlock):
    """A wrong EncoderBlock, one bug switched on by the class attributes."""

    attn_residual = ff_residual = True
    norm_placement = "as asked"  # or "always post", "residual after norm"
    use_key_mask = use_causal = True

    def forward(self, x, key_mask=None, is_causal=False, need_weights=False):
        def attn(h):
            return self.self_attn(h, key_mask=key_mask if self.use_key_mask else None,
                                  is_causal=is_causal and self.use_causal)[0]

        pre = self.norm_first and self.norm_placement != "always post"
        if pre and self.norm_placement == "residual after norm":
            x = self.norm1(x)
            x = x + attn(x)
            x = self.norm2(x)
            return x + self.ff(x), None
        if pre:
            x = x + attn(self.norm1(x)) if self.attn_residual else attn(self.norm1(x))
            return (x + self.ff(self.norm2(x)) if self.ff_residual else self.ff(self.norm2(x))), None
        x = self.norm1(x + attn(x) if self.attn_residual else attn(x))
        return self.norm2(x + self.ff(x) if self.ff_residual else self.ff(x)), None


def _encoder_variant(**bugs):
    return type("EncoderBlock", (_EncoderVariant,), bugs)


class _NoAttentionDropout(transformer.EncoderBlock):
    """Right but for the attention's own dropout: MultiHeadAttention(d_model, n_heads)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attn.dropout = 0.0


class _NoDecoderAttentionDropout(transformer.DecoderBlock):
    """Right but for one attention's own dropout (``attention`` names it)."""

    attention = "cross_attn"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        getattr(self, self.attention).dropout = 0.0


class _DecoderVariant(transformer.DecoderBlock):
    """A wrong DecoderBlock, one bug switched on by the class attributes."""

    causal = True
    inverted_causal = False  # the causal mask in nn.MultiheadAttention's sense (True = blocked)
    kv_from = "memory"  # or "decoder"
    use_memory_mask = True
    cross_residual = True
    norm_memory = False
    # dropout on each sub-layer's output, as asked (the older variants leave it out, and so
    # do the corpus's sources of them)
    sublayer_dropout = False

    def forward(self, y, memory, key_mask=None, memory_mask=None, is_causal=True,
                need_weights=False):
        def drop(k, t):
            return getattr(self, f"dropout{k}")(t) if self.sublayer_dropout else t

        def self_attn(h):
            if is_causal and self.inverted_causal:
                return drop(1, self.self_attn(h, attn_mask=~causal_mask(h.shape[1]),
                                              key_mask=key_mask)[0])
            return drop(1, self.self_attn(h, key_mask=key_mask,
                                          is_causal=is_causal and self.causal)[0])

        def cross_attn(h, norm=None):
            kv = h if self.kv_from == "decoder" else memory
            kv = norm(kv) if norm is not None and self.norm_memory else kv
            mask = memory_mask if self.use_memory_mask and self.kv_from == "memory" else None
            return drop(2, self.cross_attn(h, kv, key_mask=mask)[0])

        if self.norm_first:
            y = y + self_attn(self.norm1(y))
            y = y + cross_attn(self.norm2(y), self.norm2) if self.cross_residual \
                else cross_attn(self.norm2(y), self.norm2)
            return y + drop(3, self.ff(self.norm3(y))), None, None
        y = self.norm1(y + self_attn(y))
        y = self.norm2(y + cross_attn(y) if self.cross_residual else cross_attn(y))
        return self.norm3(y + drop(3, self.ff(y))), None, None


def _decoder_variant(**bugs):
    return type("DecoderBlock", (_DecoderVariant,), bugs)


ENC_CASES = [
    Case("Post-LN, ReLU", _enc_case(norm_first=False)),
    Case("Pre-LN, ReLU", _enc_case(norm_first=True),
         hint="norm_first=True is Pre-LN: X = X + MHSA(LN₁(X)), then X = X + FFN(LN₂(X)); the "
              "residual stream itself is never normalised inside the block."),
    Case("Post-LN, GELU", _enc_case(norm_first=False, activation="gelu", N=4)),
    Case("key padding mask", _enc_case(norm_first=False, B=3, N=6, lengths=[6, 3, 4]),
         hint="key_mask (B, N) is True at real tokens and False at padding, and the "
              "self-attention takes it as it is: the padding keys (False) must get no weight."),
    Case("causal", _enc_case(norm_first=True, N=6, causal=True),
         hint="Pass is_causal to the self-attention: with it the block is GPT's decoder-only "
              "block."),
    Case("Pre-LN, padding and causal", _enc_case(norm_first=True, B=3, N=5, lengths=[5, 2, 4],
                                                 causal=True, activation="gelu"),
         hint="Everything at once: Pre-LN (normalise only each sub-layer's input), key_mask and "
              "is_causal both passed to the self-attention, GELU in the FFN."),
    Case("eval mode, dropout = 0.5: no dropout", _enc_case(norm_first=False, dropout=0.5),
         hint="Dropout acts only in training mode: in eval mode (self.training False) the block "
              "is deterministic. nn.Dropout does this by itself; F.dropout needs "
              "training=self.training."),
    Case("training mode, dropout = 1, Post-LN", _enc_case(norm_first=False, dropout=1.0),
         hint="Dropout acts on each sub-layer's output before it joins the residual stream, "
              "X + Dropout(Sublayer(·)), and only in training mode. With p = 1 every sub-layer's "
              "output is dropped: the Post-LN block returns LN₂(LN₁(X))."),
    Case("training mode, dropout = 1, Pre-LN", _enc_case(norm_first=True, dropout=1.0),
         hint="Dropout acts on each sub-layer's output before it joins the residual stream, "
              "X + Dropout(Sublayer(LN(X))), and only in training mode. With p = 1 every "
              "sub-layer's output is dropped: the Pre-LN block returns X unchanged."),
    Case("training mode, dropout = 0.5, 64 calls: the attention drops weights",
         _enc_case(norm_first=True, dropout=0.5, draws=64), grad=False, atol=0.25, rtol=0.0,
         hint="In training mode the attention drops some of its weights too (self.self_attn is "
              "MultiHeadAttention(d_model, n_heads, dropout=dropout), as nn.MultiheadAttention "
              "has dropout=dropout inside nn.TransformerEncoderLayer): the case calls a Pre-LN "
              "block whose FFN outputs zeros 64 times and counts the share of elements of output − x "
              "whose kept (nonzero) values differ from call to call: about all of them in "
              "nn.TransformerEncoderLayer, far fewer in yours, whose attention output mostly "
              "repeats wherever it is kept, as when nothing inside the attention is random."),
]

DEC_CASES = [
    Case("Post-LN", _dec_case(norm_first=False)),
    Case("Pre-LN", _dec_case(norm_first=True),
         hint="norm_first=True is Pre-LN: each sub-layer reads LN(Y) and adds its output to Y."),
    Case("source padding (memory_mask)", _dec_case(norm_first=False, B=3, src_lengths=[6, 2, 4]),
         hint="memory_mask (B, N_s) is the key mask of the cross-attention: padding in the "
              "source must get no weight."),
    Case("target padding (key_mask)", _dec_case(norm_first=True, B=3, N_t=5, tgt_lengths=[5, 3, 2]),
         hint="key_mask (B, N_t) marks the decoder's own padding: pass it to the causal "
              "self-attention (memory_mask is for the cross-attention)."),
    Case("longer target than source", _dec_case(norm_first=False, N_t=7, N_s=3),
         hint="In cross-attention the queries come from the decoder (N_t of them) and the keys "
              "and values from memory (N_s): the output has N_t rows."),
    Case("Pre-LN, both paddings", _dec_case(norm_first=True, B=3, N_t=5, N_s=4,
                                             tgt_lengths=[5, 4, 3], src_lengths=[4, 1, 3]),
         hint="Pre-LN with both masks: key_mask goes to the self-attention, memory_mask to the "
              "cross-attention, and only the decoder's stream is normalised."),
    Case("is_causal=False: every target position sees every other",
         _dec_case(norm_first=False, causal=False),
         hint="Pass is_causal on to the self-attention: with is_causal=False nothing is masked "
              "there, and each target position sees the whole target."),
    Case("GELU", _dec_case(norm_first=True, activation="gelu"),
         hint="Pass activation on to the feed-forward sub-layer: activation='gelu' is the "
              "exact GELU."),
    Case("eval mode, dropout = 0.5: no dropout", _dec_case(norm_first=True, dropout=0.5),
         hint="Dropout acts only in training mode: in eval mode (self.training False) the block "
              "is deterministic. nn.Dropout does this by itself; F.dropout needs "
              "training=self.training."),
    Case("training mode, dropout = 1, Post-LN", _dec_case(norm_first=False, dropout=1.0),
         hint="Dropout acts on each sub-layer's output before it joins the residual stream, "
              "Y + Dropout(Sublayer(·)), and only in training mode. With p = 1 every sub-layer's "
              "output is dropped: the Post-LN block returns LN₃(LN₂(LN₁(Y)))."),
    *(Case(f"training mode, dropout = 0.5, 64 calls: the {kind}-attention drops weights",
           _dec_case(norm_first=True, dropout=0.5, draws=64, silent=f"{other}_attn"),
           grad=False, atol=0.25, rtol=0.0,
           hint=f"In training mode the {kind}-attention drops some of its weights too "
                f"(self.{kind}_attn is MultiHeadAttention(d_model, n_heads, dropout=dropout), "
                "as nn.TransformerDecoderLayer's attentions have dropout=dropout): the case "
                f"calls a Pre-LN block whose FFN and {other}-attention output zeros 64 times "
                "and counts the share of elements of output − y whose kept (nonzero) values "
                "differ from call to call: about all of them in nn.TransformerDecoderLayer, far "
                f"fewer in yours, whose {kind}-attention output mostly repeats wherever it is "
                "kept, as when nothing inside that attention is random.")
      for kind, other in (("self", "cross"), ("cross", "self"))),
]

SUITES = [
    Suite(
        exercise="06.1",
        name="LayerNorm",
        points=3,
        reference=nn.LayerNorm,
        solution=transformer.LayerNorm,
        call=run_layer_norm,
        arg_names=("d_model", "eps", "weight", "bias", "x"),
        cases=LN_CASES,
        hint="For each token: μ = mean of its d_model features, σ² = mean of (x − μ)², "
             "y = (x − μ) / √(σ² + ε) · γ + δ.",
        mutants=[
            Mutant("unbiased variance", _ln_variant(unbiased=True),
                   "You use the unbiased variance (divide by d_model − 1). LayerNorm divides by "
                   "d_model: x.var(dim=-1, unbiased=False), or the mean of (x − μ)²."),
            Mutant("ε outside the root", _ln_variant(eps_outside=True),
                   "ε belongs inside the square root, √(σ² + ε), not σ + ε: with a large ε (or a "
                   "small variance) the two differ."),
            Mutant("normalised over the positions", _ln_variant(dim=-2),
                   "You normalise over the wrong axis (the positions). LayerNorm normalises each "
                   "token over its own features: dim=-1."),
            Mutant("no γ and β", _ln_variant(affine=False),
                   "After normalising, scale and shift by the learned γ (self.weight) and δ "
                   "(self.bias)."),
            Mutant("eps argument ignored", _ln_variant(eps="fixed"),
                   "Your output is what ε = 1e-5 gives whatever eps is passed (this case passes "
                   "eps=0.5): use the eps argument, self.eps, in √(σ² + ε)."),
            Mutant("ε as a floor", _ln_variant(eps="floor"),
                   "You use ε as a floor, √max(σ², ε); LayerNorm adds it, √(σ² + ε), for every "
                   "token: the two differ wherever σ² is not much larger than ε."),
            Mutant("no centring (RMSNorm)", _ln_variant(centre=False),
                   "You do not subtract the mean μ: dividing x by its root mean square is "
                   "RMSNorm (Llama's). LayerNorm centres each token first: "
                   "(x − μ) / √(σ² + ε), with σ² the mean of (x − μ)²."),
        ],
        readings=(
            # γ = 1 and δ = 0 in the hand-made case: a constant factor is the scale's alone
            (r"is the expected one times \S+, everywhere",
             "So the normalisation's scale is off by a constant factor: σ² is the mean of "
             "(x − μ)² over the d_model features, so its divisor is x.shape[-1] (not "
             "d_model − 1, not the size of another axis), and the output divides by its square "
             "root, √(σ² + ε)."),
        ),
    ),
    Suite(
        exercise="06.2",
        name="FeedForward",
        points=2,
        reference=TorchFeedForward,
        solution=transformer.FeedForward,
        call=run_feed_forward,
        arg_names=("d_model", "d_ff", "activation", "dropout", *FF_NAMES, "x"),
        cases=FF_CASES,
        hint="FFN(x) = W₂ φ(W₁ x + b₁) + b₂: linear1, the activation, linear2.",
        readings=(
            (r"where `activation` is 'gelu';",
             "What differs in those cases is the activation: activation='gelu' is the exact "
             "GELU, F.gelu(h) = h·Φ(h) (nn.GELU()), between the two layers; not ReLU, not the "
             "tanh or sigmoid approximations."),
            (r"where `activation` is 'relu';",
             "What differs in those cases is the activation: activation='relu' is ReLU, "
             "F.relu(h) (nn.ReLU()), between the two layers."),
        ),
        mutants=[
            Mutant("no activation", _ff_variant(act="none"),
                   "Your FFN has no non-linearity between linear1 and linear2, so it collapses "
                   "to one linear map. Apply the activation (ReLU or GELU) in between."),
            Mutant("activation argument ignored", _ff_variant(act="relu"),
                   "activation='gelu' must use GELU: your block always applies ReLU."),
            Mutant("activation after the second layer too", _ff_variant(output_act=True),
                   "The activation comes only between the two layers: the output of linear2 is "
                   "returned as it is."),
            Mutant("tanh-approximate GELU", _ff_variant(approximate="tanh"),
                   "Use the exact GELU, F.gelu(x) (x·Φ(x)), as nn.TransformerEncoderLayer does; "
                   "the tanh approximation differs by up to about 1e-3."),
        ],
    ),
    Suite(
        exercise="06.3",
        name="EncoderBlock",
        points=4,
        reference=TorchEncoderLayer,
        solution=transformer.EncoderBlock,
        call=run_encoder_block,
        arg_names=("d_model", "n_heads", "d_ff", "activation", "norm_first", "dropout",
                   *ENC_NAMES, "x", "key_mask", "is_causal", "draws"),
        upstream=("LayerNorm", "FeedForward"),
        cases=ENC_CASES,
        hint="Post-LN: X = LN₁(X + MHSA(X)); X = LN₂(X + FFN(X)). Pre-LN: X = X + MHSA(LN₁(X)); "
             "X = X + FFN(LN₂(X)).",
        readings=(
            (r"where `norm_first` is True;",
             "What differs in those cases is Pre-LN (norm_first=True): X = X + Dropout(MHSA("
             "norm1(X))), then X = X + Dropout(FFN(norm2(X))). Only each sub-layer's input is "
             "normalised; the stream itself is not, anywhere in the block (the final LN comes "
             "after the last block, outside it)."),
            (r"where `norm_first` is False;",
             "What differs in those cases is Post-LN (norm_first=False): X = norm1(X + "
             "Dropout(MHSA(X))), then X = norm2(X + Dropout(FFN(X))): normalise the sum after "
             "each residual addition, norm1 after the attention, norm2 after the FFN."),
            (r"where `is_causal` is True;",
             "What differs in those cases is the causal mask: with is_causal=True query i "
             "attends only to keys j ≤ i. Pass is_causal=is_causal to self.self_attn, or an "
             "attn_mask that is True where j ≤ i (True = may attend in coursekit, the opposite "
             "of nn.MultiheadAttention's boolean masks)."),
            (r"where `dropout` is 1\.0;",
             "What differs in those cases is training mode with dropout = 1: each sub-layer's "
             "output goes through its dropout before it joins the residual stream, "
             "X + Dropout(Sublayer(·)) (dropout1 after the attention, dropout2 after the FFN), "
             "so with p = 1 every sub-layer's output is dropped."),
            (r"where `activation` is 'gelu';",
             "What differs in those cases is the activation: pass activation on to the "
             "FeedForward (activation='gelu' is the exact GELU)."),
            (r"where `key_mask` is given;",
             "What differs in those cases is the padding: key_mask (B, N) is True at real "
             "tokens and False at padding, and the self-attention takes it as it is, "
             "self.self_attn(h, key_mask=key_mask, ...), which gives the padding keys no "
             "weight for every query (the queries at padding are not masked)."),
        ),
        mutants=[
            Mutant("no residual around attention", _encoder_variant(attn_residual=False),
                   "The attention sub-layer has no residual connection: add its input back, "
                   "X + MHSA(·), before (Post-LN) or without (Pre-LN) the norm."),
            Mutant("no residual around the FFN", _encoder_variant(ff_residual=False),
                   "The feed-forward sub-layer has no residual connection: X + FFN(·)."),
            Mutant("Pre-LN adds the residual after the norm",
                   _encoder_variant(norm_placement="residual after norm"),
                   "Your Pre-LN block normalises the residual stream itself (X = LN(X), then "
                   "X = X + MHSA(X)). Only the sub-layer's input is normalised: "
                   "X = X + MHSA(LN₁(X)), so the residual path stays an identity."),
            Mutant("norm_first ignored", _encoder_variant(norm_placement="always post"),
                   "norm_first=True must give a Pre-LN block, X = X + MHSA(LN₁(X)); yours is "
                   "Post-LN whatever the flag says."),
            Mutant("key_mask ignored", _encoder_variant(use_key_mask=False),
                   "Your block attends to padding: pass key_mask to self.self_attn."),
            Mutant("is_causal ignored", _encoder_variant(use_causal=False),
                   "With is_causal=True each position may attend only to itself and earlier "
                   "positions: pass is_causal to self.self_attn."),
            Mutant("no dropout inside the attention",
                   type("EncoderBlock", (_NoAttentionDropout,), {}),
                   "Your block's attention drops none of its weights in training mode: build "
                   "it as MultiHeadAttention(d_model, n_heads, dropout=dropout), as the given "
                   "__init__ does (nn.TransformerEncoderLayer's attention drops its weights "
                   "with the same p)."),
        ],
    ),
    Suite(
        exercise="06.4",
        name="DecoderBlock",
        points=4,
        reference=TorchDecoderLayer,
        solution=transformer.DecoderBlock,
        call=run_decoder_block,
        arg_names=("d_model", "n_heads", "d_ff", "activation", "norm_first", "dropout",
                   *DEC_NAMES, "y", "memory", "key_mask", "memory_mask", "is_causal", "draws"),

        upstream=("LayerNorm", "FeedForward"),
        cases=DEC_CASES,
        hint="Three sub-layers, each with a residual and a norm: causal self-attention over Y, "
             "cross-attention (queries from Y, keys and values from memory), FFN.",
        readings=(
            (r"where `norm_first` is True;",
             "What differs in those cases is Pre-LN (norm_first=True): Y = Y + Dropout(SA("
             "norm1(Y))), Y = Y + Dropout(CA(norm2(Y), memory)), Y = Y + Dropout(FFN(norm3(Y))): "
             "each sub-layer reads its own norm of the stream (LN₁, LN₂, LN₃), memory comes in "
             "as the encoder left it, and the stream itself is never normalised in the block."),
            (r"where `norm_first` is False;",
             "What differs in those cases is Post-LN (norm_first=False): Y = norm1(Y + "
             "Dropout(SA(Y))), Y = norm2(Y + Dropout(CA(Y, memory))), Y = norm3(Y + "
             "Dropout(FFN(Y))): each norm (LN₁, LN₂, LN₃) normalises the sum after its own "
             "sub-layer."),
            (r"where `memory_mask` is given;",
             "What differs in those cases is the source's padding: memory_mask (B, N_s) is True "
             "at the source's real tokens and is the cross-attention's key mask, "
             "self.cross_attn(h, memory, key_mask=memory_mask)."),
            (r"where `key_mask` is given;",
             "What differs in those cases is the target's padding: key_mask (B, N_t) is True at "
             "the decoder's real tokens and is the causal self-attention's key mask, "
             "self.self_attn(h, key_mask=key_mask, is_causal=is_causal)."),
        ),
        mutants=[
            Mutant("the decoder sees the future", _decoder_variant(causal=False),
                   "Your decoder's self-attention sees the future: position i may attend only to "
                   "positions j <= i (is_causal=True in self.self_attn)."),
            Mutant("causal mask inverted", _decoder_variant(inverted_causal=True,
                                                            sublayer_dropout=True),
                   "Your causal mask is inverted: it lets query i see the keys after it and "
                   "blocks itself and the keys before it (the last query sees nothing). "
                   "coursekit's masks are True where attention is allowed, j ≤ i, the opposite "
                   "of nn.MultiheadAttention's boolean masks: pass is_causal=is_causal to "
                   "self.self_attn, or attn_mask=torch.ones(N, N, dtype=torch.bool).tril()."),
            Mutant("cross-attention keys from the decoder", _decoder_variant(kv_from="decoder"),
                   "Your cross-attention takes its keys and values from the decoder: they come "
                   "from memory, the encoder's output; only the queries come from the decoder, "
                   "self.cross_attn(y, memory)."),
            Mutant("memory_mask ignored", _decoder_variant(use_memory_mask=False),
                   "Your cross-attention attends to the source's padding: pass memory_mask as "
                   "its key_mask."),
            Mutant("no residual around cross-attention", _decoder_variant(cross_residual=False),
                   "The cross-attention sub-layer has no residual connection: Y + MHA(·, memory)."),
            Mutant("Pre-LN normalises memory too", _decoder_variant(norm_memory=True),
                   "In Pre-LN only the decoder's stream is normalised before cross-attention "
                   "(norm2(Y)); memory comes in as the encoder left it."),
            *(Mutant(f"no dropout inside the {kind}-attention",
                     type("DecoderBlock", (_NoDecoderAttentionDropout,),
                          {"attention": f"{kind}_attn"}),
                     f"Your block's {kind}-attention drops none of its weights in training mode: "
                     f"build it as MultiHeadAttention(d_model, n_heads, dropout=dropout), as the "
                     f"given __init__ does (nn.TransformerDecoderLayer's attentions drop their "
                     f"weights with the same p).")
              for kind in ("self", "cross")),
        ],
    ),
]
