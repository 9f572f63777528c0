"""Chapter 6: coursekit.transformer against its authorities, with ported weights.

LayerNorm against nn.LayerNorm and F.layer_norm; EncoderBlock/DecoderBlock against
nn.TransformerEncoderLayer/nn.TransformerDecoderLayer (batch_first=True), both norm placements,
with padding and causal masks; the whole EncoderDecoder against nn.Transformer. Every weight is
drawn with a large spread (std 0.5, LayerNorm gains around 1 ± 0.5), so a wrong activation, a
missing scale or a misplaced norm changes the outputs by far more than the tolerance.

torch's boolean masks mean "True = blocked" (key_padding_mask: True at padding); coursekit's
mean "True = allowed", so every comparison inverts them.
"""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from coursekit.attention import causal_mask, padding_mask
from coursekit.transformer import (
    Decoder,
    DecoderBlock,
    EncoderBlock,
    EncoderDecoder,
    FeedForward,
    LayerNorm,
    Seq2SeqTransformer,
)

TOL = dict(atol=1e-5, rtol=1e-5)
SPREAD = 0.5
D, H, FF = 16, 4, 32


def spread_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Redraw every parameter: gains (LayerNorm weights) 1 + 0.5·N(0, 1), the rest 0.5·N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g) * SPREAD
            p.copy_(1 + noise if re.search(r"norm\d?\.weight$", name) else noise)
    return module


def to_coursekit(state: dict) -> dict:
    """torch's parameter names -> coursekit's (the layouts are the same)."""
    out = {}
    for name, value in state.items():
        name = name.replace("multihead_attn.", "cross_attn.")
        name = re.sub(r"in_proj_(weight|bias)$", r"in_proj.\1", name)
        name = re.sub(r"(^|\.)linear([12])\.", r"\1ff.linear\2.", name)
        out[name] = value
    return out


def port(theirs: nn.Module, ours: nn.Module, seed: int = 0) -> None:
    spread_(theirs, seed)
    ours.load_state_dict(to_coursekit(theirs.state_dict()), strict=True)
    theirs.eval()
    ours.eval()


def close(actual, expected, what: str) -> float:
    err = (actual - expected).abs().max().item()
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")
    return err


def grads_close(ours: nn.Module, theirs: nn.Module, what: str) -> None:
    expected = to_coursekit({n: p.grad for n, p in theirs.named_parameters()})
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-4, rtol=1e-4,
                                   msg=lambda m, name=name: f"{what}, gradient of {name}: {m}")


# ----------------------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 16), (4, 1, 7, 32)])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_layer_norm_matches_torch(shape, eps):
    d = shape[-1]
    theirs = spread_(nn.LayerNorm(d, eps=eps))
    ours = LayerNorm(d, eps=eps)
    ours.load_state_dict(theirs.state_dict())
    x = (torch.randn(shape) * 3 + 1).requires_grad_()  # an offset and a scale to remove
    x2 = x.detach().clone().requires_grad_()
    y = ours(x)
    # eps = 0.3 is large enough that ε outside the root, or the unbiased variance, shows
    close(y, theirs(x2), "LayerNorm vs nn.LayerNorm (biased variance? ε inside the root? last axis?)")
    close(y, F.layer_norm(x2, (d,), theirs.weight, theirs.bias, eps), "LayerNorm vs F.layer_norm")
    mu = x.mean(-1, keepdim=True)  # the docstring's equation, written out
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    close(y, (x - mu) / torch.sqrt(var + eps) * theirs.weight + theirs.bias,
          "LayerNorm vs its equation (x − μ)/√(σ² + ε)·γ + β")
    g = torch.randn(shape)
    y.backward(g)
    theirs(x2).backward(g)
    torch.testing.assert_close(x.grad, x2.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, atol=1e-4, rtol=1e-4)


def test_layer_norm_defaults_are_torchs():
    ours, theirs = LayerNorm(6), nn.LayerNorm(6)
    assert ours.eps == theirs.eps == 1e-5, "the default ε must be nn.LayerNorm's, 1e-5"
    assert [n for n, _ in ours.named_parameters()] == ["weight", "bias"]
    torch.testing.assert_close(ours.weight, theirs.weight)
    torch.testing.assert_close(ours.bias, theirs.bias)


def test_layer_norm_normalises_each_token():
    x = torch.randn(3, 5, 64) * 4 + 2
    y = LayerNorm(64)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(3, 5), atol=1e-3, rtol=0)


# ----------------------------------------------------------------------------- feed-forward


@pytest.mark.parametrize("activation,phi", [("relu", F.relu), ("gelu", F.gelu)])
def test_feed_forward_is_position_wise(activation, phi):
    ff = spread_(FeedForward(D, FF, activation=activation)).eval()
    x = torch.randn(2, 5, D)
    expected = phi(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    close(ff(x), expected, f"FFN = W2 {activation}(W1 x + b1) + b2")
    # each position alone: the same as running the positions one by one
    close(ff(x), torch.cat([ff(x[:, i:i + 1]) for i in range(5)], dim=1), "FFN per position")


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="activation"):
        FeedForward(D, FF, activation="swishy")


# ----------------------------------------------------------------------------- blocks

MASKS = ["none", "padding", "causal", "padding+causal"]


def encoder_pair(norm_first, activation="relu", seed=0):
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation,
                                        batch_first=True, norm_first=norm_first)
    ours = EncoderBlock(D, H, FF, dropout=0.0, activation=activation, norm_first=norm_first)
    port(theirs, ours, seed)
    return theirs, ours


@pytest.mark.parametrize("masks", MASKS)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_torch(norm_first, activation, masks):
    theirs, ours = encoder_pair(norm_first, activation)
    B, N = 3, 6
    x = torch.randn(B, N, D, requires_grad=True)
    lengths = torch.tensor([6, 4, 2])
    key_mask = padding_mask(lengths, N) if "padding" in masks else None
    causal = "causal" in masks
    expected = theirs(x, src_mask=~causal_mask(N) if causal
                      else None, src_key_padding_mask=None if key_mask is None else ~key_mask,
                      is_causal=causal)
    what = (f"EncoderBlock ({'Pre' if norm_first else 'Post'}-LN, {activation}, {masks}) vs "
            "nn.TransformerEncoderLayer: check the residuals, where the norms sit, the "
            "activation and the masks")
    for need_weights in (False, True):  # the fused attention path and the explicit one
        out, weights = ours(x, key_mask=key_mask, is_causal=causal, need_weights=need_weights)
        close(out, expected, what)
        assert (weights is not None) == need_weights
    (out * torch.linspace(-1, 1, D)).sum().backward()
    x_grad = x.grad.clone()
    x.grad = None
    (expected * torch.linspace(-1, 1, D)).sum().backward()
    torch.testing.assert_close(x_grad, x.grad, atol=1e-4, rtol=1e-4)
    grads_close(ours, theirs, what)


def decoder_pair(norm_first, seed=0):
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True,
                                        norm_first=norm_first)
    ours = DecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first)
    port(theirs, ours, seed)
    return theirs, ours


@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch(norm_first, padding):
    theirs, ours = decoder_pair(norm_first)
    B, N_t, N_s = 3, 5, 7
    y = torch.randn(B, N_t, D, requires_grad=True)
    memory = torch.randn(B, N_s, D, requires_grad=True)
    tgt_mask = padding_mask(torch.tensor([5, 3, 4]), N_t) if padding else None
    src_mask = padding_mask(torch.tensor([7, 2, 5]), N_s) if padding else None
    expected = theirs(y, memory, tgt_mask=~causal_mask(N_t),
                      tgt_is_causal=True,
                      tgt_key_padding_mask=None if tgt_mask is None else ~tgt_mask,
                      memory_key_padding_mask=None if src_mask is None else ~src_mask)
    what = (f"DecoderBlock ({'Pre' if norm_first else 'Post'}-LN, padding={padding}) vs "
            "nn.TransformerDecoderLayer: causal self-attention, then cross-attention with queries "
            "from the decoder and keys/values from memory, then the FFN")
    for need_weights in (False, True):
        out, w_self, w_cross = ours(y, memory, key_mask=tgt_mask, memory_mask=src_mask,
                                    need_weights=need_weights)
        close(out, expected, what)
    assert w_self.shape == (B, H, N_t, N_t) and w_cross.shape == (B, H, N_t, N_s)
    assert (w_self.triu(1) == 0).all(), "the decoder's self-attention sees the future"
    if padding:
        assert (w_cross[1, :, :, 2:] == 0).all(), "cross-attention gives weight to source padding"
    g = torch.linspace(-1, 1, D)
    (out * g).sum().backward()
    grads = y.grad.clone(), memory.grad.clone()
    y.grad = memory.grad = None
    (expected * g).sum().backward()
    torch.testing.assert_close(grads[0], y.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grads[1], memory.grad, atol=1e-4, rtol=1e-4)
    grads_close(ours, theirs, what)


def test_decoder_block_cannot_see_the_future():
    _, ours = decoder_pair(norm_first=True)
    y, memory = torch.randn(2, 6, D), torch.randn(2, 4, D)
    changed = y.clone()
    changed[:, 3:] = torch.randn(2, 3, D)
    a, _, _ = ours(y, memory)
    b, _, _ = ours(changed, memory)
    close(a[:, :3], b[:, :3], "positions before 3 must not depend on positions 3 and later")
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-2


def test_encoder_block_with_is_causal_is_the_decoder_only_block():
    theirs, ours = encoder_pair(norm_first=True, activation="gelu")
    x = torch.randn(2, 5, D)
    mask = ~causal_mask(5)
    with torch.no_grad():
        close(ours(x, is_causal=True)[0], theirs(x, src_mask=mask, is_causal=True),
              "EncoderBlock(is_causal=True) vs a causal nn.TransformerEncoderLayer")


# ----------------------------------------------------------------------------- whole models


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_decoder_matches_nn_transformer(norm_first):
    kwargs = dict(d_model=D, nhead=H, num_encoder_layers=2, num_decoder_layers=3,
                  dim_feedforward=FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    theirs = nn.Transformer(**kwargs)
    ours = EncoderDecoder(D, H, 2, 3, FF, dropout=0.0, norm_first=norm_first, final_norm=True)
    port(theirs, ours, seed=1)
    B, N_s, N_t = 3, 7, 5
    src = torch.randn(B, N_s, D, requires_grad=True)
    tgt = torch.randn(B, N_t, D, requires_grad=True)
    src_mask = padding_mask(torch.tensor([7, 3, 5]), N_s)
    tgt_mask = padding_mask(torch.tensor([5, 5, 2]), N_t)
    expected = theirs(src, tgt, tgt_mask=~causal_mask(N_t),
                      src_key_padding_mask=~src_mask, tgt_key_padding_mask=~tgt_mask,
                      memory_key_padding_mask=~src_mask, tgt_is_causal=True)
    out = ours(src, tgt, src_key_mask=src_mask, tgt_key_mask=tgt_mask)
    close(out, expected, f"EncoderDecoder vs nn.Transformer ({'Pre' if norm_first else 'Post'}-LN)")
    g = torch.linspace(-1, 1, D)
    (out * g).sum().backward()
    grad = src.grad.clone()
    src.grad = None
    (expected * g).sum().backward()
    torch.testing.assert_close(grad, src.grad, atol=1e-4, rtol=1e-4)
    grads_close(ours, theirs, "EncoderDecoder vs nn.Transformer")


def test_final_norm_defaults_follow_the_norm_placement():
    assert EncoderDecoder(D, H, 1, 1, FF, norm_first=True).encoder.norm is not None
    assert EncoderDecoder(D, H, 1, 1, FF, norm_first=False).encoder.norm is None
    assert Decoder(1, D, H, FF, norm_first=True).norm is not None


def test_seq2seq_greedy_decoding_agrees_with_teacher_forcing():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(10, 12, d_model=D, n_heads=H, max_len=16).eval()
    src = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0]])  # the second is padded
    ids, cross = model.generate(src, max_len=6, bos_id=1, need_weights=True)
    assert ids.shape == (2, 6) and len(cross) == 2 and cross[0].shape == (2, H, 6, 4)
    assert (cross[-1][1, :, :, 2:] == 0).all(), "cross-attention must ignore source padding"
    logits = model(src, torch.cat([torch.ones(2, 1, dtype=torch.long), ids[:, :-1]], dim=1))
    assert torch.equal(logits.argmax(-1), ids)


def test_seq2seq_padding_does_not_change_the_output():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(10, 12, d_model=D, n_heads=H, max_len=16).eval()
    tgt = torch.tensor([[1, 5, 6]])
    short = model(torch.tensor([[4, 5, 6]]), tgt)
    padded = model(torch.tensor([[4, 5, 6, 0, 0]]), tgt)
    close(short, padded, "padding in the source must be invisible")


# ----------------------------------------------------------------------------- the chapter's symbols

def _chapter_formulas(stem):
    """Every formula in the markdown of solutions/<stem>.ipynb (inline code left out)."""
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "solutions" / f"{stem}.ipynb", as_version=4)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text = re.sub(r"```.*?```|`[^`\n]*`", "", cell.source, flags=re.S)
            for match in re.finditer(r"\$\$(.+?)\$\$|\$(.+?)\$", text, re.S):
                yield index, match.group(1) or match.group(2)


# Chapter 6's own symbols, beyond book/notation.md's table (tests/test_notation.py): a projection's
# bias is β (so the FFN's are β₁, β₂ and LayerNorm's shift is δ), the FFN is written for row
# vectors (x W₁), a layer is ℓ, the vocabulary |𝒱|, word subscripts upright.
CHAPTER_6_SPELLINGS = [
    (r"(?<![\\\w])b_\{?[12]\}?", "the FFN's biases are β₁, β₂ (book/notation.md's β)"),
    (r"\\beta_[ic]\b|\+ ?\\beta\s*\$?$", "LayerNorm's shift is δ; β is a projection's bias"),
    (r"W_\{?[12]\}? ?\\?\w*\(?\s*[xX]\b|W_2\\,\\varphi", "row vectors: φ(x W₁ + β₁) W₂ + β₂"),
    (r"d_\{ff\}", "d_\\text{ff}"),
    (r"2\(L ?- ?l\)|\\sum_l\b|layer \$l\$", "a layer is ℓ"),
]


@pytest.mark.parametrize("stem", ["06a_transformer_blocks", "06b_encoder_decoder"])
@pytest.mark.parametrize("pattern, why", CHAPTER_6_SPELLINGS, ids=lambda v: str(v)[:20])
def test_chapter_6_keeps_its_symbols(stem, pattern, why):
    found = [f"cell {i}: ${f.strip()[:60]}$" for i, f in _chapter_formulas(stem) if re.search(pattern, f)]
    assert not found, f"{why}:\n" + "\n".join(found)


def test_chapter_6_spelling_rules_catch_what_they_name():
    caught = [r"W_2\,\varphi(W_1 x + b_1) + b_2", r"\gamma_i\,\frac{x_i - \mu}{s} + \beta_i", r"d_{ff}",
              r"2(L - l)", r"\sum_l S_l"]
    fine = [r"\varphi(\boldsymbol{x}\boldsymbol{W}_1 + \boldsymbol{\beta}_1)\,"
            r"\boldsymbol{W}_2 + \boldsymbol{\beta}_2",
            r"\gamma_c\,\frac{x_c - \mu}{s} + \delta_c", r"d_\text{ff}", r"2(L - \ell)",
            r"\sum_{\ell=1}^{L}", r"\boldsymbol{\beta}", r"12d^2 + 13d"]
    for formula in caught:
        assert any(re.search(p, formula) for p, _ in CHAPTER_6_SPELLINGS), formula
    for formula in fine:
        assert not any(re.search(p, formula) for p, _ in CHAPTER_6_SPELLINGS), formula
