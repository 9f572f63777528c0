"""Chapter 8, notebook 08b (CLIP) — ``clip_loss``, the symmetric contrastive loss, and
``zero_shot_logits``, zero-shot classification logits with a prompt ensemble.

The reference is a line-by-line transcription of what ``transformers.CLIPModel`` computes with
``return_loss=True`` from its two towers' outputs (``get_image_features``,
``get_text_features``): normalise both, ``logits_per_text = exp(logit_scale) · T Iᵀ``, then
``image_text_contrastive_loss`` (the mean of the cross-entropy over the rows and over the
columns). It is kept free of the ``transformers`` import so that a check stays instant;
``tests/test_ch08_vit_clip.py`` proves it equal to the original on every case.

``zero_shot_logits``'s reference ensembles the prompts as CLIP does (Radford et al. 2021, §3.1.4:
each prompt's embedding normalised, averaged over the prompts, the mean renormalised), then
applies the ``logits_per_image`` lines of ``transformers.CLIPModel.forward``, transcribed, to the
images and the class embeddings. It is also the function the chapter falls back on.
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


# ----------------------------------------------------------------------------- 08.5 zero_shot_logits


def _norm(x):
    """transformers' ``_get_vector_norm`` (modeling_clip.py): the L2 norm along the last axis."""
    return torch.pow(torch.sum(torch.pow(x, 2), dim=-1, keepdim=True), 0.5)


def hf_zero_shot_logits(image_embeds, prompt_embeds, logit_scale):
    """Zero-shot logits with a prompt ensemble. image_embeds: (B, d_embed); prompt_embeds:
    (C, P, d_embed), P prompts for each of C classes; logit_scale: 0-d tensor t -> (B, C).

    The prompt ensemble of CLIP (Radford et al. 2021, §3.1.4; OpenAI's zero-shot notebook):
    every prompt's embedding normalised, averaged over the P prompts (the class embedding,
    renormalised below). Then the lines of ``transformers.CLIPModel.forward`` that make
    ``logits_per_image``, transcribed, with the class embeddings as its ``text_embeds``. This
    reference is also the suite's ``solution``: the function the chapter falls back on.
    """
    prompt_embeds = prompt_embeds / _norm(prompt_embeds)
    text_embeds = prompt_embeds.mean(dim=1)                      # (C, d_embed)
    # transformers.CLIPModel.forward, from "normalized features" to logits_per_image
    image_embeds = image_embeds / _norm(image_embeds)
    text_embeds = text_embeds / _norm(text_embeds)
    logits_per_text = torch.matmul(text_embeds, image_embeds.t().to(text_embeds.device))
    logits_per_text = logits_per_text * logit_scale.exp().to(text_embeds.device)
    logits_per_image = logits_per_text.t()
    return logits_per_image


def _zero_shot_variant(*, normalise_prompts=True, renormalise=True, normalise_images=True,
                       exp=True, softmax=False):
    """Wrong zero-shot logits, one bug switched on by the arguments."""

    def variant(image_embeds, prompt_embeds, logit_scale):
        if normalise_prompts:
            prompt_embeds = F.normalize(prompt_embeds, dim=-1)
        classes = prompt_embeds.mean(dim=1)
        if renormalise:
            classes = F.normalize(classes, dim=-1)
        if normalise_images:
            image_embeds = F.normalize(image_embeds, dim=-1)
        logits = (logit_scale.exp() if exp else logit_scale) * image_embeds @ classes.T
        return logits.softmax(dim=-1) if softmax else logits

    return variant


def _zero_shot_case(B, C, P, d, *, scale=2.6593, prompt_lengths=False, image_lengths=False):
    def make(g):
        classes = torch.randn(C, 1, d, generator=g)
        prompts = classes + 0.8 * torch.randn(C, P, d, generator=g)  # a class's prompts agree
        images = torch.randn(B, d, generator=g)
        if prompt_lengths:  # within each class, prompts from 0.05 to 20 times as long
            prompts = prompts * torch.logspace(-1.3, 1.3, C * P).reshape(C, P, 1)
        if image_lengths:   # images from 0.05 to 20 times as long
            images = images * torch.logspace(-1.3, 1.3, B)[:, None]
        return images, prompts, torch.tensor(scale)

    return make


ZERO_SHOT_CASES = [
    Case("B=6 images, C=5 classes, P=4 prompts, d_embed=8, logit_scale = log(1/0.07)",
         _zero_shot_case(6, 5, 4, 8)),
    Case("P=1: one prompt per class", _zero_shot_case(5, 4, 1, 8),
         hint="With one prompt per class the class embedding is that prompt's embedding, "
              "normalised: average over the prompt axis (dim=1) of the (C, P, d_embed) tensor."),
    Case("C=2 classes, B=1 image", _zero_shot_case(1, 2, 3, 6)),
    Case("prompt embeddings of very different lengths", _zero_shot_case(4, 3, 4, 8,
                                                                       prompt_lengths=True),
         hint="Normalise every prompt embedding before averaging: a long prompt must not "
              "outweigh a short one in its class's ensemble."),
    Case("image embeddings of very different lengths", _zero_shot_case(6, 3, 2, 8,
                                                                      image_lengths=True),
         hint="Normalise the image embeddings too: the logits are cosine similarities, so the "
              "length of an image's embedding must not matter."),
    Case("logit_scale = 0 (temperature 1)", _zero_shot_case(3, 4, 2, 8, scale=0.0),
         hint="logit_scale is t, a logarithm: the cosine similarities are multiplied by exp(t), "
              "which is 1 when t = 0."),
    Case("logit_scale = 4.6 (the cap, exp(t) = 100)", _zero_shot_case(4, 6, 3, 16, scale=4.6052),
         hint="Multiply the cosine similarities by exp(logit_scale), the inverse temperature "
              "(100 here), not by logit_scale and not by its inverse."),
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
    Suite(
        exercise="08.5",
        name="zero_shot_logits",
        points=2,
        reference=hf_zero_shot_logits,
        solution=hf_zero_shot_logits,
        cases=ZERO_SHOT_CASES,
        arg_names=("image_embeds", "prompt_embeds", "logit_scale"),
        grad=("image_embeds", "prompt_embeds", "logit_scale"),
        hint="Normalise each prompt embedding along its last axis, average over the P prompts of "
             "each class (dim=1), normalise the mean again: one unit vector per class, (C, "
             "d_embed). Normalise the images, and return exp(t) times the cosine similarities, "
             "(B, C), one row per image.",
        mutants=[
            Mutant("prompts averaged before normalising", _zero_shot_variant(normalise_prompts=False),
                   "You average the raw prompt embeddings, so a long embedding outweighs a short "
                   "one in its class's ensemble. CLIP normalises each prompt's embedding first "
                   "(F.normalize(prompt_embeds, dim=-1)), then averages."),
            Mutant("class embedding not renormalised", _zero_shot_variant(renormalise=False),
                   "The mean of P unit vectors is shorter than 1 (the more the prompts disagree, "
                   "the shorter), so your logits are not cosine similarities: normalise each "
                   "class's mean embedding again."),
            Mutant("images not normalised", _zero_shot_variant(normalise_images=False),
                   "Your logits grow with the length of each image's embedding: normalise the "
                   "image embeddings as well (F.normalize(image_embeds, dim=-1)), so that the "
                   "logits are exp(t) times cosine similarities."),
            Mutant("logit_scale used without exp", _zero_shot_variant(exp=False),
                   "logit_scale is stored as a logarithm, t = log(1/τ): multiply by "
                   "logit_scale.exp(), not by logit_scale."),
            Mutant("softmax returned", _zero_shot_variant(softmax=True),
                   "You return probabilities (a softmax over the classes). The exercise asks for "
                   "the logits, exp(t) times the cosine similarities: leave the softmax to whoever "
                   "uses them (an argmax does not need it, a cross-entropy applies its own)."),
        ],
    ),
]
