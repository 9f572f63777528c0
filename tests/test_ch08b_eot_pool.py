"""Exercise 08.6's authority: the suite's reference is the pooling of ``transformers``'
``CLIPTextModel`` (``pooler_output``), and coursekit's ``eot_pool`` equals it; with the legacy
``eos_token_id = 2`` Hugging Face pools at the largest id instead (the negative control)."""

from __future__ import annotations

import os

import pytest
import torch
from torch.testing import assert_close

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import CLIPTextConfig, CLIPTextModel  # noqa: E402

from coursekit.grading.suites.ch08b import POOL_CASES, hf_eot_pool  # noqa: E402
from coursekit.models.clip import eot_pool  # noqa: E402


def text_model(eos_token_id: int) -> CLIPTextModel:
    torch.manual_seed(0)
    config = CLIPTextConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                            num_hidden_layers=1, num_attention_heads=2,
                            max_position_embeddings=16, eos_token_id=eos_token_id,
                            pad_token_id=0, bos_token_id=0)
    return CLIPTextModel(config).eval()


@pytest.mark.parametrize("index", range(len(POOL_CASES)), ids=lambda i: POOL_CASES[i].name[:40])
def test_reference_and_coursekit_pool_where_hugging_face_does(index):
    _, ids, eot_id = POOL_CASES[index].make(torch.Generator().manual_seed(index))
    assert eot_id != 2, "eos_token_id = 2 is Hugging Face's legacy rule (tested below)"
    model = text_model(eot_id)
    with torch.no_grad():
        out = model(input_ids=ids)
    expected = out.pooler_output
    assert_close(hf_eot_pool(out.last_hidden_state, ids, eot_id), expected, rtol=0, atol=0)
    assert_close(eot_pool(out.last_hidden_state, ids, eot_id), expected, rtol=0, atol=0)


def test_the_legacy_eos_id_2_pools_at_the_largest_id():
    ids = torch.tensor([[5, 2, 40, 40], [2, 9, 3, 0]])
    model = text_model(2)
    with torch.no_grad():
        out = model(input_ids=ids)
    rows = torch.arange(2)
    assert_close(out.pooler_output, out.last_hidden_state[rows, ids.argmax(-1)], rtol=0, atol=0)
    assert not torch.allclose(out.pooler_output, eot_pool(out.last_hidden_state, ids, 2))
