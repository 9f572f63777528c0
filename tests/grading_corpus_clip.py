'''Corpus of plausible student code for the new exercises of 08b (08.5 zero_shot_logits), in the
form of ``tests/grading_corpus.py``: one bug per suite mutant, bugs the mutants did not foresee,
and correct alternatives.

Each bug's ``expect`` was written from the bug itself, before looking at what the grader says.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug


def sub(source: str, *pairs: tuple[str, str]) -> str:
    """``source`` with each (old, new) replaced; every ``old`` must be there."""
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new)
    return source


# ----------------------------------------------------------------------------- 08.5 zero_shot_logits
ZS = "def zero_shot_logits(image_embeds, prompt_embeds, logit_scale):\n"
PROMPTS = "    prompts = F.normalize(prompt_embeds, dim=-1)\n"
CLASSES = "    classes = F.normalize(prompts.mean(dim=1), dim=-1)\n"
IMAGES = "    images = F.normalize(image_embeds, dim=-1)\n"
RETURN = "    return logit_scale.exp() * images @ classes.T\n"
ZS_BODY = ZS + PROMPTS + CLASSES + IMAGES + RETURN

Z = [
    bug("zero_shot_logits", "raw prompts averaged, then normalised", sub(ZS_BODY, (
        PROMPTS, "    prompts = prompt_embeds\n")), mutant="prompts averaged before normalising"),
    bug("zero_shot_logits", "mean of unit prompts not renormalised", sub(ZS_BODY, (
        CLASSES, "    classes = prompts.mean(dim=1)\n")),
        mutant="class embedding not renormalised"),
    bug("zero_shot_logits", "images used as they come", sub(ZS_BODY, (
        IMAGES, "    images = image_embeds\n")), mutant="images not normalised"),
    bug("zero_shot_logits", "logit_scale without exp", sub(ZS_BODY, (
        "logit_scale.exp() *", "logit_scale *")), mutant="logit_scale used without exp"),
    bug("zero_shot_logits", "softmax over the classes returned", sub(ZS_BODY, (
        RETURN, "    return (logit_scale.exp() * images @ classes.T).softmax(dim=-1)\n")),
        mutant="softmax returned"),
    # bugs no mutant foresaw
    bug("zero_shot_logits", "math.exp(logit_scale.item())", sub(ZS_BODY, (
        "logit_scale.exp() *", "math.exp(logit_scale.item()) *")),
        expect=("gradient",), kind="gradient"),
    bug("zero_shot_logits", "images normalised under torch.no_grad()", sub(ZS_BODY, (
        IMAGES, "    with torch.no_grad():\n"
                "        images = F.normalize(image_embeds, dim=-1)\n")),
        expect=("gradient",), kind="gradient"),
    bug("zero_shot_logits", "(C, B): one row per class", sub(ZS_BODY, (
        RETURN, "    return logit_scale.exp() * classes @ images.T\n")),
        expect=("transposed",), kind="layout"),
    bug("zero_shot_logits", "prompts normalised in place", sub(ZS_BODY, (
        PROMPTS, "    prompt_embeds /= prompt_embeds.norm(dim=-1, keepdim=True)\n"
                 "    prompts = prompt_embeds\n")),
        expect=(*INPLACE, "in-place"), kind="in-place"),
    bug("zero_shot_logits", "F.normalize without dim (over the prompts)", sub(ZS_BODY, (
        PROMPTS, "    prompts = F.normalize(prompt_embeds)\n")),
        expect=("last axis", "dim=-1")),
    bug("zero_shot_logits", "first prompt only", sub(ZS_BODY, (
        CLASSES, "    classes = prompts[:, 0]\n")),
        expect=("average", "every prompt", "each prompt")),
    bug("zero_shot_logits", "divided by exp(t)", sub(ZS_BODY, (
        RETURN, "    return images @ classes.T / logit_scale.exp()\n")),
        expect=("multipl", "inverse")),
    bug("zero_shot_logits", "averaged over the classes", sub(ZS_BODY, (
        "prompts.mean(dim=1)", "prompts.mean(dim=0)")),
        expect=("shape", "prompt axis", "dim=1"), kind="layout"),
    # correct alternatives
    alt("zero_shot_logits", "sum of the unit prompts, renormalised", sub(ZS_BODY, (
        "prompts.mean(dim=1)", "prompts.sum(dim=1)"))),
    alt("zero_shot_logits", "cosine_similarity, broadcast", ZS +
        "    prompts = prompt_embeds / prompt_embeds.norm(dim=-1, keepdim=True)\n"
        "    classes = prompts.mean(1)\n"
        "    cos = F.cosine_similarity(image_embeds[:, None, :], classes[None, :, :], dim=-1)\n"
        "    return torch.exp(logit_scale) * cos\n"),
    alt("zero_shot_logits", "einsum and linalg.vector_norm", ZS +
        "    unit = lambda x: x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)\n"
        "    classes = unit(unit(prompt_embeds).mean(dim=1))\n"
        "    return torch.einsum('bd,cd->bc', unit(image_embeds), classes) * logit_scale.exp()\n"),
    alt("zero_shot_logits", "a loop over the classes", ZS +
        "    images = F.normalize(image_embeds, dim=-1)\n"
        "    columns = []\n"
        "    for prompts in prompt_embeds:\n"
        "        c = F.normalize(F.normalize(prompts, dim=-1).mean(0), dim=0)\n"
        "        columns.append(images @ c)\n"
        "    return logit_scale.exp() * torch.stack(columns, dim=1)\n"),
]

VARIANTS: list = [*Z]

# ----------------------------------------------------------------------------- 08.6 eot_pool
EP = "def eot_pool(hidden, ids, eot_id):\n"
EP_ROWS = "    rows = torch.arange(hidden.shape[0])\n"

EOT_POOL = [
    bug("eot_pool", "argmax of the ids", EP + EP_ROWS + "    return hidden[rows, ids.argmax(-1)]\n",
        mutant="largest id"),
    bug("eot_pool", "last position", EP + "    return hidden[:, -1]\n", mutant="last position"),
    bug("eot_pool", "last <eot> via nonzero", EP + EP_ROWS +
        "    at = torch.stack([(row == eot_id).nonzero()[-1, 0] for row in ids])\n"
        "    return hidden[rows, at]\n", mutant="last <eot>"),
    bug("eot_pool", "length from non-zero ids", EP + EP_ROWS +
        "    return hidden[rows, (ids != 0).sum(-1) - 1]\n", mutant="length from the non-zero ids"),
    bug("eot_pool", "mean pooling", EP + "    return hidden.mean(1)\n", mutant="mean over positions"),
    bug("eot_pool", "mean up to and with <eot>", EP +
        "    upto = ((ids == eot_id).int().cumsum(-1) == 0) | (ids == eot_id)\n"
        "    keep = upto & ((ids == eot_id).int().cumsum(-1) <= 1)\n"
        "    return (hidden * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)\n"),
    bug("eot_pool", "hidden[:, at] (a B x B x d gather)", EP +
        "    return hidden[:, (ids == eot_id).int().argmax(-1)]\n",
        expect=("hidden[torch.arange(B), positions]",), kind="layout"),
    bug("eot_pool", "position after <eot>", EP + EP_ROWS +
        "    at = (ids == eot_id).int().argmax(-1) + 1\n"
        "    return hidden[rows, at.clamp(max=hidden.shape[1] - 1)]\n",
        expect=("position after the row's first <eot>",)),
    bug("eot_pool", "length counted with a Python loop that stops at padding 0", EP + EP_ROWS +
        "    at = []\n    for row in ids.tolist():\n        n = 0\n"
        "        while n < len(row) and row[n] != 0:\n            n += 1\n"
        "        at.append(max(n - 1, 0))\n    return hidden[rows, torch.tensor(at)]\n"),
    bug("eot_pool", "detached", EP + EP_ROWS +
        "    return hidden.detach()[rows, (ids == eot_id).int().argmax(-1)]\n",
        expect="no gradient reaches"),
    alt("eot_pool", "nonzero of the first match", EP + EP_ROWS +
        "    at = torch.stack([(row == eot_id).nonzero()[0, 0] for row in ids])\n"
        "    return hidden[rows, at]\n"),
    alt("eot_pool", "gather", EP +
        "    at = (ids == eot_id).int().argmax(-1)\n"
        "    index = at[:, None, None].expand(-1, 1, hidden.shape[-1])\n"
        "    return hidden.gather(1, index).squeeze(1)\n"),
    alt("eot_pool", "one-hot weights", EP +
        "    first = (ids == eot_id).int().cumsum(-1).eq(1) & (ids == eot_id)\n"
        "    return torch.einsum('bn,bnd->bd', first.to(hidden.dtype), hidden)\n"),
]

VARIANTS += EOT_POOL
