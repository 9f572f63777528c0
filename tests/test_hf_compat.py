"""coursekit.hf_compat against the installed ``transformers``, whichever supported version it is.

Each function is checked against Hugging Face's public API where there is one (a model's
``forward``, ``gradient_checkpointing_enable``), and on the layout's completeness where there is
not (every parameter of an encoder layer is reached exactly once). The same tests run at both ends
of the supported range (``python benchmarks/environments.py oldest|newest``).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers  # noqa: E402  the authority: a broken install fails these tests, never skips them
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

from coursekit.hf_compat import (  # noqa: E402
    EncoderLayer,
    activation_checkpointing,
    clip_contrastive_loss,
    t5_compute_bias,
    vit_layers,
)

transformers.logging.set_verbosity_error()


# ----------------------------------------------------------------------------- T5


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("n_q,n_k", [(5, 5), (1, 9), (3, 40)])
def test_t5_compute_bias_offsets_the_queries(is_decoder, n_q, n_k):
    config = transformers.T5Config(d_model=8, d_kv=2, num_heads=3, relative_attention_num_buckets=16,
                                   relative_attention_max_distance=24, is_decoder=is_decoder)
    attention = T5Attention(config, has_relative_attention_bias=True).eval()
    with torch.no_grad():
        attention.relative_attention_bias.weight.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
        full = attention.compute_bias(n_k, n_k)               # the two-argument call both majors share
        assert torch.equal(t5_compute_bias(attention, n_k, n_k), full)
        assert torch.equal(t5_compute_bias(attention, n_q, n_k), attention.compute_bias(n_q, n_k))
        cached = t5_compute_bias(attention, n_q, n_k, offset=n_k - n_q)
    assert cached.shape == (1, 3, n_q, n_k)
    assert torch.equal(cached, full[:, :, n_k - n_q:]), "the queries are the last n_q positions"


# ----------------------------------------------------------------------------- ViT and CLIP


def _small_vit_config(cls, **extra):
    return cls(image_size=8, patch_size=4, num_channels=1, hidden_size=16, num_hidden_layers=3,
               num_attention_heads=2, intermediate_size=24, **extra)


def _hf_clip():
    text = dict(vocab_size=20, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=8, eos_token_id=19, bos_token_id=18,
                pad_token_id=0)
    vision = dict(image_size=8, patch_size=4, num_channels=1, hidden_size=16, intermediate_size=24,
                  num_hidden_layers=3, num_attention_heads=2)
    return transformers.CLIPModel(transformers.CLIPConfig(text_config=text, vision_config=vision,
                                                          projection_dim=8)).eval()


def _check_layers(layers: list[EncoderLayer], hf_layers: nn.ModuleList, d: int, d_ff: int):
    assert len(layers) == len(hf_layers)
    for parts, layer in zip(layers, hf_layers, strict=True):
        for name in ("q", "k", "v", "o"):
            assert getattr(parts, name).weight.shape == (d, d), name
        assert parts.fc1.weight.shape == (d_ff, d) and parts.fc2.weight.shape == (d, d_ff)
        assert isinstance(parts.norm1, nn.LayerNorm) and isinstance(parts.norm2, nn.LayerNorm)
        reached = [id(p) for module in parts for p in module.parameters()]
        assert len(reached) == len(set(reached)), "a parameter is reached twice"
        assert set(reached) == {id(p) for p in layer.parameters()}, \
            "every parameter of the layer, and only those, is reached"


def _hf_layer_list(model):
    """The layer list itself, found by the parameter names (layout-free)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layer", "layers"):
            return module
    raise AssertionError("no layer list")


@pytest.mark.parametrize("kind", ["classifier", "model", "mae"])
def test_vit_layers_reach_every_parameter_of_every_block(kind):
    if kind == "mae":
        model = transformers.ViTMAEModel(_small_vit_config(transformers.ViTMAEConfig))
    elif kind == "model":
        model = transformers.ViTModel(_small_vit_config(transformers.ViTConfig), add_pooling_layer=False)
    else:
        model = transformers.ViTForImageClassification(_small_vit_config(transformers.ViTConfig))
    hf_layers = _hf_layer_list(model)
    _check_layers(vit_layers(model), hf_layers, 16, 24)
    assert vit_layers(hf_layers) == vit_layers(model), "the list of layers reads the same"


def test_vit_layers_of_both_clip_towers():
    model = _hf_clip()
    _check_layers(vit_layers(model.vision_model), model.vision_model.encoder.layers, 16, 24)
    _check_layers(vit_layers(model.text_model), model.text_model.encoder.layers, 16, 24)


def test_vit_layers_q_is_the_query_projection():
    """The modules are in their roles: the attention probabilities of HF's first block, computed
    from the q and k that vit_layers names, equal those HF returns."""
    model = transformers.ViTModel(_small_vit_config(transformers.ViTConfig), add_pooling_layer=False)
    model.config._attn_implementation = "eager"   # attention weights are returned by eager only
    model.eval()
    x = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        out = model(pixel_values=x, output_attentions=True, output_hidden_states=True)
        first = vit_layers(model)[0]
        h = first.norm1(out.hidden_states[0])                   # (B, N, d)
        q, k = (m(h).unflatten(-1, (2, 8)).transpose(1, 2) for m in (first.q, first.k))
        expected = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, dim=-1)
    torch.testing.assert_close(out.attentions[0], expected, atol=1e-6, rtol=1e-5)


def test_vit_layers_refuses_an_unknown_layout():
    with pytest.raises(TypeError, match="hf_compat"):
        vit_layers(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="hf_compat"):
        vit_layers(nn.ModuleList([nn.Linear(2, 2)]))


def test_clip_contrastive_loss_is_clip_models_return_loss():
    model = _hf_clip()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 18, (4, 6), generator=g)
    ids[:, -1] = 19                                              # the end-of-text token
    images = torch.rand(4, 1, 8, 8, generator=g)
    with torch.no_grad():
        out = model(input_ids=ids, pixel_values=images, return_loss=True)
        assert out.loss > 0
        torch.testing.assert_close(clip_contrastive_loss(out.logits_per_text), out.loss)
    logits = torch.randn(5, 5, generator=g)
    target = torch.arange(5)
    by_hand = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
    torch.testing.assert_close(clip_contrastive_loss(logits), by_hand)


# ----------------------------------------------------------------------------- training


def test_activation_checkpointing_follows_enable_and_disable():
    config = transformers.LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config)

    def checkpointing():
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)        # no deprecated alias is read
            return activation_checkpointing(model)

    assert checkpointing() is False
    with warnings.catch_warnings():   # Transformers 5 renames these activation_checkpointing_*
        warnings.simplefilter("ignore", FutureWarning)           # (what peft calls is the old name)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        assert checkpointing() is True
        model.gradient_checkpointing_disable()
    assert checkpointing() is False
    with pytest.raises(TypeError):
        activation_checkpointing(nn.Linear(2, 2))
