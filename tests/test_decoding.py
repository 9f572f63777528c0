"""Generation with a KV cache gives exactly what recomputing the whole sequence gives."""

import pytest
import torch

from coursekit.attention import KVCache, MultiHeadAttention
from coursekit.decoding import greedy
from coursekit.models.tiny_transformer import TinyTransformer


def test_cached_attention_equals_full_causal_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 7, 16)
    full, _ = mha(x, is_causal=True)
    cache, steps = KVCache(), []
    for chunk in (x[:, :3], x[:, 3:4], x[:, 4:]):  # a prompt, one token, then two at once
        out, _ = mha(chunk, is_causal=True, cache=cache)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-6, rtol=1e-5)
    assert len(cache) == 7


def test_greedy_with_and_without_cache_agree():
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=30, d_model=32, n_heads=4, n_layers=2, max_len=40)
    prompt = torch.randint(0, 30, (3, 5))
    with_cache = greedy(model, prompt, max_new_tokens=20, use_cache=True)
    without = greedy(model, prompt, max_new_tokens=20, use_cache=False)
    assert with_cache.shape == (3, 25)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache[:, :5], prompt)


def test_generation_past_max_len_is_refused():
    model = TinyTransformer(vocab_size=10, d_model=16, n_heads=2, n_layers=1, max_len=8)
    with pytest.raises(ValueError, match="longer than max_len"):
        greedy(model, torch.zeros(1, 4, dtype=torch.long), max_new_tokens=6)
