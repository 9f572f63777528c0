"""The one place where coursekit reaches into Hugging Face's internals, for every supported version.

The book reaches ``transformers`` through its public API where one exists (configs, models,
``forward``; ``LlamaConfig(rope_theta=...)`` is accepted by Transformers 4 and 5 alike). Some
chapters must go further: a weight port reads a model's submodules, a fidelity test calls
``T5Attention.compute_bias`` or CLIP's loss function, a notebook asks whether activation
checkpointing is on. Those names changed between Transformers 4.57 and 5.x; each function below
knows both layouts, and everything in coursekit, its tests and its notebooks goes through it, so
that a change in a future release is fixed here once.

Each function detects the layout from the object it is given (an attribute or a parameter name),
never from a version number: a release that backports a name is read correctly.
``tests/test_hf_compat.py`` checks every function against the installed ``transformers``, and
``python benchmarks/environments.py oldest|newest`` runs it at both ends of the supported range.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import torch
from torch import Tensor, nn

__all__ = ["EncoderLayer", "vit_layers", "t5_compute_bias", "clip_contrastive_loss",
           "activation_checkpointing"]


# ----------------------------------------------------------------------------- T5


def t5_compute_bias(attention: nn.Module, n_q: int, n_k: int, offset: int = 0) -> Tensor:
    """Hugging Face's ``T5Attention.compute_bias`` for ``n_q`` queries at positions
    ``offset, ..., offset + n_q - 1`` over ``n_k`` keys at positions ``0, ..., n_k - 1``
    -> (1, H, n_q, n_k). ``offset = n_k - n_q`` is cached decoding: the queries are the last
    positions.

    Transformers 5 takes the offset as ``past_seen_tokens``; Transformers 4 takes the queries'
    positions themselves as ``cache_position``."""
    parameters = inspect.signature(attention.compute_bias).parameters
    if "past_seen_tokens" in parameters:                                    # transformers 5
        return attention.compute_bias(n_q, n_k, past_seen_tokens=offset)
    if "cache_position" in parameters:                                      # transformers 4
        device = attention.relative_attention_bias.weight.device
        positions = torch.arange(offset, offset + n_q, dtype=torch.long, device=device)
        return attention.compute_bias(n_q, n_k, cache_position=positions)
    raise TypeError(f"T5Attention.compute_bias{inspect.signature(attention.compute_bias)}: "
                    "neither past_seen_tokens nor cache_position; coursekit.hf_compat needs updating")


# ----------------------------------------------------------------------------- ViT and CLIP encoders


class EncoderLayer(NamedTuple):
    """The modules of one Pre-LN encoder block of a Hugging Face ViT, ViTMAE or CLIP tower:
    W^Q, W^K, W^V, W^O, the norm before attention, the norm before the MLP, and the MLP's two
    linear maps (each an ``nn.Linear`` or ``nn.LayerNorm`` of the model, not a copy)."""

    q: nn.Linear
    k: nn.Linear
    v: nn.Linear
    o: nn.Linear
    norm1: nn.LayerNorm
    norm2: nn.LayerNorm
    fc1: nn.Linear
    fc2: nn.Linear


def _encoder_layer(layer: nn.Module) -> EncoderLayer:
    if hasattr(layer, "self_attn"):                       # CLIPEncoderLayer, Transformers 4 and 5
        a = layer.self_attn
        return EncoderLayer(a.q_proj, a.k_proj, a.v_proj, a.out_proj, layer.layer_norm1,
                            layer.layer_norm2, layer.mlp.fc1, layer.mlp.fc2)
    a = getattr(layer, "attention", None)
    if a is not None and hasattr(a, "q_proj"):            # ViTLayer / ViTMAELayer, Transformers 5
        return EncoderLayer(a.q_proj, a.k_proj, a.v_proj, a.o_proj, layer.layernorm_before,
                            layer.layernorm_after, layer.mlp.fc1, layer.mlp.fc2)
    if a is not None and hasattr(a, "attention"):         # ViTLayer / ViTMAELayer, Transformers 4
        s = a.attention
        return EncoderLayer(s.query, s.key, s.value, a.output.dense, layer.layernorm_before,
                            layer.layernorm_after, layer.intermediate.dense, layer.output.dense)
    raise TypeError(f"{type(layer).__name__}: an encoder layer of a layout coursekit.hf_compat "
                    "does not know")


def vit_layers(model: nn.Module) -> list[EncoderLayer]:
    """The encoder blocks of a Hugging Face ViT or CLIP tower, as :class:`EncoderLayer`\\ s, in order.

    ``model``: a ``ViTForImageClassification`` (its ``.vit`` is read), a ``ViTModel``, a
    ``ViTMAEModel``, a CLIP tower (``CLIPModel.vision_model`` or ``.text_model``), or the list of
    layers itself. Transformers 5 keeps a ViT's blocks in ``model.layers``, each attention with
    ``q_proj, k_proj, v_proj, o_proj`` and an ``mlp``; Transformers 4 in ``model.encoder.layer``,
    with ``attention.attention.query/key/value``, ``attention.output.dense``,
    ``intermediate.dense`` and ``output.dense``. CLIP's towers have ``encoder.layers`` in both."""
    if isinstance(model, nn.ModuleList):
        layers = model
    else:
        if hasattr(model, "vit"):                         # ViTForImageClassification and kin
            model = model.vit
        if hasattr(model, "layers"):                      # ViT, ViTMAE: Transformers 5
            layers = model.layers
        elif hasattr(model, "encoder") and hasattr(model.encoder, "layers"):  # CLIP towers
            layers = model.encoder.layers
        elif hasattr(model, "encoder") and hasattr(model.encoder, "layer"):   # ViT: Transformers 4
            layers = model.encoder.layer
        else:
            raise TypeError(f"{type(model).__name__}: no encoder layers where coursekit.hf_compat "
                            "looks for them (layers, encoder.layers, encoder.layer)")
    return [_encoder_layer(layer) for layer in layers]


def clip_contrastive_loss(logits_per_text: Tensor) -> Tensor:
    """The loss ``transformers.CLIPModel`` computes with ``return_loss=True`` from its
    ``logits_per_text``: the mean of the cross-entropy over the rows and over the columns.
    Transformers 5 names the function ``image_text_contrastive_loss``, Transformers 4
    ``clip_loss`` (both in ``transformers.models.clip.modeling_clip``)."""
    from transformers.models.clip import modeling_clip

    loss = getattr(modeling_clip, "image_text_contrastive_loss", None)   # transformers 5
    if loss is None:
        loss = modeling_clip.clip_loss                                     # transformers 4
    return loss(logits_per_text)


# ----------------------------------------------------------------------------- training


def activation_checkpointing(model: nn.Module) -> bool:
    """Whether a ``transformers`` model recomputes activations in the backward pass (gradient,
    or activation, checkpointing): ``model.is_activation_checkpointing`` in Transformers 5 (where
    ``is_gradient_checkpointing`` is its deprecated alias), ``model.is_gradient_checkpointing``
    in Transformers 4."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # 5's name first
        if hasattr(model, name):
            return bool(getattr(model, name))
    raise TypeError(f"{type(model).__name__} has neither is_activation_checkpointing nor "
                    "is_gradient_checkpointing")
