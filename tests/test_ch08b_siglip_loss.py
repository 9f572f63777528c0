"""Chapter 8b: coursekit's ``siglip_loss`` against Hugging Face's ``SiglipModel``.

The authority is ``transformers.SiglipModel`` with ``return_loss=True`` (its loss lines are
adapted from big_vision's SigLIP trainer), built from a small random ``SiglipConfig`` (nothing is
downloaded). Every weight is redrawn with std 0.5 (LayerNorm gains 1 ± 0.5), so the embeddings
are widely spread and the pairs' logits reach both signs at several scales.
"""

from __future__ import annotations

import math
import os
import re

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers  # noqa: E402  the authority: a broken install fails these tests

from coursekit.models.clip import clip_loss, siglip_loss  # noqa: E402

transformers.logging.set_verbosity_error()
TOL = dict(atol=1e-5, rtol=1e-5)


def hf_siglip(seed: int = 0) -> transformers.SiglipModel:
    config = transformers.SiglipConfig(
        text_config=dict(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=8, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0),
        vision_config=dict(image_size=16, patch_size=4, num_channels=1, hidden_size=32,
                           intermediate_size=64, num_hidden_layers=2, num_attention_heads=4))
    model = transformers.SiglipModel(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in ("logit_scale", "logit_bias"):
                continue
            noise = 0.5 * torch.randn(p.shape, generator=g)
            p.copy_(1 + noise if re.search(r"layer_?norm\w*\.weight$", name) else noise)
    return model.eval()


def inputs(B: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 32, (B, 8), generator=g), torch.rand(B, 1, 16, 16, generator=g)


@pytest.mark.parametrize("B, scale, bias", [
    (5, math.log(10), -10.0),   # the paper's initialisation
    (4, 0.0, 0.0),              # tau = 1, no bias
    (6, math.log(100), 3.0),    # a sharp scale and a positive bias
    (1, 1.3, -2.0),             # a single pair: no negatives at all
])
def test_siglip_loss_equals_hf_siglip_model(B, scale, bias):
    model = hf_siglip()
    with torch.no_grad():
        model.logit_scale.fill_(scale)
        model.logit_bias.fill_(bias)
    ids, images = inputs(B, seed=B)
    out = model(input_ids=ids, pixel_values=images, return_loss=True)
    # the unnormalised embeddings that SiglipModel normalises before its logits
    image = model.vision_model(pixel_values=images).pooler_output
    text = model.text_model(input_ids=ids).pooler_output
    ours = siglip_loss(image, text, model.logit_scale[0], model.logit_bias[0])
    torch.testing.assert_close(ours, out.loss, **TOL)
    # the same gradients for the scale and the bias, and for a weight of each tower
    wrt = (model.logit_scale, model.logit_bias, model.vision_model.embeddings.patch_embedding.weight,
           model.text_model.embeddings.token_embedding.weight)
    for g_ours, g_hf in zip(torch.autograd.grad(ours, wrt, retain_graph=True),
                            torch.autograd.grad(out.loss, wrt), strict=True):
        torch.testing.assert_close(g_ours, g_hf, **TOL)
    # not normalised (lengths far from 1, so a missing normalisation would show), cosines of
    # both signs
    assert min(image.norm(dim=-1).min(), text.norm(dim=-1).min()) > 2, "spread embeddings"
    cos = torch.nn.functional.normalize(image, dim=-1) @ torch.nn.functional.normalize(text, dim=-1).T
    if B > 1:
        assert cos.min() < 0 < cos.max(), cos


def test_siglip_per_pair_terms_sum_to_the_loss_and_are_batch_independent():
    g = torch.Generator().manual_seed(7)
    image, text = 0.5 * torch.randn(4, 8, generator=g), 0.5 * torch.randn(5, 8, generator=g)
    scale, bias = torch.tensor(math.log(10)), torch.tensor(-10.0)
    terms = siglip_loss(image, text[:4], scale, bias, per_pair=True)                   # (4, 4)
    torch.testing.assert_close(terms.sum() / 4, siglip_loss(image, text[:4], scale, bias))
    # a fifth caption (a negative for every image) leaves the 16 existing terms unchanged ...
    assert torch.equal(siglip_loss(image, text, scale, bias, per_pair=True)[:, :4], terms)
    # ... where the softmax loss of the same 4 pairs has no such per-pair decomposition
    assert siglip_loss(image, text, scale, bias) > siglip_loss(image, text[:4], scale, bias)


def test_siglip_differs_from_clip_loss():
    """A negative control: the softmax (CLIP) loss on the same embeddings is another number."""
    g = torch.Generator().manual_seed(8)
    image, text = 0.5 * torch.randn(4, 8, generator=g), 0.5 * torch.randn(4, 8, generator=g)
    scale = torch.tensor(math.log(10))
    assert abs(siglip_loss(image, text, scale, torch.tensor(0.0)) - clip_loss(image, text, scale)) > 0.1
