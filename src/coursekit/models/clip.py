"""CLIP (Radford et al., 2021): an image encoder and a text encoder trained to agree.

Both encoders map their input to one vector of a shared space of width d_embed:

- the image encoder is the ViT of :mod:`coursekit.models.vit` in CLIP's variant (a LayerNorm
  on the embedded patches before the first block, a bias-free patch projection), pooled at the
  ``[CLS]`` token after the final LayerNorm, then a linear projection without bias;
- the text encoder is a causal (GPT-style) Pre-LN transformer over the caption's tokens, pooled at
  the end-of-text token (the only position that has seen the whole caption), then a projection.

For a batch of B matching (image, caption) pairs, the B x B cosine similarities multiplied
by exp(logit_scale) = 1/τ, the inverse of a learned temperature τ, are logits: row i should pick
caption i among the B captions and column j image j among the B images. The loss is the mean of
the two cross-entropies (:func:`clip_loss`), the *symmetric contrastive loss*; logit_scale starts
at log(1/0.07). SigLIP's pairwise sigmoid loss (:func:`siglip_loss`) scores each pair on its own
instead. NegCLIP's loss (:func:`negclip_loss`) adds captions that match no image (hard negatives)
as extra columns.

Weight-compatible with ``transformers.CLIPModel`` (:func:`clip_from_hf`) when its towers use the
exact GELU (``hidden_act="gelu"``; CLIP's default is ``quick_gelu``) and its text config names
the end-of-text id (``eos_token_id``): transformers pools at the first ``eos_token_id``, except
for the legacy value 2, where it pools at the *largest* id in the sequence (CLIP's own BPE
vocabulary ends with its end-of-text token), a silent mistake for a small vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.models.vit import ViT, encoder_layers_from_hf
from coursekit.transformer import Encoder


def clip_loss(image_embeds: Tensor, text_embeds: Tensor, logit_scale: Tensor) -> Tensor:
    """The symmetric contrastive loss. image_embeds, text_embeds: (B, d_embed), pair i matching;
    logit_scale: a scalar, log(1/τ) (the temperature τ is exp(−logit_scale)) -> scalar loss.

    logits = exp(logit_scale) · norm(I) norm(T)ᵀ (B, B); loss = ½ [CE(logits, 0..B−1) + CE(logitsᵀ, 0..B−1)].
    """
    image_embeds = F.normalize(image_embeds, dim=-1)
    text_embeds = F.normalize(text_embeds, dim=-1)
    logits_per_image = logit_scale.exp() * image_embeds @ text_embeds.T  # (B, B): row = image
    targets = torch.arange(len(logits_per_image), device=logits_per_image.device)
    return (F.cross_entropy(logits_per_image, targets)
            + F.cross_entropy(logits_per_image.T, targets)) / 2


def negclip_loss(image_embeds: Tensor, text_embeds: Tensor, logit_scale: Tensor) -> Tensor:
    """The contrastive loss with hard-negative captions, as NegCLIP computes it (Yuksekgonul et
    al., 2023; the loss of their open_clip fork, ``vinid/neg_clip``).

    image_embeds: (B, d_embed); text_embeds: (B + M, d_embed), not normalised: caption i < B
    matches image i, and the M captions after them match no image (hard negatives, M >= 0);
    logit_scale: a scalar, log(1/τ) (the temperature τ is exp(−logit_scale)) -> scalar loss.

    logits_per_image = exp(logit_scale) · norm(I) norm(T)ᵀ (B, B + M): every negative is an extra column of
    every image's softmax. A negative has no caption→image term of its own (it has no image to
    pick), so the caption side keeps the B true captions:
    loss = ½ [CE(logits_per_image, 0..B−1) + CE(logits_per_image[:, :B]ᵀ, 0..B−1)].
    With M = 0 it is :func:`clip_loss`. (NegCLIP also adds hard-negative *images*, each with its
    caption and that caption's hard negative: with them in the inputs, the same function applies.)
    """
    n_images = len(image_embeds)
    if len(text_embeds) < n_images:
        raise ValueError(f"need at least one caption per image: {len(text_embeds)} captions, "
                         f"{n_images} images")
    image_embeds = F.normalize(image_embeds, dim=-1)
    text_embeds = F.normalize(text_embeds, dim=-1)
    logits_per_image = logit_scale.exp() * image_embeds @ text_embeds.T  # (B, B + M): row = image
    targets = torch.arange(n_images, device=logits_per_image.device)
    return (F.cross_entropy(logits_per_image, targets)
            + F.cross_entropy(logits_per_image[:, :n_images].T, targets)) / 2


def siglip_loss(image_embeds: Tensor, text_embeds: Tensor, logit_scale: Tensor,
                logit_bias: Tensor, per_pair: bool = False) -> Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al., 2023): every (image i, caption j) pair is its
    own binary problem, "do these two match?", with no softmax over the batch.

    image_embeds: (B_img, d_embed), text_embeds: (B_txt, d_embed), not normalised; image i matches
    caption i (any row or column beyond min(B_img, B_txt) is a negative for everyone);
    logit_scale: 0-d tensor, ln(1/τ); logit_bias: 0-d tensor b.

    logits S_ij + b = exp(logit_scale) cos(image i, caption j) + b; label z_ij = +1 if i == j else −1;
    term_ij = −log σ(z_ij (S_ij + b)). Returns the (B_img, B_txt) terms with ``per_pair=True``,
    else the terms summed over the captions and averaged over the images (the paper's 1/|B|),
    as big_vision's trainer and ``transformers.SiglipModel(return_loss=True)`` compute it.
    The paper initialises logit_scale = ln 10 and b = −10.
    """
    image_embeds = F.normalize(image_embeds, dim=-1)
    text_embeds = F.normalize(text_embeds, dim=-1)
    logits = logit_scale.exp() * image_embeds @ text_embeds.T + logit_bias  # (B_img, B_txt)
    labels = 2 * torch.eye(*logits.shape, device=logits.device, dtype=logits.dtype) - 1
    terms = -F.logsigmoid(labels * logits)                                  # (B_img, B_txt)
    return terms if per_pair else terms.sum() / len(terms)


def eot_pool(hidden: Tensor, ids: Tensor, eot_id: int) -> Tensor:
    """The text's embedding: each row's hidden state at its first end-of-text token.

    hidden: (B, N, d), ids: (B, N) long -> (B, d). Under the causal mask that position is the
    first to have read the whole text (as ``transformers``' CLIPTextTransformer pools for any
    ``eos_token_id`` but the legacy 2).
    """
    eot = (ids == eot_id).int().argmax(dim=-1)  # (B,): argmax returns the first maximum
    return hidden[torch.arange(len(ids), device=ids.device), eot]


class TextTransformer(nn.Module):
    """Token embeddings + learned positions, a causal Pre-LN encoder with a final LayerNorm,
    pooled at the first end-of-text token. ids: (B, N), each row holding ``eot_id`` once
    (padding after it cannot reach it through the causal mask) -> (B, d_model)."""

    def __init__(self, vocab_size: int, eot_id: int, max_len: int = 16, d_model: int = 64,
                 n_heads: int = 4, n_layers: int = 2, d_ff: int | None = None,
                 dropout: float = 0.0, activation: str = "gelu", eps: float = 1e-5) -> None:
        super().__init__()
        self.eot_id = eot_id
        self.token_embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Parameter(0.01 * torch.randn(max_len, d_model))
        self.dropout = nn.Dropout(dropout)
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff or 4 * d_model, dropout,
                               activation, norm_first=True, final_norm=True, eps=eps)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.dropout(self.token_embed(ids) + self.pos_embed[: ids.shape[1]])  # (B, N, d_model)
        h, _ = self.encoder(x, is_causal=True)
        return eot_pool(h, ids, self.eot_id)  # (B, d_model)


class CLIP(nn.Module):
    """Image and text encoders, their projections to d_embed, and the learned logit scale."""

    def __init__(self, vocab_size: int, eot_id: int, image_size: int = 20, patch_size: int = 5,
                 in_channels: int = 1, d_embed: int = 32, d_vision: int = 64,
                 vision_heads: int = 4, vision_layers: int = 2, d_text: int = 64,
                 text_heads: int = 4, text_layers: int = 2, max_len: int = 16,
                 eps: float = 1e-5, vision_ff: int | None = None,
                 text_ff: int | None = None) -> None:
        super().__init__()
        self.visual = ViT(image_size, patch_size, in_channels, d_vision, vision_heads,
                          vision_layers, vision_ff, n_classes=None, eps=eps, pre_norm=True,
                          patch_bias=False)
        self.text = TextTransformer(vocab_size, eot_id, max_len, d_text, text_heads, text_layers,
                                    text_ff, eps=eps)
        self.visual_projection = nn.Linear(d_vision, d_embed, bias=False)
        self.text_projection = nn.Linear(d_text, d_embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))  # exp(logit_scale) = 1/0.07

    def encode_image(self, images: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, d_embed), not normalised (HF's ``get_image_features``)."""
        return self.visual_projection(self.visual(images))

    def encode_text(self, ids: Tensor) -> Tensor:
        """(B, N) -> (B, d_embed), not normalised (HF's ``get_text_features``)."""
        return self.text_projection(self.text(ids))

    def forward(self, images: Tensor, ids: Tensor) -> Tensor:
        """-> logits_per_image (B_images, B_texts) = exp(logit_scale) · cosine similarities."""
        image = F.normalize(self.encode_image(images), dim=-1)
        text = F.normalize(self.encode_text(ids), dim=-1)
        return self.logit_scale.exp() * image @ text.T


def clip_from_hf(hf_model: nn.Module) -> CLIP:
    """A coursekit :class:`CLIP` carrying the weights of a ``transformers.CLIPModel`` whose
    towers use the exact GELU and whose text config sets ``eos_token_id`` (not the legacy 2)."""
    cfg, vc, tc = hf_model.config, hf_model.config.vision_config, hf_model.config.text_config
    for name, act in (("vision", vc.hidden_act), ("text", tc.hidden_act)):
        if act != "gelu":
            raise ValueError(f"the {name} tower uses {act!r}; coursekit's CLIP uses the exact GELU "
                             "(hidden_act='gelu')")
    if tc.eos_token_id == 2:
        raise ValueError("eos_token_id=2 makes transformers pool at the largest token id, not at "
                         "the end-of-text token: set text_config.eos_token_id explicitly")
    if vc.layer_norm_eps != tc.layer_norm_eps:
        raise ValueError("the two towers' layer_norm_eps differ")
    model = CLIP(tc.vocab_size, tc.eos_token_id, vc.image_size, vc.patch_size, vc.num_channels,
                 cfg.projection_dim, vc.hidden_size, vc.num_attention_heads, vc.num_hidden_layers,
                 tc.hidden_size, tc.num_attention_heads, tc.num_hidden_layers,
                 tc.max_position_embeddings, vc.layer_norm_eps, vc.intermediate_size,
                 tc.intermediate_size)
    v, t = hf_model.vision_model, hf_model.text_model
    state = {
        "visual.patch_embed.proj.weight": v.embeddings.patch_embedding.weight,
        "visual.cls_token": v.embeddings.class_embedding.view(1, 1, -1),
        "visual.pos_embed": v.embeddings.position_embedding.weight[None],
        "visual.pre_norm.weight": v.pre_layrnorm.weight, "visual.pre_norm.bias": v.pre_layrnorm.bias,
        # post_layernorm acts on the pooled [CLS] token; a LayerNorm acts on each token alone, so
        # it is the encoder's final norm followed by taking token 0.
        "visual.encoder.norm.weight": v.post_layernorm.weight,
        "visual.encoder.norm.bias": v.post_layernorm.bias,
        "text.token_embed.weight": t.embeddings.token_embedding.weight,
        "text.pos_embed": t.embeddings.position_embedding.weight,
        "text.encoder.norm.weight": t.final_layer_norm.weight,
        "text.encoder.norm.bias": t.final_layer_norm.bias,
        "visual_projection.weight": hf_model.visual_projection.weight,
        "text_projection.weight": hf_model.text_projection.weight,
        "logit_scale": hf_model.logit_scale,
    }
    state.update({f"visual.{k}": w for k, w in encoder_layers_from_hf(v).items()})
    state.update({f"text.{k}": w for k, w in encoder_layers_from_hf(t).items()})
    model.load_state_dict({k: w.detach().clone() for k, w in state.items()}, strict=True)
    return model.eval()
