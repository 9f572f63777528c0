"""Chapter 8: coursekit's ViT and CLIP against Hugging Face, with ported weights.

The authorities are ``transformers.ViTForImageClassification`` and ``transformers.CLIPModel``,
built from small random configs (nothing is downloaded). Every weight is redrawn with a large
spread (std 0.5, LayerNorm gains 1 ± 0.5), so that a wrong activation, scale or norm changes the
outputs by far more than the tolerance.
"""

import random
import re

import pytest
import torch
import torch.nn.functional as F
import transformers  # the authority: a broken install fails these tests, never skips them
from torch import nn

from coursekit.data.scenes import DigitScenes, caption_words, position_words
from coursekit.grading.suites import ch08a, ch08b
from coursekit.models.clip import clip_from_hf, clip_loss
from coursekit.models.vit import ViT, attention_rollout, patchify, vit_from_hf

transformers.logging.set_verbosity_error()
TOL = dict(atol=1e-4, rtol=1e-4)


def spread_(module: nn.Module, seed: int = 0, skip: tuple[str, ...] = ()) -> nn.Module:
    """Every parameter but ``skip`` redrawn with std 0.5, LayerNorm gains 1 ± 0.5 (Hugging
    Face's names and coursekit's norm1, norm2, norm): a wrong norm, scale or position table
    changes the outputs by far more than the tolerance."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name in skip:
                continue
            noise = 0.5 * torch.randn(p.shape, generator=g)
            is_gain = re.search(r"(layer_?norm\w*|layrnorm|norm\d?)\.weight$", name)
            p.copy_(1 + noise if is_gain else noise)
    return module.eval()


# ----------------------------------------------------------------------------- patches


@pytest.mark.parametrize("shape,P", [((2, 1, 8, 8), 2), ((2, 3, 8, 12), 4), ((1, 2, 6, 6), 1)])
def test_patchify_is_unfold_and_the_patch_embedding_is_a_strided_conv(shape, P):
    x = torch.randn(shape)
    torch.testing.assert_close(patchify(x, P), F.unfold(x, P, stride=P).transpose(1, 2))
    conv = nn.Conv2d(shape[1], 16, P, stride=P)
    torch.testing.assert_close(patchify(x, P) @ conv.weight.flatten(1).T + conv.bias,
                               conv(x).flatten(2).transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_patchify_matches_hugging_face_patch_embedding():
    """HF's ViT patch embedding (a Conv2d) equals a linear map of coursekit's patches."""
    config = transformers.ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=16)
    hf = spread_(transformers.ViTModel(config, add_pooling_layer=False))
    proj = hf.embeddings.patch_embeddings.projection
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(patchify(x, 4) @ proj.weight.flatten(1).T + proj.bias,
                                   hf.embeddings.patch_embeddings(x), atol=1e-5, rtol=1e-5)


def test_patchify_rejects_indivisible_images():
    with pytest.raises(ValueError, match="not divisible"):
        patchify(torch.zeros(1, 1, 8, 8), 3)


# ----------------------------------------------------------------------------- ViT


@pytest.mark.parametrize("patch_size,channels,layers", [(2, 1, 2), (4, 3, 3)])
def test_vit_equals_hf_vit_for_image_classification(patch_size, channels, layers):
    config = transformers.ViTConfig(image_size=8, patch_size=patch_size, num_channels=channels,
                                    hidden_size=32, num_hidden_layers=layers,
                                    num_attention_heads=4, intermediate_size=48, num_labels=7)
    theirs = spread_(transformers.ViTForImageClassification(config))
    ours = vit_from_hf(theirs)
    x = torch.rand(6, channels, 8, 8)
    with torch.no_grad():
        expected, got = theirs(pixel_values=x).logits, ours(x)
    assert expected.abs().max() > 1, "the spread weights should give large logits"
    torch.testing.assert_close(got, expected, **TOL,
                               msg=lambda m: "ViT logits differ from Hugging Face's: check the "
                                             "packed q/k/v order, the exact GELU, ε = 1e-12, the "
                                             f"final LayerNorm and [CLS] at token 0. {m}")


def test_vit_from_hf_refuses_another_activation():
    config = transformers.ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=16,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=16, hidden_act="gelu_new")
    with pytest.raises(ValueError, match="exact GELU"):
        vit_from_hf(transformers.ViTForImageClassification(config))


def test_vit_attention_weights_and_rollout():
    model = ViT(8, 2, 1, 32, 4, 3, n_classes=10).eval()
    with torch.no_grad():
        _, weights = model.features(torch.rand(2, 1, 8, 8), need_weights=True)
    assert len(weights) == 3 and weights[0].shape == (2, 4, 17, 17)
    rollout = attention_rollout(weights)
    assert rollout.shape == (2, 17, 17)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 17))
    # with residual = 1 the rollout is the identity; with 0 the product of head-averaged maps
    torch.testing.assert_close(attention_rollout(weights, residual=1.0), torch.eye(17).expand(2, 17, 17))
    product = weights[2].mean(1) @ weights[1].mean(1) @ weights[0].mean(1)
    torch.testing.assert_close(attention_rollout(weights, residual=0.0), product)


# ----------------------------------------------------------------------------- CLIP

EOT = 5


def hf_clip(eos_token_id=EOT, act="gelu"):
    config = transformers.CLIPConfig(
        text_config=dict(vocab_size=24, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=12,
                         eos_token_id=eos_token_id, hidden_act=act),
        vision_config=dict(image_size=20, patch_size=5, num_channels=1, hidden_size=32,
                           intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           hidden_act=act),
        projection_dim=16)
    return spread_(transformers.CLIPModel(config), skip=("logit_scale",))


def captions(g, lengths, eot=EOT, n=10):
    ids = torch.randint(6, 24, (len(lengths), n), generator=g)
    for b, length in enumerate(lengths):
        ids[b, length - 1], ids[b, length:] = eot, 0  # EOT, then padding
    return ids


def features(output):
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def test_clip_equals_hf_clip_model():
    theirs = hf_clip()
    ours = clip_from_hf(theirs)
    g = torch.Generator().manual_seed(1)
    ids, images = captions(g, [3, 10, 6, 1, 8]), torch.rand(4, 1, 20, 20, generator=g)
    with torch.no_grad():
        out = theirs(input_ids=ids, pixel_values=images)
        image_hf = features(theirs.get_image_features(pixel_values=images))
        text_hf = features(theirs.get_text_features(input_ids=ids))
        torch.testing.assert_close(ours.encode_image(images), image_hf, **TOL,
                                   msg=lambda m: "image embeddings differ: pre-LayerNorm, "
                                                 f"bias-free patches, post-LayerNorm on [CLS]? {m}")
        torch.testing.assert_close(ours.encode_text(ids), text_hf, **TOL,
                                   msg=lambda m: "text embeddings differ: causal mask, pooling "
                                                 f"at the first end-of-text token? {m}")
        torch.testing.assert_close(ours(images, ids), out.logits_per_image, **TOL)
    assert out.logits_per_image.abs().max() > 1


def test_clip_loss_equals_hf_return_loss():
    theirs = hf_clip()
    g = torch.Generator().manual_seed(2)
    ids, images = captions(g, [4, 2, 7, 9]), torch.rand(4, 1, 20, 20, generator=g)
    with torch.no_grad():
        theirs.logit_scale.fill_(1.3)
        out = theirs(input_ids=ids, pixel_values=images, return_loss=True)
        image = features(theirs.get_image_features(pixel_values=images))
        text = features(theirs.get_text_features(input_ids=ids))
        torch.testing.assert_close(clip_loss(image, text, theirs.logit_scale), out.loss, **TOL)


def test_legacy_eos_id_pools_the_wrong_token():
    """With eos_token_id = 2, transformers pools at the largest id, not at the end-of-text token:
    a vocabulary whose end-of-text id is 2 (coursekit's Vocab) must not be ported as it is."""
    with pytest.raises(ValueError, match="eos_token_id"):
        clip_from_hf(hf_clip(eos_token_id=2))
    legacy = hf_clip(eos_token_id=2)  # the same weights as hf_clip(): same names, same seed
    ours = clip_from_hf(hf_clip())
    ours.text.eot_id = 2
    ids = captions(torch.Generator().manual_seed(3), [3, 6], eot=2)
    with torch.no_grad():
        assert not torch.allclose(features(legacy.get_text_features(input_ids=ids)),
                                  ours.encode_text(ids), **TOL)


def test_clip_suite_reference_is_hf_image_text_contrastive_loss():
    from coursekit.hf_compat import clip_contrastive_loss  # clip_loss in Transformers 4

    suite = ch08b.SUITES[0]
    for i in range(len(suite.cases)):
        image, text, scale = suite.inputs(i)
        logits_per_text = scale.exp() * F.normalize(text, dim=-1) @ F.normalize(image, dim=-1).T
        torch.testing.assert_close(suite.reference(image, text, scale),
                                   clip_contrastive_loss(logits_per_text), **TOL)


def test_patchify_suite_reference_is_unfold():
    suite = ch08a.SUITES[0]
    for i in range(len(suite.cases)):
        images, P = suite.inputs(i)
        torch.testing.assert_close(patchify(images, P), suite.reference(images, P))


# ----------------------------------------------------------------------------- data


def test_position_captions_and_excluded_pairs():
    assert position_words(1, 2) == ["top", "right"] and position_words(4, 3) == ["middle", "middle"]
    assert caption_words([7, 2], [0, 3], grid=2) == ["seven", "top", "left", "and", "two",
                                                     "bottom", "right"]
    scenes = DigitScenes(grid=2, cell=10, min_digits=1, max_digits=2, positions=True)
    exclude = {(d, d % 4) for d in range(10)}
    batch = scenes.sample(200, random.Random(0), exclude=exclude)
    assert all((label, cell) not in exclude for layout in batch.layouts for cell, label in layout)
    for b in range(5):
        cells, labels = zip(*batch.layouts[b], strict=True)
        assert batch.captions[b] == caption_words(list(labels), list(cells), grid=2)
        assert scenes.vocab.decode(batch.tgt_out[b], " ") == " ".join(batch.captions[b])
