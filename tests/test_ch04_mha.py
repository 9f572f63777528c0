"""Chapter 4: coursekit's MultiHeadAttention against nn.MultiheadAttention with ported weights.

nn.MultiheadAttention's masks mean "True = blocked" (key_padding_mask: True at padding);
coursekit's mean "True = allowed" (key_mask: True at real tokens), so every comparison inverts
them.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from coursekit.attention import (
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    padding_mask,
    split_heads,
)
from coursekit.models.tiny_transformer import TinyTransformer, next_token_loss

TOL = dict(atol=1e-5, rtol=1e-5)
PATHS = [False, True]  # need_weights: the fused F.scaled_dot_product_attention path, the explicit


def ported(d_model: int, n_heads: int, bias: bool = True, seed: int = 0):
    """A random nn.MultiheadAttention (the authority) and a coursekit copy with the same weights."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True).eval()
    ours = MultiHeadAttention(d_model, n_heads, bias=bias).eval()
    with torch.no_grad():
        ours.in_proj.weight.copy_(theirs.in_proj_weight)
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        if bias:
            ours.in_proj.bias.copy_(theirs.in_proj_bias)
            ours.out_proj.bias.copy_(theirs.out_proj.bias)
            # nn.MultiheadAttention starts its biases at zero: make them count
            for module in (theirs, ours):
                for name, b in module.named_parameters():
                    if "bias" in name:
                        b.add_(torch.linspace(-0.5, 0.5, b.numel()))
    return theirs, ours


def assert_max_abs(actual, expected, bound=1e-5):
    torch.testing.assert_close(actual, expected, **TOL)
    assert (actual - expected).abs().max().item() <= bound


@pytest.mark.parametrize("need_weights", PATHS)
@pytest.mark.parametrize("d_model,n_heads", [(8, 1), (16, 4), (32, 8), (24, 3)])
def test_self_attention_matches_torch(d_model, n_heads, need_weights):
    theirs, ours = ported(d_model, n_heads)
    x = torch.randn(3, 7, d_model)
    expected, expected_w = theirs(x, x, x, need_weights=True, average_attn_weights=False)
    out, weights = ours(x, need_weights=need_weights)
    assert_max_abs(out, expected)
    if need_weights:
        assert weights.shape == (3, n_heads, 7, 7)
        assert_max_abs(weights, expected_w)
    else:
        assert weights is None


@pytest.mark.parametrize("need_weights", PATHS)
def test_cross_attention_matches_torch(need_weights):
    theirs, ours = ported(16, 4)
    x_q, x_kv = torch.randn(2, 3, 16), torch.randn(2, 6, 16)
    expected, expected_w = theirs(x_q, x_kv, x_kv, average_attn_weights=False)
    out, weights = ours(x_q, x_kv, need_weights=need_weights)
    assert out.shape == (2, 3, 16)
    assert_max_abs(out, expected)
    if need_weights:
        assert_max_abs(weights, expected_w)


@pytest.mark.parametrize("need_weights", PATHS)
@pytest.mark.parametrize("cross", [False, True])
def test_key_padding_mask_matches_torch(cross, need_weights):
    theirs, ours = ported(16, 2)
    x_q = torch.randn(3, 5, 16)
    x_kv = torch.randn(3, 6, 16) if cross else x_q
    key_mask = padding_mask(torch.tensor([2, x_kv.shape[1], 4]), x_kv.shape[1])  # True = real
    expected, expected_w = theirs(x_q, x_kv, x_kv, key_padding_mask=~key_mask,
                                  average_attn_weights=False)
    out, weights = ours(x_q, None if not cross else x_kv, key_mask=key_mask,
                        need_weights=need_weights)
    assert_max_abs(out, expected)
    if need_weights:
        assert_max_abs(weights, expected_w)
        assert weights[0, :, :, 2:].abs().max() == 0  # padding gets exactly zero weight


@pytest.mark.parametrize("need_weights", PATHS)
def test_causal_mask_matches_torch(need_weights):
    theirs, ours = ported(16, 4)
    x = torch.randn(2, 6, 16)
    blocked = ~causal_mask(6)
    expected, expected_w = theirs(x, x, x, attn_mask=blocked, average_attn_weights=False)
    out, weights = ours(x, is_causal=True, need_weights=need_weights)
    assert_max_abs(out, expected)
    # the same mask given explicitly
    assert_max_abs(ours(x, attn_mask=causal_mask(6), need_weights=need_weights)[0], expected)
    if need_weights:
        assert_max_abs(weights, expected_w)
        assert torch.all(weights.masked_select(blocked) == 0)  # no weight on the future


@pytest.mark.parametrize("need_weights", PATHS)
def test_causal_and_padding_together_match_torch(need_weights):
    theirs, ours = ported(16, 4)
    x = torch.randn(2, 6, 16)
    key_mask = padding_mask(torch.tensor([6, 4]))
    expected, _ = theirs(x, x, x, attn_mask=~causal_mask(6), key_padding_mask=~key_mask)
    out, _ = ours(x, key_mask=key_mask, is_causal=True, need_weights=need_weights)
    assert_max_abs(out, expected)


@pytest.mark.parametrize("need_weights", PATHS)
def test_per_batch_attn_mask_matches_torch(need_weights):
    theirs, ours = ported(16, 4)
    x = torch.randn(2, 5, 16)
    allowed = torch.rand(2, 4, 5, 5, generator=torch.Generator().manual_seed(1)) < 0.6
    allowed |= torch.eye(5, dtype=torch.bool)  # every query sees at least itself
    expected, _ = theirs(x, x, x, attn_mask=~allowed.flatten(0, 1))  # torch wants (B*H, N, N)
    out, _ = ours(x, attn_mask=allowed, need_weights=need_weights)
    assert_max_abs(out, expected)


def test_need_weights_averaged_over_heads_matches_torch():
    theirs, ours = ported(16, 4)
    x_q, x_kv = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    key_mask = padding_mask(torch.tensor([5, 3]))
    _, averaged = theirs(x_q, x_kv, x_kv, key_padding_mask=~key_mask)  # default: mean over heads
    _, weights = ours(x_q, x_kv, key_mask=key_mask, need_weights=True)
    assert averaged.shape == (2, 4, 5)
    assert_max_abs(weights.mean(dim=1), averaged)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 4))


def test_without_biases_matches_torch():
    theirs, ours = ported(16, 4, bias=False)
    x = torch.randn(2, 5, 16)
    assert_max_abs(ours(x)[0], theirs(x, x, x)[0])


def test_gradients_match_torch_on_both_paths():
    theirs, ours = ported(16, 4)
    x = torch.randn(2, 5, 16)
    key_mask = padding_mask(torch.tensor([5, 3]))
    expected, _ = theirs(x, x, x, key_padding_mask=~key_mask, attn_mask=~causal_mask(5))
    expected.square().sum().backward()
    for need_weights in PATHS:
        ours.zero_grad()
        out, _ = ours(x, key_mask=key_mask, is_causal=True, need_weights=need_weights)
        out.square().sum().backward()
        torch.testing.assert_close(ours.in_proj.weight.grad, theirs.in_proj_weight.grad, **TOL)
        torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad, **TOL)


def test_both_paths_agree_and_stay_finite_on_a_fully_padded_row():
    _, ours = ported(16, 4)
    x = torch.randn(2, 4, 16)
    key_mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    fused, _ = ours(x, key_mask=key_mask)
    explicit, weights = ours(x, key_mask=key_mask, need_weights=True)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    torch.testing.assert_close(fused, explicit, **TOL)
    assert weights[1].abs().max() == 0  # nothing to attend to: zero weights, not NaN


@pytest.mark.parametrize("d_model", [64, 96])
def test_parameter_count_does_not_depend_on_the_number_of_heads(d_model):
    counts = {}
    for n_heads in (1, 2, 4, 8, 16, 32):
        if d_model % n_heads:
            continue
        counts[n_heads] = sum(p.numel() for p in MultiHeadAttention(d_model, n_heads).parameters())
        torch_count = sum(p.numel() for p in nn.MultiheadAttention(d_model, n_heads).parameters())
        assert counts[n_heads] == torch_count
    assert len(counts) >= 4
    # W^Q, W^K, W^V, W^O and their biases, however they are cut into heads
    assert set(counts.values()) == {4 * d_model * d_model + 4 * d_model}


def test_d_model_must_split_evenly_into_heads():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_split_heads_gives_each_head_a_contiguous_slice_of_features():
    B, N, H, d_head = 2, 5, 4, 3
    x = torch.randn(B, N, H * d_head)
    heads = split_heads(x, H)
    assert heads.shape == (B, H, N, d_head)
    for h in range(H):
        torch.testing.assert_close(heads[:, h], x[..., h * d_head:(h + 1) * d_head], rtol=0, atol=0)
    # the layout torch uses inside nn.MultiheadAttention: (N, B*H, d_head) from (N, B, H*d_head)
    torch_layout = x.transpose(0, 1).reshape(N, B * H, d_head).transpose(0, 1)
    torch.testing.assert_close(heads, torch_layout.reshape(B, H, N, d_head), rtol=0, atol=0)


def test_split_merge_round_trip():
    x = torch.randn(3, 7, 24)
    for n_heads in (1, 2, 3, 4, 6, 8, 12, 24):
        torch.testing.assert_close(merge_heads(split_heads(x, n_heads)), x, rtol=0, atol=0)
    heads = torch.randn(2, 4, 5, 6)
    torch.testing.assert_close(split_heads(merge_heads(heads), 4), heads, rtol=0, atol=0)
    # split_heads works on the non-contiguous chunks of a packed projection too
    q, _, _ = torch.randn(2, 5, 48).chunk(3, dim=-1)
    torch.testing.assert_close(merge_heads(split_heads(q, 4)), q, rtol=0, atol=0)


def test_eval_mode_disables_attention_dropout():
    _, ours = ported(16, 4)
    ours.dropout = 0.5
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(ours(x)[0], ours(x)[0], rtol=0, atol=0)
    # in training mode need_weights=True drops weights out, as nn.MultiheadAttention does, and
    # returns the weights it applied
    torch.manual_seed(0)
    out, weights = ours.train()(x, need_weights=True)
    _, kept = ours.eval()(x, need_weights=True)
    dropped = weights == 0
    assert dropped.any() and not dropped.all()
    torch.testing.assert_close(weights[~dropped], kept[~dropped] / (1 - 0.5))
    v = split_heads(ours.project(x, None)[2], 4)
    torch.testing.assert_close(out, ours.out_proj(merge_heads(weights @ v)))


def test_tiny_transformer_is_causal_and_returns_weights_per_layer():
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=11, d_model=16, n_heads=4, n_layers=3, max_len=8).eval()
    ids = torch.randint(3, 11, (2, 8))
    logits, weights = model(ids, need_weights=True)
    assert logits.shape == (2, 8, 11) and len(weights) == 3
    assert all(w.shape == (2, 4, 8, 8) for w in weights)
    assert all(torch.all(w.masked_select(~causal_mask(8)) == 0) for w in weights)
    fused, none = model(ids)
    assert none is None
    torch.testing.assert_close(fused, logits, **TOL)
    # changing a later token never changes an earlier prediction
    changed = ids.clone()
    changed[:, 5] = 3 + (ids[:, 5] - 2) % 8
    torch.testing.assert_close(model(changed)[0][:, :5], logits[:, :5], **TOL)
    assert next_token_loss(logits, ids).ndim == 0
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_next_token_loss_predicts_the_next_id_and_skips_padding():
    logits = torch.randn(2, 4, 7)
    ids = torch.tensor([[1, 5, 6, 2], [1, 3, 0, 0]])  # the second row is padded after 2 tokens
    expected = torch.stack([F.cross_entropy(logits[0, t], ids[0, t + 1]) for t in range(3)]
                           + [F.cross_entropy(logits[1, 0], ids[1, 1])]).mean()
    torch.testing.assert_close(next_token_loss(logits, ids, pad_id=0), expected)


def test_tiny_transformer_encoder_sees_both_directions_and_ignores_padding():
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=11, d_model=16, n_heads=2, n_layers=2, causal=False).eval()
    ids = torch.randint(3, 11, (1, 6))
    key_mask = torch.tensor([[True] * 4 + [False] * 2])
    logits, weights = model(ids, key_mask=key_mask, need_weights=True)
    assert weights[0][0, :, 0, 1:4].min() > 0  # the first token attends to later ones
    assert weights[0][..., 4:].abs().max() == 0  # nobody attends to padding
    other = ids.clone()
    other[0, 4:] = 3
    torch.testing.assert_close(model(other, key_mask=key_mask)[0][:, :4], logits[:, :4], **TOL)
