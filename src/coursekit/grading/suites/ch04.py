"""Chapter 4 — multi-head attention: ``split_heads``, ``merge_heads`` and ``MultiHeadAttention``.

The authority is ``torch.nn.MultiheadAttention``: the head layout of 04.1/04.2 is the one its
forward (``F.multi_head_attention_forward``) uses, and 04.3 is graded against the module itself,
loaded with the case's weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from coursekit import attention
from coursekit.grading.suite import (
    Backward,
    Case,
    Mutant,
    OutputError,
    Suite,
    backward,
    load_parameters,
)
from coursekit.grading.suites.attention_readings import (
    NAN_GRADIENT_READING,
    first_of,
    nan_gradient_observation,
    weights_observation,
    weights_readings,
)

# ----------------------------------------------------------------------------- 04.1 / 04.2


def torch_split_heads(x, n_heads):
    """(B, N, d_model) -> (B, H, N, d_head), cut the way nn.MultiheadAttention cuts its heads.

    Its forward works on (N, B, d_model) and reshapes to (N, B·H, d_head): batch-major, then head.
    """
    B, N, d_model = x.shape
    d_head = d_model // n_heads
    heads = x.transpose(0, 1).reshape(N, B * n_heads, d_head).transpose(0, 1)  # (B·H, N, d_head)
    return heads.reshape(B, n_heads, N, d_head)


def torch_merge_heads(x):
    """(B, H, N, d_head) -> (B, N, H·d_head), the inverse nn.MultiheadAttention applies."""
    B, H, N, d_head = x.shape
    out = x.reshape(B * H, N, d_head).transpose(0, 1).reshape(N, B, H * d_head)
    return out.transpose(0, 1)


def _split_case(B, N, d_model, n_heads):
    return lambda g: (torch.randn(B, N, d_model, generator=g), n_heads)


def _merge_case(B, H, N, d_head):
    return lambda g: (torch.randn(B, H, N, d_head, generator=g),)


def _split_no_transpose(x, n_heads):
    B, N, d_model = x.shape
    return x.reshape(B, n_heads, N, d_model // n_heads)


def _split_interleaved(x, n_heads):
    B, N, d_model = x.shape
    return x.reshape(B, N, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def _split_heads_last(x, n_heads):
    B, N, d_model = x.shape
    return x.reshape(B, N, n_heads, d_model // n_heads)


def _split_flat_heads(x, n_heads):
    """(B·H, N, d_head): the layout inside nn.MultiheadAttention, not the exercise's."""
    return torch_split_heads(x, n_heads).flatten(0, 1)


def _split_tokens(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)


def _split_d_head_64(x, n_heads):
    B, N, _ = x.shape
    return x.view(B, N, n_heads, 64).transpose(1, 2)


def _split_transpose_1_3(x, n_heads):
    B, N, d_model = x.shape
    return x.view(B, N, n_heads, d_model // n_heads).transpose(1, 3)


def _merge_no_transpose(x):
    B, H, N, d_head = x.shape
    return x.reshape(B, N, H * d_head)


def _merge_interleaved(x):
    B, H, N, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, N, d_head * H)


def _merge_mean(x):
    return x.mean(dim=1)


def _merge_sum(x):
    return x.sum(dim=1)


def _merge_along_tokens(x):
    return torch.cat(x.unbind(dim=1), dim=1)


def _merge_wrong_transpose(x):
    B, H, N, d_head = x.shape
    return x.transpose(2, 3).reshape(B, N, H * d_head)


def _merge_flatten_heads(x):
    return x.flatten(2)


# ----------------------------------------------------------------------------- 04.3


class TorchMultiheadAttention(nn.Module):
    """The authority: ``nn.MultiheadAttention`` behind the exercise's interface.

    The exercise's masks are True where attention is allowed; nn.MultiheadAttention's are True
    where it is blocked, so they are inverted here. ``load_state_dict`` takes the exercise's
    parameter names (``in_proj.weight``, ...) and maps them to torch's (``in_proj_weight``, ...).

    A query with no allowed key gets NaN from ``nn.MultiheadAttention``. The book's rule (that of
    ``F.scaled_dot_product_attention``) gives it zero weights, so its context is zero and its
    output is ``out_proj``'s bias: exactly those NaN rows are replaced, every other row is
    torch's own.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def load_state_dict(self, state, strict=True, assign=False):
        renamed = {"in_proj_weight": state["in_proj.weight"], "in_proj_bias": state["in_proj.bias"],
                   "out_proj.weight": state["out_proj.weight"],
                   "out_proj.bias": state["out_proj.bias"]}
        return self.mha.load_state_dict(renamed, strict=strict, assign=assign)

    def named_parameters(self, *args, **kwargs):
        """Under the exercise's names (``in_proj.weight``, ...): gradients are compared by name."""
        for name, p in super().named_parameters(*args, **kwargs):
            yield name.removeprefix("mha.").replace("in_proj_", "in_proj."), p

    def forward(self, x_q, x_kv=None, attn_mask=None, key_mask=None, is_causal=False,
                need_weights=False):
        x_kv = x_q if x_kv is None else x_kv
        (B, N_q, _), N_k = x_q.shape, x_kv.shape[1]
        blocked = None if attn_mask is None else ~attn_mask
        if is_causal:  # query i (the last aligned with the last key) sees keys ≤ i + N_k − N_q
            future = torch.ones(N_q, N_k, dtype=torch.bool, device=x_q.device).triu(N_k - N_q + 1)
            blocked = future if blocked is None else blocked | future
        if blocked is not None and blocked.dim() == 4:  # torch wants (B·H, N_q, N_k)
            blocked = blocked.expand(B, self.n_heads, N_q, N_k).reshape(-1, N_q, N_k)
        out, weights = self.mha(x_q, x_kv, x_kv, attn_mask=blocked,
                                key_padding_mask=None if key_mask is None else ~key_mask,
                                need_weights=need_weights, average_attn_weights=False)
        empty = torch.isnan(out).any(-1, keepdim=True)  # (B, N_q, 1): queries with no key
        out = torch.where(empty, self.mha.out_proj.bias, out)
        return out, None if weights is None else weights.nan_to_num(0.0)


def run_mha(cls, args):
    """Build ``cls(d_model, n_heads)``, load the case's weights, run it in eval mode.

    Returns the output, or (output, weights) when the case asks for the weights.
    """
    d_model, n_heads, W_in, b_in, W_out, b_out, x_q, x_kv, attn_mask, key_mask, is_causal, \
        need_weights = args
    module = cls(d_model, n_heads)
    load_parameters(module, {"in_proj.weight": W_in, "in_proj.bias": b_in,
                             "out_proj.weight": W_out, "out_proj.bias": b_out})
    module.eval()
    # trained through: the gradients of the output with respect to the inputs and to the four
    # parameters are compared too
    inputs, wrt = ((x_q,), {"x_q": 0}) if x_kv is None else ((x_q, x_kv), {"x_q": 0, "x_kv": 1})
    run = backward(module, inputs, wrt, dict(attn_mask=attn_mask, key_mask=key_mask,
                                             is_causal=is_causal, need_weights=need_weights),
                   params=True, first=1)
    result = run.value
    if not isinstance(result, tuple) or len(result) != 2:
        raise OutputError(f"forward returned a {type(result).__name__}; it should return the "
                          "tuple (output, weights)")
    return Backward(tuple(result) if need_weights else result[0], run.grads)


def _mha_case(d_model, n_heads, B, N_q, N_k=None, key_lengths=None, causal=False,
              attn_mask=False, need_weights=False, mask_4d=False):
    cross = N_k is not None
    N_k = N_k if cross else N_q

    def make(g):
        s = 1.5 / math.sqrt(d_model)  # scores of order one: neither uniform nor one-hot
        W_in = torch.randn(3 * d_model, d_model, generator=g) * s
        b_in = torch.randn(3 * d_model, generator=g) * 0.2
        W_out = torch.randn(d_model, d_model, generator=g) * s
        b_out = torch.randn(d_model, generator=g) * 0.2
        x_q = torch.randn(B, N_q, d_model, generator=g)
        x_kv = torch.randn(B, N_k, d_model, generator=g) if cross else None
        mask = None
        if attn_mask:  # random, but every row keeps one allowed and one blocked key
            mask = torch.rand(N_q, N_k, generator=g) < 0.5
            rows = torch.arange(N_q)
            mask[rows, rows % N_k] = True
            mask[rows, (rows + 1) % N_k] = False
            if mask_4d:  # (B, H, N_q, N_k): each example and head its own mask
                mask = torch.rand(B, n_heads, N_q, N_k, generator=g) < 0.5
                mask[..., rows, rows % N_k] = True
            if key_lengths is not None:  # key 0 is real everywhere: no row is fully masked
                mask[..., 0] = True
        keys = None
        if key_lengths is not None:
            keys = torch.arange(N_k) < torch.tensor(key_lengths)[:, None]
        return (d_model, n_heads, W_in, b_in, W_out, b_out, x_q, x_kv, mask, keys, causal,
                need_weights)

    return make


def _mha_variant(*, split=True, scale="d_head", softmax_dim=-1, key_mask_ok=True,
                 attn_mask_ok=True, causal="tril", use_kv=True, out_proj=True,
                 key_axes="(B, 1, 1, N_k)", in_bias=True, kv_swapped=False, q_from_kv=False,
                 combine="and", attn_mask_added=False, values_are_keys=False):
    """A wrong MultiHeadAttention, one bug switched on by the arguments."""

    class Variant(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.d_model, self.n_heads = d_model, n_heads
            self.in_proj = nn.Linear(d_model, 3 * d_model)
            self.out_proj = nn.Linear(d_model, d_model)

        def forward(self, x_q, x_kv=None, attn_mask=None, key_mask=None, is_causal=False,
                    need_weights=False):
            x_kv = x_q if (x_kv is None or not use_kv) else x_kv
            d, H = self.d_model, self.n_heads if split else 1
            W, b = self.in_proj.weight, self.in_proj.bias
            b = b if in_bias else torch.zeros_like(b)
            rows = [slice(d, 2 * d), slice(2 * d, None)]
            k_rows, v_rows = rows[::-1] if kv_swapped else rows
            q = attention.split_heads(F.linear(x_kv if q_from_kv else x_q, W[:d], b[:d]), H)
            k = attention.split_heads(F.linear(x_kv, W[k_rows], b[k_rows]), H)
            v = attention.split_heads(F.linear(x_kv, W[v_rows], b[v_rows]), H)
            v = k if values_are_keys else v
            d_scale = d if scale == "d_model" else q.shape[-1]
            scores = q @ k.transpose(-2, -1) / math.sqrt(d_scale)
            if attn_mask is not None and attn_mask_added:  # a bool mask used as a float bias
                scores = scores + attn_mask.float()
                attn_mask = None
            n_q, n_k = scores.shape[-2:]
            if combine == "replace":  # each mask given replaces the ones before it
                allowed = torch.ones(n_q, n_k, dtype=torch.bool)
                if is_causal:
                    allowed = allowed.tril(n_k - n_q)
                if attn_mask is not None:
                    allowed = attn_mask
                if key_mask is not None:
                    allowed = key_mask[:, None, None, :]
            elif combine == "or":  # every mask OR-ed onto an all-True start: nothing is masked
                allowed = torch.ones(n_q, n_k, dtype=torch.bool)
                if is_causal:
                    allowed = allowed.tril(n_k - n_q)
                if attn_mask is not None:
                    allowed = allowed | attn_mask
                if key_mask is not None:
                    allowed = allowed | key_mask[:, None, None, :]
            else:
                allowed = torch.ones_like(scores, dtype=torch.bool)
                if attn_mask is not None:
                    allowed = allowed & (attn_mask if attn_mask_ok else ~attn_mask)
                if key_mask is not None:
                    keys = key_mask if key_mask_ok else ~key_mask
                    allowed = allowed & {"(B, 1, 1, N_k)": keys[:, None, None, :],
                                         "(B, 1, N_k)": keys[:, None, :],
                                         "(B, 1, N_k, 1)": keys[:, None, :, None]}[key_axes]
                if is_causal and causal:
                    ones = torch.ones(n_q, n_k, dtype=torch.bool)
                    allowed = allowed & (ones.tril(n_k - n_q) if causal == "tril"
                                         else ones.tril() if causal == "top-left" else ones.triu())
            weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=softmax_dim)
            weights = weights.nan_to_num(0.0)  # one bug per variant: fully masked rows are right
            out = attention.merge_heads(weights @ v)
            return (self.out_proj(out) if out_proj else out), weights

    return Variant


SPLIT_CASES = [
    Case("by hand: B=1, N=2, d_model=4, H=2", _split_case(1, 2, 4, 2)),
    Case("B=2, N=5, d_model=12, H=3", _split_case(2, 5, 12, 3)),
    Case("B=3, N=4, d_model=32, H=8", _split_case(3, 4, 32, 8),
         hint="d_head = d_model / H = 4 here, and N = 4 too: keep the axes apart."),
]

MERGE_CASES = [
    Case("by hand: B=1, H=2, N=2, d_head=2", _merge_case(1, 2, 2, 2)),
    Case("B=2, H=3, N=5, d_head=4", _merge_case(2, 3, 5, 4)),
    Case("B=3, H=8, N=4, d_head=2", _merge_case(3, 8, 4, 2)),
]

MHA_CASES = [
    Case("self-attention, 1 head", _mha_case(8, 1, B=2, N_q=4)),
    Case("self-attention, 4 heads", _mha_case(16, 4, B=2, N_q=5)),
    Case("cross-attention, 3 queries over 6 keys", _mha_case(12, 3, B=2, N_q=3, N_k=6),
         hint="Queries come from x_q; keys and values from x_kv, which has its own length."),
    Case("key padding mask", _mha_case(16, 2, B=3, N_q=6, key_lengths=[2, 5, 4]),
         hint="key_mask (B, N_k) is True at real tokens: broadcast it as (B, 1, 1, N_k)."),
    Case("causal self-attention", _mha_case(16, 4, B=2, N_q=6, causal=True),
         hint="With is_causal, query i may attend to keys j <= i only."),
    Case("causal, 3 new queries after 3 cached keys", _mha_case(16, 4, B=2, N_q=3, N_k=6,
                                                               causal=True),
         hint="With fewer queries than keys (generation with a cache), the queries are the last "
              "N_q positions: query i sits at position i + N_k - N_q and sees keys "
              "j <= i + N_k - N_q, as causal_mask(N_q, N_k) builds it. A bare .tril() aligns "
              "to the top left (like F.scaled_dot_product_attention(is_causal=True))."),
    Case("attn_mask (True = may attend)", _mha_case(16, 4, B=2, N_q=5, attn_mask=True),
         hint="attn_mask is True where attention is allowed; fill the rest with -inf."),
    Case("attn_mask (B, H, N_q, N_k)",
         _mha_case(16, 4, B=2, N_q=5, attn_mask=True, mask_4d=True),
         hint="attn_mask may also be (B, H, N_q, N_k), one mask per example and head: combine it "
              "with the (B, H, N_q, N_k) scores elementwise, whatever its number of "
              "dimensions."),
    Case("attn_mask and key_mask together",
         _mha_case(16, 4, B=2, N_q=5, key_lengths=[5, 3], attn_mask=True),
         hint="Several masks can be given at once: a key is allowed only where every mask "
              "allows it. Combine them with & (each one must not replace the others)."),
    Case("causal and key_mask together",
         _mha_case(16, 2, B=3, N_q=6, key_lengths=[6, 4, 2], causal=True),
         hint="is_causal and key_mask together: a key is allowed only where both allow it. "
              "Combine the masks with &."),
    Case("a sequence whose keys are all padding", _mha_case(16, 2, B=2, N_q=4, N_k=5,
                                                             key_lengths=[5, 0]),
         hint="A query with no allowed key gets zero weights (so its heads output zeros and the "
              "layer returns out_proj's bias), never NaN: the book's masked softmax, as in "
              "Chapters 2 and 3."),
    Case("cross-attention + padding, weights returned",
         _mha_case(16, 4, B=2, N_q=3, N_k=5, key_lengths=[3, 4], need_weights=True),
         hint="Return (output, weights) with weights of shape (B, H, N_q, N_k), one map per head."),
]

SUITES = [
    Suite(
        exercise="04.1",
        name="split_heads",
        grad=("x",),
        points=2,
        reference=torch_split_heads,
        solution=attention.split_heads,
        cases=SPLIT_CASES,
        hint="View x as (B, N, H, d_head), then transpose(1, 2) to (B, H, N, d_head).",
        mutants=[
            Mutant("view without transpose", _split_no_transpose,
                   "Your heads mix positions: reshaping (B, N, d_model) straight to "
                   "(B, H, N, d_head) reads the memory in the wrong order. View as "
                   "(B, N, H, d_head) first, then transpose(1, 2)."),
            Mutant("(B·H, N, d_head) as inside nn.MultiheadAttention", _split_flat_heads,
                   "Your result is (B·H, N, d_head), the layout nn.MultiheadAttention uses inside "
                   "its forward: the exercise keeps the batch and the heads on axes of their "
                   "own, (B, H, N, d_head). View x as (B, N, H, d_head), then transpose(1, 2)."),
            Mutant("tokens split into heads", _split_tokens,
                   "Your heads cut the tokens (axis 1) into groups: every head keeps every token "
                   "and a block of d_head features of the last axis. View x as "
                   "(B, N, H, d_head), then transpose(1, 2)."),
            Mutant("d_head fixed at 64", _split_d_head_64,
                   "Your d_head is a constant (64, the paper's): compute it from the input, "
                   "d_head = d_model // n_heads."),
            Mutant("transpose(1, 3)", _split_transpose_1_3,
                   "You swapped axes 1 and 3 of (B, N, H, d_head), giving (B, d_head, H, N): "
                   "swap axes 1 and 2 (transpose(1, 2)) to get (B, H, N, d_head)."),
            Mutant("heads split along the wrong dimension", _split_interleaved,
                   "Each head must own a contiguous block of d_head features (head 0: features "
                   "0..d_head-1). Yours takes every H-th feature: split the last axis as "
                   "(H, d_head), not (d_head, H)."),
            Mutant("heads last", _split_heads_last,
                   "Your result is (B, N, H, d_head): transpose(1, 2) so that the head axis comes "
                   "before the positions and each head is a (N, d_head) sequence."),
        ],
    ),
    Suite(
        exercise="04.2",
        name="merge_heads",
        grad=("x",),
        points=2,
        reference=torch_merge_heads,
        solution=attention.merge_heads,
        cases=MERGE_CASES,
        hint="transpose(1, 2) back to (B, N, H, d_head), then reshape to (B, N, H * d_head).",
        mutants=[
            Mutant("reshape without transpose", _merge_no_transpose,
                   "You reshaped (B, H, N, d_head) straight to (B, N, d_model), which mixes "
                   "positions of different heads. transpose(1, 2) to (B, N, H, d_head) first, "
                   "then reshape (transpose makes it non-contiguous: use reshape, not view)."),
            Mutant("heads interleaved", _merge_interleaved,
                   "Concatenate whole heads: the first d_head features come from head 0, the "
                   "next d_head from head 1. Yours alternates heads feature by feature."),
            Mutant("heads summed", _merge_sum,
                   "Your heads are summed: they are concatenated, H · d_head = d_model features "
                   "per position (head 0's d_head first, then head 1's, ...), and W^O then mixes "
                   "them."),
            Mutant("heads concatenated along the tokens", _merge_along_tokens,
                   "You concatenated the heads along the tokens, giving (B, H·N, d_head): "
                   "concatenate them along the features, (B, N, H·d_head): transpose(1, 2), "
                   "then reshape."),
            Mutant("transpose(2, 3)", _merge_wrong_transpose,
                   "You swapped axes 2 and 3 (N and d_head): the heads are axis 1, so "
                   "transpose(1, 2) to (B, N, H, d_head), then reshape to (B, N, H·d_head)."),
            Mutant("each head flattened", _merge_flatten_heads,
                   "You flattened each head's (N, d_head) block, giving (B, H, N·d_head): "
                   "transpose(1, 2) first, so that the positions are axis 1, then reshape to "
                   "(B, N, H·d_head)."),
            Mutant("heads averaged", _merge_mean,
                   "The heads are concatenated, not averaged: the output has H · d_head = d_model "
                   "features per position, and W^O then mixes them."),
        ],
    ),
    Suite(
        exercise="04.3",
        name="MultiHeadAttention",
        points=5,
        reference=TorchMultiheadAttention,
        solution=attention.MultiHeadAttention,
        call=run_mha,
        arg_names=("d_model", "n_heads", "in_proj.weight", "in_proj.bias", "out_proj.weight",
                   "out_proj.bias", "x_q", "x_kv", "attn_mask", "key_mask", "is_causal",
                   "need_weights"),
        upstream=("split_heads", "merge_heads"),
        cases=MHA_CASES,
        hint="Project with in_proj (Q from x_q, K and V from x_kv), split into heads, "
             "softmax(QKᵀ/√d_head + mask) V per head, merge the heads, then apply out_proj.",
        mutants=[
            Mutant("missing output projection", _mha_variant(out_proj=False),
                   "Your output skips W^O: after merging the heads, apply self.out_proj. "
                   "MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O."),
            Mutant("scale by d_model", _mha_variant(scale="d_model"),
                   "You divide the scores by √d_model; each head works in d_head = "
                   "d_model / n_heads dimensions, so divide by √d_head."),
            Mutant("no head split", _mha_variant(split=False),
                   "Your attention is a single head of width d_model: split Q, K and V into "
                   "n_heads heads (split_heads), attend within each, then merge_heads."),
            Mutant("softmax over queries", _mha_variant(softmax_dim=-2),
                   "Your softmax runs over the queries (dim=-2). Each query's weights over the "
                   "keys must sum to one: softmax over the last dimension."),
            Mutant("key padding mask inverted", _mha_variant(key_mask_ok=False),
                   "Your padding mask is inverted: key_mask is True at real tokens (attention "
                   "allowed) and False at padding. nn.MultiheadAttention's key_padding_mask is "
                   "the opposite, so do not copy its convention."),
            Mutant("attn_mask inverted", _mha_variant(attn_mask_ok=False),
                   "Your attn_mask is inverted: in this book, as in F.scaled_dot_product_attention, "
                   "a boolean mask is True where attention is allowed."),
            Mutant("causal mask missing", _mha_variant(causal=None),
                   "is_causal=True is ignored: query i must not see later keys. Combine "
                   "causal_mask(N_q, N_k) (torch.ones(N_q, N_k).tril(N_k - N_q)) with the "
                   "others."),
            Mutant("causal mask transposed", _mha_variant(causal="triu"),
                   "Your causal mask is upper-triangular, so each query sees the future and not "
                   "the past. Keys j <= i are allowed: a lower triangle, "
                   "torch.ones(N_q, N_k).tril(N_k - N_q), not .triu()."),
            Mutant("causal mask aligned top-left", _mha_variant(causal="top-left"),
                   "Your causal mask is aligned to the top left: with fewer queries than keys, "
                   "query i is the token at position i + N_k - N_q and may see every key up to "
                   "there. Use causal_mask(N_q, N_k), i.e. .tril(N_k - N_q), not .tril()."),
            Mutant("x_kv ignored", _mha_variant(use_kv=False),
                   "In cross-attention the keys and values come from x_kv (the other sequence); "
                   "only the queries come from x_q."),
            Mutant("queries from x_kv", _mha_variant(q_from_kv=True),
                   "Your queries come from x_kv: in cross-attention Q is projected from x_q (the "
                   "sequence that asks), K and V from x_kv."),
            Mutant("key mask without the head axis", _mha_variant(key_axes="(B, 1, N_k)"),
                   "key_mask (B, N_k) must meet the (B, H, N_q, N_k) scores as (B, 1, 1, N_k), "
                   "key_mask[:, None, None, :]: key_mask[:, None, :] is (B, 1, N_k), which "
                   "lines the batch up with the heads."),
            Mutant("key mask on the query axis", _mha_variant(key_axes="(B, 1, N_k, 1)"),
                   "Your key_mask is laid along the queries (key_mask[:, None, :, None]): it "
                   "masks keys, the last axis of the scores, so broadcast it as (B, 1, 1, N_k), "
                   "key_mask[:, None, None, :]."),
            Mutant("each mask replaces the previous one", _mha_variant(combine="replace"),
                   "Each mask your layer is given replaces the ones before it: several masks "
                   "can be given at once, and a key is allowed only where every one allows it. "
                   "Combine them with & (allowed = allowed & mask)."),
            Mutant("values are the keys", _mha_variant(values_are_keys=True),
                   "Your values are the keys (v = k): V has its own projection, rows [2d, 3d) "
                   "of in_proj, F.linear(x_kv, W[2 * d:], b[2 * d:])."),
            Mutant("in_proj bias dropped", _mha_variant(in_bias=False),
                   "Your projections leave out in_proj's bias: Q, K and V are "
                   "F.linear(x, W[rows], b[rows]), each with its slice of in_proj.bias, as in "
                   "nn.MultiheadAttention."),
            Mutant("K and V rows swapped", _mha_variant(kv_swapped=True),
                   "Your keys use W^V's rows and your values W^K's: in_proj.weight stacks "
                   "W^Q, W^K, W^V in that order, rows [0, d), [d, 2d) and [2d, 3d)."),
            Mutant("masks combined with |", _mha_variant(combine="or"),
                   "Your masks are combined with | (or), so they let through what any of them "
                   "allows (and everything, from an all-True start): a key is allowed only "
                   "where every mask allows it, so combine them with &."),
            Mutant("boolean attn_mask added to the scores", _mha_variant(attn_mask_added=True),
                   "You add the boolean attn_mask to the scores (as 0/1): a boolean mask says "
                   "where attention is allowed, it is not a bias. Fill the scores with -inf "
                   "where it is False, combined with the other masks."),
        ],
        observe=first_of(nan_gradient_observation,
                         weights_observation(1, lambda ndim: {0: "the batch", 1: "the heads",
                                                              2: "the queries"}, "the keys")),
        readings=(NAN_GRADIENT_READING, *weights_readings("the keys")),
    ),
]
