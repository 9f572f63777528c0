'''Corpus of plausible student code for the new exercises of 08a (08.3 ViTEmbedding, 08.4
attention_rollout), in the form of ``tests/grading_corpus.py``: one bug per suite mutant, bugs
the mutants did not foresee, and correct alternatives.

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


# ----------------------------------------------------------------------------- 08.3 ViTEmbedding
EMB_INIT = '''class ViTEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        H, W = image_size
        n = (H // patch_size) * (W // patch_size)
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, d_model, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, d_model))

    def forward(self, images):
        B = images.shape[0]
'''
PATCHES = "        x = self.proj(images).flatten(2).transpose(1, 2)\n"
CLS = "        cls = self.cls_token.expand(B, -1, -1)\n"
RETURN = "        return torch.cat([cls, x], dim=1) + self.pos_embed\n"
EMB = EMB_INIT + PATCHES + CLS + RETURN

E = [
    bug("ViTEmbedding", "[CLS] last", sub(EMB, (RETURN, "        return torch.cat([x, cls], dim=1)"
                                                       " + self.pos_embed\n")),
        mutant="[CLS] appended at the end"),
    bug("ViTEmbedding", "positions added to the patches only", sub(EMB, (
        RETURN, "        x = x + self.pos_embed[:, 1:]\n        return torch.cat([cls, x], dim=1)\n")),
        mutant="[CLS] without its position embedding"),
    bug("ViTEmbedding", "conv output reshaped to (B, N, d)", sub(EMB, (
        PATCHES, "        x = self.proj(images)\n        x = x.reshape(B, -1, x.shape[1])\n")),
        mutant="conv output reshaped, not transposed"),
    bug("ViTEmbedding", "grid read column by column", sub(EMB, (
        PATCHES, "        x = self.proj(images).permute(0, 3, 2, 1).flatten(1, 2)\n")),
        mutant="patches numbered column by column"),
    bug("ViTEmbedding", "F.conv2d without the bias", sub(EMB, (
        PATCHES, "        x = F.conv2d(images, self.proj.weight, stride=self.patch_size)\n"
                 "        x = x.flatten(2).transpose(1, 2)\n")),
        mutant="patch bias left out"),
    bug("ViTEmbedding", "pos_embed sized N (no row for [CLS])", sub(EMB, (
        "torch.zeros(1, n + 1, d_model)", "torch.zeros(1, n, d_model)"), (
        RETURN, "        x = x + self.pos_embed\n        return torch.cat([cls, x], dim=1)\n")),
        expect="size mismatch for pos_embed", kind="layout"),
    bug("ViTEmbedding", "square images assumed", sub(EMB, (
        "n = (H // patch_size) * (W // patch_size)", "n = (H // patch_size) ** 2")),
        expect="size mismatch for pos_embed", kind="layout"),
    bug("ViTEmbedding", "cls_token a buffer", sub(EMB, (
        "self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))",
        "self.register_buffer('cls_token', torch.zeros(1, 1, d_model))")),
        expect="not trainable", kind="buffer"),
    bug("ViTEmbedding", "[CLS] not expanded over the batch", sub(EMB, (
        CLS, "        cls = self.cls_token\n")),
        expect=("Sizes of tensors must match", "expand")),
    bug("ViTEmbedding", "patch tokens scaled by √d_model", sub(EMB, (
        PATCHES, PATCHES + "        x = x * math.sqrt(x.shape[-1])\n")),
        expect=("√d", "scaled")),
    bug("ViTEmbedding", "[CLS] cut from the graph with .data", sub(EMB, (
        CLS, "        cls = self.cls_token.data.expand(B, -1, -1)\n")),
        expect="gradient", kind="gradient"),
    bug("ViTEmbedding", "convolution with stride 1", sub(EMB, (
        "nn.Conv2d(in_channels, d_model, patch_size, stride=patch_size)",
        "nn.Conv2d(in_channels, d_model, patch_size)")),
        expect="stride"),
    bug("ViTEmbedding", "CLIP's LayerNorm on z₀", sub(EMB, (
        RETURN, "        z = torch.cat([cls, x], dim=1) + self.pos_embed\n"
                "        return F.layer_norm(z, z.shape[-1:])\n")),
        expect=("LayerNorm", "normalised")),
    alt("ViTEmbedding", "patchify, then F.linear with the flattened filters", sub(EMB, (
        PATCHES, "        x = F.linear(patchify(images, self.patch_size), "
                 "self.proj.weight.flatten(1), self.proj.bias)\n"))),
    alt("ViTEmbedding", "positions added in two parts, [CLS] repeated", sub(EMB, (
        CLS, "        cls = self.cls_token.repeat(B, 1, 1) + self.pos_embed[:, :1]\n"), (
        RETURN, "        return torch.cat((cls, x + self.pos_embed[:, 1:]), 1)\n"))),
    alt("ViTEmbedding", "F.unfold and einsum", sub(EMB, (
        PATCHES, "        P = self.patch_size\n"
                 "        cols = F.unfold(images, kernel_size=P, stride=P)       # (B, C·P·P, N)\n"
                 "        x = torch.einsum('bkn,dk->bnd', cols, self.proj.weight.reshape("
                 "self.proj.out_channels, -1)) + self.proj.bias\n"))),
]

# ----------------------------------------------------------------------------- 08.4 attention_rollout
RO = "def attention_rollout(weights, residual=0.5):\n"
MEAN = "        a = w.mean(dim=1)\n"
EYE = "        eye = torch.eye(a.shape[-1])\n"
MIX = "        a = residual * eye + (1 - residual) * a\n"
STEP = "        rollout = a if rollout is None else a @ rollout\n"
ROLL = RO + "    rollout = None\n    for w in weights:\n" + MEAN + EYE + MIX + STEP + \
    "    return rollout\n"

A = [
    bug("attention_rollout", "attention maps alone", RO +
        "    maps = torch.stack(weights).mean(dim=2)      # (L, B, N, N)\n"
        "    rollout = maps[0]\n"
        "    for a in maps[1:]:\n        rollout = torch.bmm(a, rollout)\n    return rollout\n",
        mutant="no identity added"),
    bug("attention_rollout", "A + I, not renormalised", sub(ROLL, (MIX, "        a = a + eye\n")),
        mutant="identity added, rows not renormalised"),
    bug("attention_rollout", "rollout @ a", sub(ROLL, (
        STEP, "        rollout = a if rollout is None else rollout @ a\n")),
        mutant="product in the wrong order"),
    bug("attention_rollout", "heads fused by their maximum", sub(ROLL, (
        MEAN, "        a = w.amax(dim=1)\n")), mutant="heads max instead of mean"),
    bug("attention_rollout", "residual weighs the attention", sub(ROLL, (
        MIX, "        a = residual * a + (1 - residual) * eye\n")),
        mutant="residual weight on the attention"),
    bug("attention_rollout", "residual argument ignored (one half)", sub(ROLL, (
        MIX, "        a = 0.5 * eye + 0.5 * a\n")), expect="residual argument"),
    bug("attention_rollout", "(1 − residual) forgotten", sub(ROLL, (
        MIX, "        a = residual * eye + a\n")), expect=("rows sum", "sum to 1", "sums to 1")),
    bug("attention_rollout", "heads averaged after the product", RO +
        "    eye = torch.eye(weights[0].shape[-1])\n"
        "    rollout = None\n    for w in weights:\n"
        "        a = residual * eye + (1 - residual) * w           # per head\n"
        "        rollout = a if rollout is None else a @ rollout\n"
        "    return rollout.mean(dim=1)\n", expect=("before multiplying", "each layer's heads")),
    bug("attention_rollout", "last layer only", RO +
        "    a = weights[-1].mean(dim=1)\n"
        "    return residual * torch.eye(a.shape[-1]) + (1 - residual) * a\n",
        expect=("every layer", "all the layers", "product")),
    bug("attention_rollout", "mul_ on the caller's weights", sub(ROLL, (
        MEAN + EYE + MIX, "        w.mul_(1 - residual)\n        a = w.mean(dim=1)\n"
                          "        a = a + residual * torch.eye(a.shape[-1])\n")),
        expect=INPLACE, kind="in-place"),
    bug("attention_rollout", "transposed", sub(ROLL, (
        "    return rollout\n", "    return rollout.transpose(-2, -1)\n")), expect="transposed"),
    bug("attention_rollout", "heads summed", sub(ROLL, (MEAN, "        a = w.sum(dim=1)\n")),
        expect=("sum of the heads", "heads summed", "sum over the heads", "summed")),
    bug("attention_rollout", "every layer's rollout returned", RO +
        "    out, rollout = [], None\n    for w in weights:\n" + MEAN + EYE + MIX + STEP +
        "        out.append(rollout)\n    return out\n", expect="returned", kind="type"),
    alt("attention_rollout", "the authors' renormalisation, functools.reduce", RO +
        "    from functools import reduce\n"
        "    maps = []\n    for w in weights:\n" + MEAN + EYE + MIX +
        "        maps.append(a / a.sum(dim=-1, keepdim=True))\n"
        "    return reduce(lambda r, a: a @ r, maps)\n"),
    # float32 identities: right for float32 maps, wrong for the float64 maps the exercise allows
    bug("attention_rollout", "from a float32 identity, last layer first", RO +
        "    A = torch.stack(weights).mean(dim=2)                  # (L, B, N, N)\n"
        "    L, B, N, _ = A.shape\n"
        "    I = torch.eye(N).expand(B, N, N)\n"
        "    R = I.clone()\n"
        "    for a in reversed(list(A)):                           # R = Â_L ... Â_1\n"
        "        R = R @ (residual * I + (1 - residual) * a)\n"
        "    return R\n", expect=("float64",), kind="type"),
    bug("attention_rollout", "einsum, torch.bmm, a float32 identity", RO +
        "    rollout = None\n    for w in weights:\n"
        "        a = torch.einsum('bhij->bij', w) / w.shape[1]\n"
        "        a = torch.lerp(torch.eye(a.shape[-1]).expand_as(a), a, 1 - residual)\n"
        "        rollout = a if rollout is None else torch.bmm(a, rollout)\n"
        "    return rollout\n", expect=("float64",), kind="type"),
]

VARIANTS: list = [*E, *A]
