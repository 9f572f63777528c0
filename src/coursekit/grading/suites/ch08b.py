"""Chapter 8, notebook 08b (CLIP) — ``clip_loss``, the symmetric contrastive loss.

The reference is a line-by-line transcription of what ``transformers.CLIPModel`` computes with
``return_loss=True`` from its two towers' outputs (``get_image_features``,
``get_text_features``): normalise both, ``logits_per_text = exp(logit_scale) · T Iᵀ``, then
``image_text_contrastive_loss`` (the mean of the cross-entropy over the rows and over the
columns). It is kept free of the ``transformers`` import so that a check stays instant;
``tests/test_ch08_vit_clip.py`` proves it equal to the original on every case.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coursekit.grading.suite import Case, Mutant, Suite
from coursekit.models import clip


def hf_clip_loss(image_embeds, text_embeds, logit_scale):
    """transformers' CLIPModel.forward (return_loss=True) after the projections, transcribed."""
    image_embeds = image_embeds / image_embeds.pow(2).sum(dim=-1, keepdim=True).pow(0.5)
    text_embeds = text_embeds / text_embeds.pow(2).sum(dim=-1, keepdim=True).pow(0.5)
    logits_per_text = torch.matmul(text_embeds, image_embeds.t()) * logit_scale.exp()
    labels = torch.arange(len(logits_per_text))
    caption_loss = F.cross_entropy(logits_per_text, labels)
    image_loss = F.cross_entropy(logits_per_text.T, labels)
    return (caption_loss + image_loss) / 2.0


def _variant(*, normalise=True, exp=True, directions="both", reduce="mean", temperature=False):
    """A wrong loss, one bug switched on by the arguments."""

    def variant(image_embeds, text_embeds, logit_scale):
        if normalise:
            image_embeds = F.normalize(image_embeds, dim=-1)
            text_embeds = F.normalize(text_embeds, dim=-1)
        scale = logit_scale.exp() if exp else logit_scale
        logits = image_embeds @ text_embeds.T
        logits = logits / scale if temperature else logits * scale
        targets = torch.arange(len(logits))
        row, col = F.cross_entropy(logits, targets), F.cross_entropy(logits.T, targets)
        if directions == "images":
            return row
        return row + col if reduce == "sum" else (row + col) / 2

    return variant


def _diagonal_only(image_embeds, text_embeds, logit_scale):
    """The matching pairs' similarity pushed up, no negatives: −mean(exp(t)·cos(I_i, T_i))."""
    cos = F.cosine_similarity(image_embeds, text_embeds, dim=-1)
    return -(logit_scale.exp() * cos).mean()


def _case(B, d, *, scale=2.6593, norms=1.0, skew=False):
    def make(g):
        image = torch.randn(B, d, generator=g) * norms
        text = torch.randn(B, d, generator=g) * norms
        if skew:  # rows of very different lengths, and texts close to their images
            image = image * torch.linspace(0.1, 10, B)[:, None]
            text = 0.5 * text + image / image.norm(dim=-1, keepdim=True)
        return image, text, torch.tensor(scale)

    return make


CASES = [
    Case("B=4, d_embed=8, logit_scale = log(1/0.07)", _case(4, 8)),
    Case("B=6, d_embed=3: more pairs than dimensions", _case(6, 3)),
    Case("embeddings of very different lengths", _case(5, 8, skew=True),
         hint="Normalise both sets of embeddings to unit length first: the logits are cosine "
              "similarities, so the length of an embedding must not matter."),
    Case("logit_scale = 0 (temperature 1)", _case(4, 8, scale=0.0),
         hint="logit_scale is t, a logarithm: the logits are multiplied by exp(t), which is 1 "
              "when t = 0."),
    Case("logit_scale = 4.6 (the cap, exp(t) = 100)", _case(3, 16, scale=4.6052),
         hint="Multiply the cosine similarities by exp(logit_scale); dividing by it would be "
              "dividing by the inverse temperature."),
    Case("B=1: a single pair", _case(1, 8)),
    Case("B=7, unnormalised inputs of norm about 5", _case(7, 8, norms=5.0)),
]

SUITES = [
    Suite(
        exercise="08.2",
        name="clip_loss",
        points=3,
        reference=hf_clip_loss,
        solution=clip.clip_loss,
        cases=CASES,
        arg_names=("image_embeds", "text_embeds", "logit_scale"),
        grad=("image_embeds", "text_embeds", "logit_scale"),
        hint="Normalise I and T, logits = exp(t)·I Tᵀ (B x B), then the mean of the cross-entropy "
             "over the rows (each image picks its caption) and over the columns (each caption "
             "picks its image), with targets 0..B−1.",
        mutants=[
            Mutant("not normalised", _variant(normalise=False),
                   "Your logits use raw dot products. CLIP's are cosine similarities: divide each "
                   "embedding by its norm (F.normalize(x, dim=-1)) before the product."),
            Mutant("logit_scale used without exp", _variant(exp=False),
                   "logit_scale is stored as a logarithm, t = log(1/τ), so that it stays positive "
                   "while it learns: multiply by logit_scale.exp(), not by logit_scale."),
            Mutant("divided by the scale", _variant(temperature=True),
                   "You divide the similarities by exp(t). exp(t) = 1/τ is the inverse "
                   "temperature: multiply by it (dividing by τ)."),
            Mutant("one direction only", _variant(directions="images"),
                   "Your loss only asks each image to pick its caption. The loss is symmetric: "
                   "also each caption must pick its image (cross-entropy over the transposed "
                   "logits), and the two are averaged."),
            Mutant("sum of the two directions", _variant(reduce="sum"),
                   "The two cross-entropies are averaged, (L_image + L_text) / 2, not added."),
            Mutant("no negatives", _diagonal_only,
                   "Your loss only rewards the matching pairs. A contrastive loss also pushes the "
                   "B − 1 wrong pairings apart: a cross-entropy over each row and column of the "
                   "B x B logits."),
        ],
    ),
]
