"""Chapter 7d: the modern decoder against Hugging Face's LlamaForCausalLM and Qwen2ForCausalLM.

The authorities are built locally from small random configs (grouped-query attention on, an odd
number of layers) and given coursekit's weights, drawn with std 0.5 so that a wrong activation,
norm or head grouping moves the logits far past the tolerance.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from coursekit.attention import KVCache, causal_mask
from coursekit.models.llama import (
    GroupedQueryAttention,
    Llama,
    SwiGLU,
    grouped_query_attention,
    hf_state_dict,
    kv_cache_numbers,
    llama_hidden_width,
    llama_parameters,
    repeat_kv,
    to_hf,
)
from coursekit.positional import RoPE
from coursekit.transformer import RMSNorm, rms_norm

os.environ.setdefault("HF_HUB_OFFLINE", "1")
VOCAB = 53


def spread_llama(dtype=torch.float32, seed=0, **kwargs) -> Llama:
    """A Llama (4 query heads, 2 key/value heads, 3 layers) whose every parameter, RMSNorm gains
    included, is drawn from N(0, 0.5²)."""
    shape = dict(d_model=32, n_heads=4, n_kv_heads=2, n_layers=3, d_ff=40) | kwargs
    torch.manual_seed(seed)
    model = Llama(VOCAB, **shape).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model.eval()


def _ids(shape, seed=1):
    return torch.randint(VOCAB, shape, generator=torch.Generator().manual_seed(seed))


# Hugging Face's RMSNorm computes in float32 whatever the input's dtype (LlamaRMSNorm casts to
# float32 and back), so in float64 the two agree to float32's precision in the norms, not better.
TOLERANCE = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float64: dict(atol=1e-5, rtol=1e-5)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("qkv_bias", [False, True], ids=["Llama", "Qwen2"])
def test_logits_equal_hugging_face(dtype, qkv_bias):
    model = spread_llama(dtype, qkv_bias=qkv_bias)
    hf = to_hf(model)
    assert type(hf).__name__ == ("Qwen2ForCausalLM" if qkv_bias else "LlamaForCausalLM")
    ids = _ids((3, 17))
    with torch.no_grad():
        ours, theirs = model(ids)[0], hf(ids).logits
    assert ours.dtype == theirs.dtype == dtype
    assert ours.abs().max() > 2 and ours.std() > 0.5, "std-0.5 weights should give spread logits"
    torch.testing.assert_close(ours, theirs, **TOLERANCE[dtype], msg=lambda m: (
        "Llama's logits differ from Hugging Face's on the same weights: check RMSNorm, SwiGLU's "
        "gate and up, the rotary pairs and the grouping of the heads.\n" + m))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("qkv_bias", [False, True], ids=["Llama", "Qwen2"])
def test_greedy_with_cache_equals_without_and_hf_generate(dtype, qkv_bias):
    model = spread_llama(dtype, seed=3, qkv_bias=qkv_bias)
    hf = to_hf(model)
    prompt = _ids((4, 5), seed=2)
    cached = model.generate(prompt, 14)
    plain = model.generate(prompt, 14, use_cache=False)
    theirs = hf.generate(prompt, max_new_tokens=14, do_sample=False, use_cache=True,
                         pad_token_id=0, attention_mask=torch.ones_like(prompt))
    assert cached.shape == (4, 19)
    assert torch.equal(cached, plain), "the KV cache must not change greedy decoding"
    assert torch.equal(cached, theirs), "greedy decoding must equal LlamaForCausalLM.generate()"
    assert len(set(cached[:, 5:].flatten().tolist())) > 3, "a degenerate continuation proves little"


def test_tied_embeddings_port_and_count():
    model = spread_llama(tie_embeddings=True, n_kv_heads=1)
    assert model.head.weight is model.tok.weight
    hf = to_hf(model)
    assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    ids = _ids((2, 11))
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0], hf(ids).logits, atol=1e-4, rtol=1e-4)
    for m in (model, spread_llama(), spread_llama(qkv_bias=True, n_kv_heads=4)):
        c = m.config
        counted = llama_parameters(c["vocab_size"], c["d_model"], c["n_heads"], c["n_kv_heads"],
                                   c["n_layers"], c["d_ff"], c["tie_embeddings"], c["qkv_bias"])
        assert counted == sum(p.numel() for p in m.parameters()) == to_hf(m).num_parameters()


@pytest.mark.parametrize("wrong", ["gate and up swapped", "heads tiled", "GELU gate"])
def test_a_wrong_part_would_be_caught(wrong):
    """The fidelity test's own tolerance catches each of these."""
    model = spread_llama()
    hf = to_hf(model)
    state = hf_state_dict(model)
    if wrong == "gate and up swapped":
        for i in range(3):
            g, u = f"model.layers.{i}.mlp.gate_proj.weight", f"model.layers.{i}.mlp.up_proj.weight"
            state[g], state[u] = state[u], state[g]
        hf.load_state_dict(state)
    elif wrong == "heads tiled":  # K/V head k read by query heads k, k + H_kv, ... instead of a group
        d_head = 8
        order = torch.tensor([0, 2, 1, 3])  # query heads (0, 1, 2, 3) -> (0, 2, 1, 3)
        rows = (order[:, None] * d_head + torch.arange(d_head)).flatten()
        for i in range(3):
            q, o = f"model.layers.{i}.self_attn.q_proj.weight", f"model.layers.{i}.self_attn.o_proj.weight"
            # permuting the query heads and W^O's columns alike changes nothing in multi-head
            # attention; with 2 groups it reassigns query heads to the other K/V head
            state[q], state[o] = state[q][rows], state[o][:, rows]
        hf.load_state_dict(state)
    else:
        for layer in hf.model.layers:
            layer.mlp.act_fn = torch.nn.GELU()
    ids = _ids((2, 16))
    with torch.no_grad(), pytest.raises(AssertionError):
        torch.testing.assert_close(model(ids)[0], hf(ids).logits, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- the parts


def test_rms_norm_equals_torch():
    g = torch.Generator().manual_seed(0)
    x = 3 * torch.randn(2, 5, 16, generator=g, dtype=torch.float64) + 2
    w = torch.randn(16, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rms_norm(x, w, 1e-5), F.rms_norm(x, (16,), w, 1e-5))
    module = RMSNorm(16, eps=1e-5).double()
    module.weight.data.copy_(w)
    torch.testing.assert_close(module(x), F.rms_norm(x, (16,), w, 1e-5))
    assert not torch.allclose(rms_norm(x, w), F.layer_norm(x, (16,), w, None, 1e-6), atol=1e-3)


def test_swiglu_equals_llama_mlp():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    mlp = SwiGLU(12, 20)
    theirs = LlamaMLP(LlamaConfig(hidden_size=12, intermediate_size=20, num_attention_heads=1))
    with torch.no_grad():
        for p in mlp.parameters():
            p.normal_(0.0, 0.5)
    theirs.load_state_dict(mlp.state_dict())
    x = torch.randn(3, 7, 12)
    torch.testing.assert_close(mlp(x), theirs(x))


def test_hidden_width_as_llama_rounds_it():
    assert llama_hidden_width(4096) == 11008  # Llama 7B
    assert llama_hidden_width(5120) == 13824  # Llama 13B
    assert llama_hidden_width(8192, multiple_of=4096, multiplier=1.3) == 28672  # Llama 2 70B
    for d in (64, 96, 768):  # three matrices of 2/3 · 4d hold about the GELU MLP's two of 4d
        width = llama_hidden_width(d, multiple_of=1)
        assert abs(3 * d * width / (2 * d * 4 * d) - 1) < 0.01


@pytest.mark.parametrize("n_kv_heads", [1, 2, 8])
def test_grouped_query_attention_equals_fused_and_hf_repeat_kv(n_kv_heads):
    from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv

    g = torch.Generator().manual_seed(n_kv_heads)
    q = torch.randn(2, 8, 3, 4, generator=g)
    k, v = torch.randn(2, n_kv_heads, 7, 4, generator=g), torch.randn(2, n_kv_heads, 7, 4, generator=g)
    torch.testing.assert_close(repeat_kv(k, 8 // n_kv_heads), hf_repeat_kv(k, 8 // n_kv_heads))
    mask = causal_mask(3, 7)  # three new queries after four cached positions
    out, weights = grouped_query_attention(q, k, v, mask)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, fused)
    assert weights.shape == (2, 8, 3, 7) and torch.allclose(weights.sum(-1), torch.ones(2, 8, 3))
    if 1 < n_kv_heads < 8:  # tiling the heads (repeat) pairs query heads with other K/V heads
        group = 8 // n_kv_heads
        tiled = F.scaled_dot_product_attention(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1),
                                               attn_mask=mask)
        assert not torch.allclose(tiled, out)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_cache_holds_h_kv_heads_and_the_explicit_path_agrees(n_kv_heads):
    torch.manual_seed(0)
    attn, rope = GroupedQueryAttention(32, 4, n_kv_heads).eval(), RoPE()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        whole, _ = attn(x, rope)
        explicit, weights = attn(x, rope, need_weights=True)
        cache, steps = KVCache(), []
        for t in range(9):
            steps.append(attn(x[:, t:t + 1], rope, cache)[0])
    torch.testing.assert_close(explicit, whole)
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-5, rtol=1e-5)
    assert torch.equal(weights[..., 0, 1:], torch.zeros(2, 4, 8)), "the first query sees itself only"
    numbers = (cache.k.numel() + cache.v.numel()) // (2 * 9)  # per token of the batch's 2 rows
    assert numbers == kv_cache_numbers(32, 4, n_kv_heads) == 2 * n_kv_heads * 8
