"""Chapter 8, notebook 08b (CLIP) — ``clip_loss``, the symmetric contrastive loss,
``zero_shot_logits``, zero-shot classification logits with a prompt ensemble, and ``eot_pool``,
the text tower's pooling at the first end-of-text token (against ``CLIPTextTransformer``).

The reference is a line-by-line transcription of what ``transformers.CLIPModel`` computes with
``return_loss=True`` from its two towers' outputs (``get_image_features``,
``get_text_features``): normalise both, ``logits_per_text = exp(logit_scale) · T Iᵀ``, then
``image_text_contrastive_loss`` (``clip_loss`` in Transformers 4; the mean of the cross-entropy
over the rows and over the columns). It is kept free of the ``transformers`` import so that a
check stays instant; ``tests/test_ch08_vit_clip.py`` proves it equal to the original on every case.

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


def _variant(*, normalise=True, exp=True, directions="both", reduce="mean", temperature=False,
             scale_twice=False):
    """A wrong loss, one bug switched on by the arguments."""

    def variant(image_embeds, text_embeds, logit_scale):
        if normalise == "whole matrix":  # one norm for all the embeddings of a set
            image_embeds = image_embeds / image_embeds.norm()
            text_embeds = text_embeds / text_embeds.norm()
        elif normalise:
            axis = 0 if normalise == "batch axis" else -1
            image_embeds = F.normalize(image_embeds, dim=axis)
            text_embeds = F.normalize(text_embeds, dim=axis)
        scale = logit_scale.exp() if exp else logit_scale
        cosines = image_embeds @ text_embeds.T
        logits = cosines / scale if temperature else cosines * scale
        if scale_twice:  # the scale on each embedding: exp(t)² · cos
            logits = logits * scale
        targets = torch.arange(len(logits))
        if reduce == "batch sum":
            row = F.cross_entropy(logits, targets, reduction="sum")
            col = F.cross_entropy(logits.T, targets, reduction="sum")
        else:
            row = F.cross_entropy(logits, targets)
            col = F.cross_entropy((cosines if directions == "rows scaled" else logits).T, targets)
        if directions == "images":
            return row
        if directions == "captions":
            return col
        return row + col if reduce == "sum" else (row + col) / 2

    return variant


def _diagonal_only(image_embeds, text_embeds, logit_scale):
    """The matching pairs' similarity pushed up, no negatives: −mean(exp(t)·cos(I_i, T_i))."""
    cos = F.cosine_similarity(image_embeds, text_embeds, dim=-1)
    return -(logit_scale.exp() * cos).mean()


def _case(B, d, *, scale=2.6593, norms=1.0, skew=False, aligned=False):
    def make(g):
        image = torch.randn(B, d, generator=g) * norms
        text = torch.randn(B, d, generator=g) * norms
        if aligned:  # every embedding near one direction: cosines near 1, logits near exp(t)
            image = torch.randn(d, generator=g) + 0.1 * image
            text = image + 0.05 * text
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
    # Near CLIP's cap of 100, not on it: CLIP's training code clamps logit_scale at ln 100, and
    # a clamp at the cap would zero the gradient there (transformers' forward does not clamp).
    Case("logit_scale = 4.5 (exp(t) = 90, near CLIP's cap of 100)", _case(3, 16, scale=4.5),
         hint="Multiply the cosine similarities by exp(logit_scale); dividing by it would be "
              "dividing by the inverse temperature."),
    Case("exp(t) = 90 and cosines near 1: logits near 89, whose exp overflows float32",
         _case(5, 16, scale=4.5, aligned=True),
         hint="With logits near 89, exp(logit) exceeds float32's largest number (about e^88.7) "
              "and becomes inf: compute the cross-entropy with F.cross_entropy or "
              "F.log_softmax, which subtract each row's maximum first (a stable log-sum-exp), "
              "not as log(exp(...) / sum(exp(...)))."),
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
                       exp=True, softmax=False, best_prompt=False, class_axis=-1):
    """Wrong zero-shot logits, one bug switched on by the arguments."""

    def variant(image_embeds, prompt_embeds, logit_scale):
        if normalise_prompts:
            prompt_embeds = F.normalize(prompt_embeds, dim=-1)
        if normalise_images:
            image_embeds = F.normalize(image_embeds, dim=-1)
        scale = logit_scale.exp() if exp else logit_scale
        if best_prompt:  # each class scored by its most similar prompt
            cosines = torch.einsum("bd,cpd->bcp", image_embeds, prompt_embeds)
            return scale * cosines.amax(dim=-1)
        classes = prompt_embeds.mean(dim=1)
        if renormalise:
            classes = F.normalize(classes, dim=class_axis)
        logits = scale * image_embeds @ classes.T
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


# What an observation implies for zero-shot logits, where it implies one thing.
ZERO_SHOT_READINGS = (
    (r"is the transpose of the expected one",
     "Your logits are transposed, (C, B), one row per class: return (B, C), one row per image "
     "(images @ classes.T), so that each row's argmax is that image's class."),
    # 0.0049 = exp(−2t) at t = ln(1/0.07): the logits divided by exp(t) instead of multiplied
    (r"log\(1/0\.07\)', your output is the expected one times 0\.0049",
     "Your logits are the expected ones times τ² = 0.0049: you divide the cosine similarities "
     "by exp(t) = 1/τ; multiply by it (dividing by τ)."),
)

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
    Case("logit_scale = 4.5 (exp(t) = 90, near CLIP's cap of 100)",
         _zero_shot_case(4, 6, 3, 16, scale=4.5),
         hint="Multiply the cosine similarities by exp(logit_scale), the inverse temperature "
              "(90 here), not by logit_scale and not by its inverse."),
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
            Mutant("summed over the batch", _variant(reduce="batch sum"),
                   "Your loss grows with the batch size: each cross-entropy is the mean over the "
                   "B rows (or columns), F.cross_entropy's default reduction='mean'; a sum over "
                   "the batch (reduction='sum') is B times too large."),
            Mutant("scaled twice", _variant(scale_twice=True),
                   "Your logits are exp(t)² times the cosine similarities (the scale applied to "
                   "each embedding, or to the product twice): multiply the B x B cosine "
                   "similarities by exp(t) once."),
            Mutant("one norm for each whole set", _variant(normalise="whole matrix"),
                   "You divide each set of embeddings by one norm, that of the whole (B, d_embed) "
                   "matrix: normalise each embedding (each row) to unit length, x / "
                   "x.norm(dim=-1, keepdim=True) or F.normalize(x, dim=-1)."),
            Mutant("captions pick images only", _variant(directions="captions"),
                   "Your loss only asks each caption to pick its image. The loss is symmetric: "
                   "also each image must pick its caption (cross-entropy over the rows of the "
                   "logits), and the two are averaged."),
            Mutant("normalised along the batch axis", _variant(normalise="batch axis"),
                   "You normalise along the batch axis (dim=0), each feature over the B "
                   "embeddings: normalise each embedding, along its last axis (dim=-1), to unit "
                   "length."),
            Mutant("caption logits not scaled", _variant(directions="rows scaled"),
                   "Only one direction's logits are multiplied by exp(t): the caption-to-image "
                   "cross-entropy uses the same scaled logits, transposed (logits.T), not the "
                   "unscaled cosine similarities."),
        ],
    ),
    Suite(
        exercise="08.5",
        name="zero_shot_logits",
        points=2,
        reference=hf_zero_shot_logits,
        solution=hf_zero_shot_logits,
        cases=ZERO_SHOT_CASES,
        readings=ZERO_SHOT_READINGS,
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
            Mutant("best prompt per class", _zero_shot_variant(best_prompt=True),
                   "You score each class by its best prompt (a maximum over the prompts). CLIP's "
                   "ensemble averages the prompts' unit vectors over dim=1 and normalises the "
                   "mean: one class embedding, compared once with each image."),
            Mutant("class embeddings normalised along the class axis",
                   _zero_shot_variant(class_axis=0),
                   "You normalise the mean embeddings along the class axis (dim=0), across the "
                   "classes: normalise each class's embedding along its last axis (dim=-1)."),
        ],
    ),
]


# ----------------------------------------------------------------------------- 08.6 eot_pool


def hf_eot_pool(hidden, ids, eot_id):
    """The pooling line of ``transformers``' ``CLIPTextTransformer.forward`` for an
    ``eos_token_id`` other than the legacy 2, transcribed; ``tests/test_ch08b_eot_pool.py``
    proves it equal to ``CLIPTextModel``'s ``pooler_output``."""
    return hidden[torch.arange(hidden.shape[0], device=hidden.device),
                  (ids.to(dtype=torch.int, device=hidden.device) == eot_id).int().argmax(dim=-1)]


def _pool_variant(*, legacy=False, last_position=False, last_eot=False, nonzero=False,
                  mean=False):
    """A wrong pooling, one bug switched on by the arguments."""

    def variant(hidden, ids, eot_id):
        rows = torch.arange(hidden.shape[0])
        if mean:
            return hidden.mean(dim=1)
        if legacy:
            at = ids.argmax(dim=-1)
        elif last_position:
            at = torch.full((hidden.shape[0],), hidden.shape[1] - 1)
        elif last_eot:
            at = hidden.shape[1] - 1 - (ids == eot_id).int().flip(-1).argmax(dim=-1)
        elif nonzero:
            at = (ids != 0).sum(dim=-1) - 1
        else:
            at = (ids == eot_id).int().argmax(dim=-1)
        return hidden[rows, at]

    return variant


def _texts(rows, eot_id, d=3, by_hand=False):
    """Fixed ids (a list of rows) and hidden states (B, N, d): arange when by hand, else spread."""

    def make(g):
        ids = torch.tensor(rows, dtype=torch.long)
        b, n = ids.shape
        hidden = (torch.arange(b * n * d, dtype=torch.float32).reshape(b, n, d) if by_hand
                  else 0.5 * torch.randn(b, n, d, generator=g))
        return hidden, ids, eot_id

    return make


def _random_texts(batch, n, d, eot_id, pad_id, low, high):
    """Words drawn from [low, high), then eot_id, then pad_id up to n, at random lengths."""

    def make(g):
        ids = torch.full((batch, n), pad_id, dtype=torch.long)
        lengths = torch.randint(0, n, (batch,), generator=g)
        for row, length in enumerate(lengths.tolist()):
            ids[row, :length] = torch.randint(low, high, (length,), generator=g)
            ids[row, length] = eot_id
        return 0.5 * torch.randn(batch, n, d, generator=g), ids, eot_id

    return make


def _pool_observe(expected, got):
    """Which position was pooled, read where the hidden states are arange (the by-hand case):
    each state holds d consecutive numbers, d apart from the next position's, so an output off
    by k·d in every feature is the state k positions later. Empty unless every row of the output
    is such a state, off by the same k ≠ 0."""
    e, a = expected[0], got[0]
    if type(a) is torch.Tensor and a.shape != e.shape:
        return f"Your output has shape {tuple(a.shape)}, expected {tuple(e.shape)}"
    if a.dim() != 2 or not a.is_floating_point() or a.dtype != e.dtype \
            or not torch.isfinite(a).all():
        return ""
    d = e.shape[-1]
    steps = torch.arange(d, dtype=e.dtype).expand_as(e)
    if not (torch.equal(e - e[:, :1], steps) and torch.equal(a - a[:, :1], steps)):
        return ""
    shift = (a[:, 0] - e[:, 0]) / d
    if not torch.equal(shift, shift.round()) or (shift == 0).any() or (shift != shift[0]).any():
        return ""
    k = int(shift[0])
    return (f"In the by-hand case every row of your output is the hidden state {abs(k)} "
            f"position{'s' if abs(k) > 1 else ''} {'after' if k > 0 else 'before'} the row's "
            "first <eot>")


POOL_READINGS = (
    (r"shape \((\d+), \1, (\d+)\), expected \(\1, \2\)",
     "Your output is (B, B, d): hidden[:, positions] takes every row's <eot> position from every "
     "text. Index the batch axis too, hidden[torch.arange(B), positions], one state per row."),
    (r"shape \((\d+), 1\), expected \(\1, (?!1\))\d+\)",
     "Your output has one number per row where a hidden state has d: for instance a gather "
     "along the positions whose index was not expanded over the features; index "
     "hidden[torch.arange(B), positions], or gather with the index (B, 1, d)."),
    (r"state 1 position before the row's first <eot>",
     "Your index is one less than the position of the first <eot>: (ids == eot_id).int()"
     ".argmax(dim=-1) already points at it, with no − 1."),
    (r"state 1 position after the row's first <eot>",
     "Your index is one more than the position of the first <eot>: (ids == eot_id).int()"
     ".argmax(dim=-1) already points at it, with no + 1; the state after it is the next token's "
     "(padding)."),
)

FIRST = ("Pool at the first position where ids == eot_id in each row: under the causal mask it is "
         "the first position that has read the whole text. Not the last position, nor the "
         "largest id (a legacy rule of the original CLIP vocabulary, whose end-of-text token "
         "had the largest id).")

POOL_CASES = [
    Case("by hand: hidden = arange, B = 2, N = 4, d = 3; <eot> = 9 at positions 1 and 2",
         _texts([[5, 9, 0, 0], [7, 4, 9, 0]], 9, by_hand=True)),
    Case("<eot> is not the largest id: words 4..29, <eot> = 3, padding 0",
         _random_texts(5, 8, 4, 3, 0, 4, 30), hint=FIRST),
    Case("padding with the largest id (31) after <eot> = 5", _random_texts(4, 7, 4, 5, 31, 6, 30),
         hint=FIRST),
    Case("no padding: <eot> at the last position of every row",
         _texts([[4, 5, 6, 1], [7, 7, 8, 1], [9, 4, 4, 1]], 1)),
    Case("an empty text: <eot> at position 0", _texts([[6, 0, 0], [4, 6, 0]], 6), hint=FIRST),
    Case("<eot> twice in a row: pool at the first", _texts([[4, 5, 3, 3, 0], [3, 6, 7, 3, 0]], 3),
         hint="With <eot> more than once in a row, pool at its first occurrence (the position "
              "argmax returns for the first maximum), not the last."),
    Case("word ids that include 0 (the padding id is 10)", _texts([[0, 3, 1, 10], [5, 0, 0, 1]], 1),
         hint="Find <eot> by its id, eot_id; counting the non-zero ids assumes the padding id is "
              "0 and that no word has id 0."),
    Case("B = 1, N = 1: the text is <eot> alone", _texts([[7]], 7)),
    Case("a training batch: B = 8, N = 16, d = 32, <eot> = 1, padding 0",
         _random_texts(8, 16, 32, 1, 0, 2, 50)),
]

SUITES.append(
    Suite(
        exercise="08.6",
        name="eot_pool",
        points=2,
        reference=hf_eot_pool,
        solution=clip.eot_pool,
        cases=POOL_CASES,
        observe=_pool_observe,
        readings=POOL_READINGS,
        arg_names=("hidden", "ids", "eot_id"),
        grad=("hidden",),
        hint="For each row b, find the first position where ids[b] == eot_id and take "
             "hidden[b, that position]: the output is (B, d).",
        mutants=[
            Mutant("largest id", _pool_variant(legacy=True),
                   "You pool at the largest id of each row (ids.argmax(-1)), the legacy rule of "
                   "the original CLIP vocabulary, where end-of-text had the largest id. Here it "
                   "does not: find the positions where ids == eot_id."),
            Mutant("last position", _pool_variant(last_position=True),
                   "You pool at the last position, which is padding whenever a text is shorter "
                   "than N: pool at each row's first <eot>."),
            Mutant("last <eot>", _pool_variant(last_eot=True),
                   "You pool at the last <eot> of a row; CLIP pools at the first."),
            Mutant("length from the non-zero ids", _pool_variant(nonzero=True),
                   "You locate <eot> by counting non-zero ids, which assumes padding id 0 and no "
                   "word with id 0: find it by its id, eot_id."),
            Mutant("mean over positions", _pool_variant(mean=True),
                   "You average the hidden states over all positions, padding included. CLIP's "
                   "text embedding is the hidden state at one position, the first <eot>."),
        ],
    )
)
