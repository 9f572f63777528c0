"""Chapter 3's references against their PyTorch authorities.

scaled_dot_product_attention and chunked_attention against F.scaled_dot_product_attention (its
weights read off by attending to the identity matrix), causal_mask against torch.tril,
``is_causal`` and ``causal_lower_right``, SelfAttention against nn.MultiheadAttention with one
head, and the key-value recall generator.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right

from coursekit.attention import (
    SelfAttention,
    causal_mask,
    chunked_attention,
    masked_softmax,
    padding_mask,
    scaled_dot_product_attention,
)
from coursekit.data.recall import KeyValueRecall


def torch_weights(q, k, mask=None, is_causal=False):
    """The attention weights according to F.sdpa: with V = I the output is the weight matrix."""
    eye = torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-2], -1, -1)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask, is_causal=is_causal)


def qkv(*batch, n_q=5, n_k=7, d_k=8, d_v=6, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*batch, n_q, d_k, generator=g, dtype=dtype),
            torch.randn(*batch, n_k, d_k, generator=g, dtype=dtype),
            torch.randn(*batch, n_k, d_v, generator=g, dtype=dtype))


# ----------------------------------------------------------------------------- scaled dot product


@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
@pytest.mark.parametrize("n_q,n_k,d_k,d_v", [(1, 1, 1, 1), (5, 7, 8, 6), (7, 5, 64, 3)])
def test_sdpa_matches_torch(batch, n_q, n_k, d_k, d_v):
    q, k, v = qkv(*batch, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(weights, torch_weights(q, k))
    torch.testing.assert_close(weights.sum(-1), torch.ones(*batch, n_q))


def test_sdpa_with_boolean_masks_matches_torch():
    q, k, v = qkv(3, 2, n_q=4, n_k=6)
    g = torch.Generator().manual_seed(1)
    masks = {
        "random (B, H, N_q, N_k)": torch.rand(3, 2, 4, 6, generator=g) < 0.6,
        "padding (B, 1, 1, N_k)": padding_mask(torch.tensor([6, 3, 1]), 6)[:, None, None, :],
        "causal lower right (N_q, N_k)": causal_mask(4, 6),
    }
    masks["random (B, H, N_q, N_k)"][0, 0, 2] = False  # a row with nothing allowed: zeros
    for name, mask in masks.items():
        out, weights = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                   msg=name)
        torch.testing.assert_close(weights, torch_weights(q, k, mask), msg=name)
        assert torch.all(weights[~mask.expand_as(weights)] == 0), name
    _, weights = scaled_dot_product_attention(q, k, v, masks["random (B, H, N_q, N_k)"])
    assert torch.all(weights[0, 0, 2] == 0)


def test_sdpa_causal_matches_is_causal():
    q, k, v = qkv(2, n_q=6, n_k=6)
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(weights, torch_weights(q, k, is_causal=True))


def test_sdpa_masked_scores_get_no_weight_even_near_minus_1e6():
    # allowed scores are -1e6 - {0..3}: a -1e6 fill would give the masked key the most weight
    q = torch.zeros(1, 1, 16)
    q[..., 0] = 4000.0
    q[..., 1] = 4.0
    k = torch.zeros(1, 4, 16)
    k[..., 0] = -1000.0
    k[..., 1] = -torch.tensor([0.0, 1.0, 2.0, 3.0])
    v = torch.randn(1, 4, 3)
    mask = torch.tensor([[[False, True, True, True]]])
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = torch.softmax(torch.tensor([-1.0, -2.0, -3.0]), dim=0)
    torch.testing.assert_close(weights[0, 0], torch.cat([torch.zeros(1), expected]))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_masked_softmax_matches_torch_softmax():
    scores = torch.randn(4, 5, 6)
    mask = torch.rand(4, 5, 6, generator=torch.Generator().manual_seed(2)) < 0.5
    mask[:, :, 0] = True
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(masked_softmax(scores, mask), expected)
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1))
    mask[1, 2] = False
    assert torch.all(masked_softmax(scores, mask)[1, 2] == 0)


# ----------------------------------------------------------------------------- causal mask


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_causal_mask_is_tril_and_is_causal(n):
    mask = causal_mask(n)
    assert mask.dtype == torch.bool and mask.shape == (n, n)
    assert torch.equal(mask, torch.tril(torch.ones(n, n, dtype=torch.bool)))
    q = k = torch.zeros(1, 1, n, 1)  # equal scores: every allowed key gets positive weight
    assert torch.equal(mask, torch_weights(q, k, is_causal=True)[0, 0] > 0)


@pytest.mark.parametrize("n_q,n_k", [(1, 4), (3, 6), (6, 6)])
def test_causal_mask_rectangular_is_lower_right(n_q, n_k):
    expected = causal_lower_right(n_q, n_k)._materialize()
    assert torch.equal(causal_mask(n_q, n_k), expected)


# ----------------------------------------------------------------------------- SelfAttention


def port_to_mha(layer: SelfAttention, d_model: int) -> nn.MultiheadAttention:
    """One-head nn.MultiheadAttention with the layer's W_Q, W_K, W_V and W_O = I."""
    bias = layer.W_Q.bias is not None
    mha = nn.MultiheadAttention(d_model, 1, bias=bias, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.W_Q.weight, layer.W_K.weight, layer.W_V.weight]))
        mha.out_proj.weight.copy_(torch.eye(d_model))
        if bias:
            mha.in_proj_bias.copy_(torch.cat([layer.W_Q.bias, layer.W_K.bias, layer.W_V.bias]))
            mha.out_proj.bias.zero_()
    return mha.eval()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_self_attention_matches_one_head_multihead_attention(bias, masked):
    torch.manual_seed(0)
    d_model, N = 12, 7
    layer = SelfAttention(d_model, bias=bias)
    mha = port_to_mha(layer, d_model)
    x = torch.randn(3, N, d_model)
    mask = causal_mask(N) if masked else None
    out, weights = layer(x, mask)
    # nn.MultiheadAttention's boolean attn_mask is True where attention is *not* allowed
    ref_out, ref_weights = mha(x, x, x, attn_mask=None if mask is None else ~mask,
                               need_weights=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_self_attention_with_d_k_and_d_v_matches_torch():
    torch.manual_seed(0)
    layer = SelfAttention(16, d_k=4, d_v=6)
    assert layer.W_Q.weight.shape == layer.W_K.weight.shape == (4, 16)
    assert layer.W_V.weight.shape == (6, 16)
    x = torch.randn(2, 5, 16)
    mask = padding_mask(torch.tensor([5, 3]))[:, None, :]
    out, weights = layer(x, mask)
    q, k, v = (F.linear(x, W.weight) for W in (layer.W_Q, layer.W_K, layer.W_V))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(weights, torch_weights(q, k, mask))
    assert out.shape == (2, 5, 6) and weights.shape == (2, 5, 5)


def test_self_attention_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = SelfAttention(8)
    x = torch.randn(1, 6, 8)
    perm = torch.randperm(6)
    out, weights = layer(x)
    out_p, weights_p = layer(x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(weights_p, weights[:, perm][:, :, perm])


# ----------------------------------------------------------------------------- chunked attention


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 16, 100])
@pytest.mark.parametrize("causal", [False, True])
def test_chunked_attention_matches_torch(chunk_size, causal):
    q, k, v = qkv(2, 3, n_q=16, n_k=16, d_k=8, d_v=5)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(chunked_attention(q, k, v, chunk_size, causal=causal), expected)


@pytest.mark.parametrize("n_q,n_k", [(4, 11), (11, 4), (1, 9)])
@pytest.mark.parametrize("chunk_size", [1, 3, 64])
def test_chunked_attention_rectangular_causal_matches_torch(n_q, n_k, chunk_size):
    q, k, v = qkv(2, n_q=n_q, n_k=n_k, d_k=8, d_v=3)
    for causal in (False, True):
        mask = causal_mask(n_q, n_k) if causal else None
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        torch.testing.assert_close(chunked_attention(q, k, v, chunk_size, causal), expected)
        torch.testing.assert_close(chunked_attention(q, k, v, chunk_size, causal),
                                   scaled_dot_product_attention(q, k, v, mask)[0])


def test_chunked_attention_broadcasts_batch_dims():
    q, _, _ = qkv(2, 3, n_q=5)
    _, k, v = qkv(1, 3, n_k=9, seed=1)
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(chunked_attention(q, k, v, 4), expected)


def test_chunked_attention_is_stable_for_large_scores():
    q, k, v = qkv(2, n_q=6, n_k=10)
    q, k = q * 30, k * 30  # scores of a few hundred: exp would overflow without the running max
    out = chunked_attention(q, k, v, 3)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_chunked_attention_gradients():
    q, k, v = qkv(2, n_q=5, n_k=7, d_k=4, d_v=3, dtype=torch.float64)
    for t in (q, k, v):
        t.requires_grad_(True)
    for causal in (False, True):
        assert torch.autograd.gradcheck(
            lambda q, k, v, causal=causal: chunked_attention(q, k, v, 3, causal), (q, k, v))
    # and the gradients are F.sdpa's
    grad_out = torch.randn(2, 5, 3, dtype=torch.float64)
    mine = torch.autograd.grad(chunked_attention(q, k, v, 2, True), (q, k, v), grad_out)
    ref = torch.autograd.grad(
        F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5, 7)), (q, k, v), grad_out)
    for a, b in zip(mine, ref, strict=True):
        torch.testing.assert_close(a, b)


def test_chunked_attention_rejects_bad_chunk_size():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_attention(q, k, v, 0)


def test_chunked_attention_memory_is_linear_in_the_block():
    """Forward pass, no gradients: the largest tensor it builds is (N_q, C), never (N_q, N_k)."""
    q, k, v = qkv(n_q=64, n_k=64, d_k=8, d_v=8)
    largest = 0

    class Watch(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            nonlocal largest
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                largest = max(largest, out.numel())
            return out

    with Watch():
        chunked_attention(q, k, v, 8)
    assert largest == 64 * 8  # (N_q, C) scores or (N_q, d_v) accumulators; never 64 * 64
    largest = 0
    with Watch():
        scaled_dot_product_attention(q, k, v)
    assert largest == 64 * 64


# ----------------------------------------------------------------------------- recall data


def test_key_value_recall_batches():
    task = KeyValueRecall(n_keys=10, n_values=5, n_pairs=6)
    batch = task.sample(200, torch.Generator().manual_seed(0))
    assert batch.key_ids.shape == batch.value_ids.shape == (200, 7)
    pairs = batch.key_ids[:, :6]
    assert all(len(set(row.tolist())) == 6 for row in pairs)  # distinct keys
    assert batch.key_ids.max() < 10 and batch.value_ids[:, :6].max() < 5
    assert torch.all(batch.value_ids[:, 6] == task.query_id)
    rows = torch.arange(200)
    assert torch.equal(batch.key_ids[rows, batch.answer_pos], batch.key_ids[:, 6])
    assert torch.equal(batch.value_ids[rows, batch.answer_pos], batch.target)
    assert set(batch.answer_pos.tolist()) == set(range(6))  # the answer can sit anywhere
    again = task.sample(200, torch.Generator().manual_seed(0))
    assert torch.equal(again.key_ids, batch.key_ids) and torch.equal(again.target, batch.target)
    moved = batch.to(torch.device("meta"))  # every tensor moves (meta: a device with no data)
    assert all(t.device.type == "meta" for t in (moved.key_ids, moved.value_ids, moved.target,
                                                 moved.answer_pos))


def test_key_value_recall_rejects_bad_sizes():
    with pytest.raises(ValueError):
        KeyValueRecall(n_keys=4, n_pairs=5)
    with pytest.raises(ValueError):
        KeyValueRecall(n_values=0)



def saved_for_backward(fn, *inputs) -> int:
    """Bytes of the storages autograd saves for fn(*inputs)'s backward pass, the inputs excluded."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*inputs)
    own = {x.untyped_storage().data_ptr() for x in inputs}
    return sum(n for ptr, n in storages.items() if ptr not in own)


def test_chunked_attention_saves_every_block_for_backward():
    """Linear memory is the forward pass's only: with gradients, every (N_q, C) block is kept."""
    saved = {}
    for n in (256, 1024):
        q, k, v = qkv(1, 1, n_q=n, n_k=n, d_k=32, d_v=32)  # 4-D: (B, H, N, d) takes the fused kernel
        for t in (q, k, v):
            t.requires_grad_(True)
        saved[n] = {"chunked": saved_for_backward(lambda q, k, v: chunked_attention(q, k, v, 64), q, k, v),
                    "explicit": saved_for_backward(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
                                                   q, k, v),
                    "fused": saved_for_backward(F.scaled_dot_product_attention, q, k, v)}
    assert saved[1024]["chunked"] > 12 * saved[256]["chunked"]       # O(N²) kept, like ...
    assert saved[1024]["explicit"] > 12 * saved[256]["explicit"]     # ... the explicit path
    assert saved[1024]["chunked"] >= 4 * 1024 * 1024                 # at least N² floats in all
    assert saved[1024]["fused"] < 6 * saved[256]["fused"]            # output + log-sum-exp: O(N)
    assert saved[1024]["fused"] < saved[1024]["chunked"] / 50
