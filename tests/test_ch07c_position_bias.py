"""Exercise 07.8's authority: the suite's reference is Hugging Face's ``T5Attention.compute_bias``
(with the queries offset by the cached positions, through ``coursekit.hf_compat.t5_compute_bias``
for Transformers 4 and 5), and coursekit's ``position_bias`` equals it, on spread-out tables."""

from __future__ import annotations

import os

import pytest
import torch
from torch.testing import assert_close

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import T5Config  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

from coursekit.grading.suites.ch07g import hf_position_bias  # noqa: E402
from coursekit.hf_compat import t5_compute_bias  # noqa: E402
from coursekit.positional import T5RelativeBias, position_bias  # noqa: E402


def compute_bias(table, n_q, n_k, bidirectional, max_distance):
    config = T5Config(vocab_size=8, d_model=8, d_kv=2, d_ff=8, num_layers=1,
                      num_heads=table.shape[1], relative_attention_num_buckets=table.shape[0],
                      relative_attention_max_distance=max_distance, is_decoder=not bidirectional)
    attention = T5Attention(config, has_relative_attention_bias=True)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(table)
    return t5_compute_bias(attention, n_q, n_k, offset=n_k - n_q)[0]


@pytest.mark.parametrize("buckets,heads,n_q,n_k,bidirectional,max_distance", [
    (32, 4, 40, 40, True, 128), (32, 4, 40, 40, False, 128), (16, 3, 1, 90, False, 20),
    (12, 5, 7, 30, False, 24), (8, 2, 60, 60, True, 16), (6, 1, 3, 5, True, 8),
])
def test_reference_and_coursekit_equal_hugging_face(buckets, heads, n_q, n_k, bidirectional,
                                                     max_distance):
    table = 0.5 * torch.randn(buckets, heads, generator=torch.Generator().manual_seed(buckets))
    expected = compute_bias(table, n_q, n_k, bidirectional, max_distance)
    assert expected.shape == (heads, n_q, n_k)
    assert_close(hf_position_bias(table, n_q, n_k, bidirectional, max_distance), expected,
                 rtol=0, atol=0)
    assert_close(position_bias(table, n_q, n_k, bidirectional, max_distance), expected,
                 rtol=0, atol=0)
    layer = T5RelativeBias(heads, bidirectional, buckets, max_distance)
    with torch.no_grad():
        layer.relative_attention_bias.weight.copy_(table)
    assert_close(layer.score_bias(n_q, n_k), expected, rtol=0, atol=0)


def test_top_left_queries_differ_when_a_cache_holds_positions():
    """The negative control: without an offset, Hugging Face puts the queries first,
    which the exercise's cached-decoding cases must tell apart."""
    table = 0.5 * torch.randn(16, 2, generator=torch.Generator().manual_seed(0))
    config = T5Config(vocab_size=8, d_model=8, d_kv=2, d_ff=8, num_layers=1, num_heads=2,
                      relative_attention_num_buckets=16, is_decoder=True)
    attention = T5Attention(config, has_relative_attention_bias=True)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(table)
    assert not torch.equal(t5_compute_bias(attention, 1, 9)[0], position_bias(table, 1, 9, False))
