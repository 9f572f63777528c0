'''Corpus of plausible student code for the exercises of Chapters 8 and 9 (08.1 patchify to
09.6 energy_shares), aimed at the contracts the exercises state: dtypes they accept (float64
attention maps, float16/bfloat16 weights whose constants must be float32), batches whose matrices
differ in scale by many orders of magnitude, the thresholds and clamps students write (1e-8,
1e-12, an epsilon added to a norm), containers the docstring allows (a tuple or a set of target
names), caps (CLIP's 1/τ ≤ 100, clamped as CLIP's training code does), hard-coded constants,
wrong axes and off-by-one slips; and correct alternatives that use those freedoms.

Written from each exercise's text and docstring in ``solutions/`` before the suites' mutants and
cases were read; each bug's ``expect`` was written from the bug itself.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug


def sub(source: str, *pairs: tuple[str, str]) -> str:
    """``source`` with each (old, new) replaced; every ``old`` must be there."""
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new)
    return source


# ----------------------------------------------------------------------------- 08.1 patchify
PATCH = '''def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    x = images.reshape(B, C, H // P, P, W // P, P)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // P) * (W // P), C * P * P)
'''
PATCHIFY = [
    bug("patchify", "grid sizes swapped in the reshape (W // P rows)", sub(
        PATCH, ("reshape(B, C, H // P, P, W // P, P)", "reshape(B, C, W // P, P, H // P, P)")),
        expect=("non-square", "rows and columns", "keep the two apart")),
    bug("patchify", "patch_size read as patches per side", sub(
        PATCH, ("    P = patch_size\n", "    P = H // patch_size\n")),
        expect=("patches per side", "side of a patch")),
    bug("patchify", "unfold with step 1 (overlapping windows)", '''def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    x = images.unfold(2, P, 1).unfold(3, P, 1)            # (B, C, rows, cols, P, P)
    x = x.permute(0, 2, 3, 1, 4, 5)
    return x.reshape(B, -1, C * P * P)
''', expect=("overlap",)),
    bug("patchify", "a loop into a float32 buffer (the input's dtype lost)",
        '''def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    out = torch.zeros(B, (H // P) * (W // P), C * P * P)
    n = 0
    for i in range(H // P):
        for j in range(W // P):
            out[:, n] = images[:, :, i * P:(i + 1) * P, j * P:(j + 1) * P].reshape(B, -1)
            n += 1
    return out
''', expect=("dtype", "float32", "float64"), kind="type"),
    alt("patchify", "einsum to move the axes", '''def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    x = images.reshape(B, C, H // P, P, W // P, P)
    return torch.einsum("bciajd->bijcad", x).reshape(B, -1, C * P * P)
'''),
    alt("patchify", "movedim of the two grid axes", '''def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    x = images.reshape(B, C, H // P, P, W // P, P).movedim((2, 4), (1, 2))
    return x.flatten(3).flatten(1, 2)
'''),
    alt("patchify", "a loop into a buffer of the input's dtype", '''def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    rows, cols = H // P, W // P
    out = images.new_empty(B, rows * cols, C * P * P)
    for i in range(rows):
        for j in range(cols):
            out[:, i * cols + j] = images[:, :, i * P:(i + 1) * P, j * P:(j + 1) * P].flatten(1)
    return out
''', kind="type"),
]

# ----------------------------------------------------------------------------- 08.3 ViTEmbedding
EMB = '''class ViTEmbedding(nn.Module):
    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        H, W = image_size
        n = (H // patch_size) * (W // patch_size)
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, d_model))

    def forward(self, images):
        patches = self.proj(images).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(images.shape[0], -1, -1)
        return torch.cat([cls, patches], dim=1) + self.pos_embed
'''
EMBEDDING = [
    bug("ViTEmbedding", "three input channels hard-coded (RGB)", sub(
        EMB, ("nn.Conv2d(in_channels, d_model", "nn.Conv2d(3, d_model")),
        expect=("size mismatch for proj.weight", "in_channels")),
    bug("ViTEmbedding", "cls_token of shape (1, d_model)", sub(
        EMB, ("torch.zeros(1, 1, d_model))", "torch.zeros(1, d_model))"),
        ("self.cls_token.expand(images.shape[0], -1, -1)",
         "self.cls_token.unsqueeze(0).expand(images.shape[0], -1, -1)")),
        expect=("size mismatch for cls_token",)),
    bug("ViTEmbedding", "[CLS] takes the last position embedding", sub(
        EMB, ("        return torch.cat([cls, patches], dim=1) + self.pos_embed\n",
              "        patches = patches + self.pos_embed[:, :-1]\n"
              "        cls = cls + self.pos_embed[:, -1:]\n"
              "        return torch.cat([cls, patches], dim=1)\n")),
        expect=("row 0 of pos_embed", "pos_embed[:, 0]", "last row")),
    bug("ViTEmbedding", "batch size read from the channel axis", sub(
        EMB, ("self.cls_token.expand(images.shape[0], -1, -1)",
              "self.cls_token.expand(images.shape[1], -1, -1)")),
        expect=("batch axis", "images.shape[0]")),
    alt("ViTEmbedding", "conv output permuted and reshaped", sub(
        EMB, ("        patches = self.proj(images).flatten(2).transpose(1, 2)\n",
              "        x = self.proj(images)\n"
              "        patches = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, x.shape[1])\n"))),
    alt("ViTEmbedding", "[CLS] with its position first, then expanded", sub(
        EMB, ("        cls = self.cls_token.expand(images.shape[0], -1, -1)\n"
              "        return torch.cat([cls, patches], dim=1) + self.pos_embed\n",
              "        cls = (self.cls_token + self.pos_embed[:, :1]).expand(len(images), -1, -1)\n"
              "        return torch.cat([cls, patches + self.pos_embed[:, 1:]], dim=1)\n"),
        ("n = (H // patch_size) * (W // patch_size)", "n = H * W // patch_size ** 2"))),
]

# ----------------------------------------------------------------------------- 08.4 attention_rollout
ROLL = "def attention_rollout(weights, residual=0.5):\n"
ROLL_BODY = ROLL + '''    rollout = None
    for w in weights:
        a = w.mean(dim=1)
        eye = torch.eye(a.shape[-1], dtype=a.dtype)
        a = residual * eye + (1 - residual) * a
        rollout = a if rollout is None else a @ rollout
    return rollout
'''
ROLLOUT = [
    bug("attention_rollout", "started from a float32 identity", ROLL + '''    B, H, N, _ = weights[0].shape
    rollout = torch.eye(N).expand(B, N, N)
    for w in weights:
        a = residual * torch.eye(N) + (1 - residual) * w.mean(dim=1)
        rollout = a @ rollout
    return rollout
''', expect=("dtype", "float64", "float32"), kind="type"),
    bug("attention_rollout", "heads averaged over axis 0 (the batch)", sub(
        ROLL_BODY, ("a = w.mean(dim=1)", "a = w.mean(dim=0)")),
        expect=("not dim 0",)),
    bug("attention_rollout", "keepdim=True leaves a head axis", sub(
        ROLL_BODY, ("a = w.mean(dim=1)", "a = w.mean(dim=1, keepdim=True)")),
        expect=("keepdim", "head axis")),
    bug("attention_rollout", "low weights discarded (discard_ratio)", sub(
        ROLL_BODY, ("        a = w.mean(dim=1)\n",
                    "        a = w.mean(dim=1)\n"
                    "        a = torch.where(a < 0.01, torch.zeros_like(a), a)\n")),
        expect=("discard", "small weights", "threshold")),
    bug("attention_rollout", "heads summed, divided by the batch size", sub(
        ROLL_BODY, ("a = w.mean(dim=1)", "a = w.sum(dim=1) / w.shape[0]")),
        expect=("number of heads", "divided by the batch")),
    bug("attention_rollout", "[CLS] row only", sub(
        ROLL_BODY, ("    return rollout\n", "    return rollout[:, 0]\n")),
        expect=("row 0", "one row", "lost an axis")),
    alt("attention_rollout", "stacked layers, identity from the weights' dtype", ROLL +
        '''    A = torch.stack(list(weights)).mean(dim=2)             # (L, B, N, N)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    A = residual * eye + (1 - residual) * A
    R = A[0]
    for a in A[1:]:
        R = torch.bmm(a, R)
    return R
''', kind="type"),
    alt("attention_rollout", "the diagonal raised in place on a fresh map", ROLL + '''    R = None
    for w in weights:
        a = (1 - residual) * w.mean(1)
        a.diagonal(dim1=-2, dim2=-1).add_(residual)
        R = a if R is None else a @ R
    return R
''', kind="in-place"),
    alt("attention_rollout", "functools.reduce over the reversed layers", ROLL +
        '''    from functools import reduce

    def mixed(w):
        a = w.mean(1)
        return residual * torch.eye(a.shape[-1], dtype=a.dtype) + (1 - residual) * a

    return reduce(torch.matmul, [mixed(w) for w in reversed(weights)])
'''),
]

# ----------------------------------------------------------------------------- 08.2 clip_loss
CL = "def clip_loss(image_embeds, text_embeds, logit_scale):\n"
CL_NORM = ("    image_embeds = F.normalize(image_embeds, dim=-1)\n"
           "    text_embeds = F.normalize(text_embeds, dim=-1)\n")
CL_LOGITS = "    logits = logit_scale.exp() * image_embeds @ text_embeds.T\n"
CL_TAIL = ("    targets = torch.arange(len(logits))\n"
           "    return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2\n")
CL_BODY = CL + CL_NORM + CL_LOGITS + CL_TAIL
CLIP = [
    bug("clip_loss", "one norm for the whole batch", sub(
        CL_BODY, (CL_NORM, "    image_embeds = image_embeds / image_embeds.norm()\n"
                           "    text_embeds = text_embeds / text_embeds.norm()\n")),
        mutant="one norm for each whole set"),
    bug("clip_loss", "the scale on both embeddings (squared)", sub(
        CL_BODY, (CL_LOGITS, "    s = logit_scale.exp()\n"
                             "    logits = (s * image_embeds) @ (s * text_embeds).T\n")),
        mutant="scaled twice"),
    bug("clip_loss", "cross-entropies summed over the batch", sub(
        CL_BODY, ("(F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2",
                  "(F.cross_entropy(logits, targets, reduction='sum')"
                  " + F.cross_entropy(logits.T, targets, reduction='sum')) / 2")),
        mutant="summed over the batch"),
    bug("clip_loss", "caption logits not scaled", CL + CL_NORM + '''    sims = image_embeds @ text_embeds.T
    targets = torch.arange(len(sims))
    loss_i = F.cross_entropy(logit_scale.exp() * sims, targets)
    loss_t = F.cross_entropy(sims.T, targets)
    return (loss_i + loss_t) / 2
''', mutant="caption logits not scaled"),
    bug("clip_loss", "normalised in place (the caller's embeddings)", CL +
        '''    image_embeds /= image_embeds.norm(dim=-1, keepdim=True)
    text_embeds /= text_embeds.norm(dim=-1, keepdim=True)
''' + CL_LOGITS + CL_TAIL, expect=INPLACE, kind="in-place"),
    bug("clip_loss", "an epsilon added to the norm", sub(
        CL_BODY, (CL_NORM,
                  "    image_embeds = image_embeds / (image_embeds.norm(dim=-1, keepdim=True) + 1e-3)\n"
                  "    text_embeds = text_embeds / (text_embeds.norm(dim=-1, keepdim=True) + 1e-3)\n")),
        expect=("epsilon",)),
    bug("clip_loss", "norms over the batch axis, by hand", sub(
        CL_BODY, (CL_NORM, "    image_embeds = image_embeds / image_embeds.norm(dim=0, keepdim=True)\n"
                           "    text_embeds = text_embeds / text_embeds.norm(dim=0, keepdim=True)\n")),
        mutant="normalised along the batch axis"),
    bug("clip_loss", "logits_per_text's cross-entropy only", CL + CL_NORM +
        '''    logits_per_text = logit_scale.exp() * text_embeds @ image_embeds.T
    return F.cross_entropy(logits_per_text, torch.arange(len(logits_per_text)))
''', mutant="captions pick images only"),
    alt("clip_loss", "the scale clamped at 100 as CLIP's training code does", sub(
        CL_BODY, (CL_LOGITS, "    logits = logit_scale.clamp(max=math.log(100)).exp()"
                             " * image_embeds @ text_embeds.T\n"))),
    alt("clip_loss", "exp(t) clamped at 100", sub(
        CL_BODY, (CL_LOGITS,
                  "    logits = logit_scale.exp().clamp(max=100) * image_embeds @ text_embeds.T\n"))),
    alt("clip_loss", "logsumexp minus the diagonal", CL + CL_NORM + CL_LOGITS +
        '''    diag = logits.diagonal()
    loss_i = (torch.logsumexp(logits, dim=1) - diag).mean()
    loss_t = (torch.logsumexp(logits, dim=0) - diag).mean()
    return (loss_i + loss_t) / 2
'''),
]

# ----------------------------------------------------------------------------- 08.5 zero_shot_logits
ZS = "def zero_shot_logits(image_embeds, prompt_embeds, logit_scale):\n"
ZS_PROMPTS = "    prompts = F.normalize(prompt_embeds, dim=-1)\n"
ZS_CLASSES = "    classes = F.normalize(prompts.mean(dim=1), dim=-1)\n"
ZS_IMAGES = "    images = F.normalize(image_embeds, dim=-1)\n"
ZS_RETURN = "    return logit_scale.exp() * images @ classes.T\n"
ZS_BODY = ZS + ZS_PROMPTS + ZS_CLASSES + ZS_IMAGES + ZS_RETURN
ZERO_SHOT = [
    bug("zero_shot_logits", "per-prompt logits averaged", ZS + ZS_PROMPTS + ZS_IMAGES +
        "    sims = torch.einsum('bd,cpd->bcp', images, prompts)\n"
        "    return logit_scale.exp() * sims.mean(dim=-1)\n",
        mutant="class embedding not renormalised"),  # the same numbers: images · the mean of unit prompts
    bug("zero_shot_logits", "best prompt per class (max)", ZS + ZS_PROMPTS + ZS_IMAGES +
        "    sims = torch.einsum('bd,cpd->bcp', images, prompts)\n"
        "    return logit_scale.exp() * sims.amax(dim=-1)\n",
        mutant="best prompt per class"),
    bug("zero_shot_logits", "class embeddings normalised over the classes", sub(
        ZS_BODY, (ZS_CLASSES, "    classes = F.normalize(prompts.mean(dim=1), dim=0)\n")),
        mutant="class embeddings normalised along the class axis"),
    bug("zero_shot_logits", "an epsilon added to the image norm", sub(
        ZS_BODY, (ZS_IMAGES,
                  "    images = image_embeds / (image_embeds.norm(dim=-1, keepdim=True) + 1e-3)\n")),
        expect=("epsilon",)),
    alt("zero_shot_logits", "the scale clamped at 100 as CLIP's training code does", sub(
        ZS_BODY, (ZS_RETURN,
                  "    return logit_scale.clamp(max=math.log(100)).exp() * images @ classes.T\n"))),
    alt("zero_shot_logits", "sum over the prompts, torch.linalg.norm", ZS +
        "    prompts = prompt_embeds / torch.linalg.norm(prompt_embeds, dim=-1, keepdim=True)\n"
        "    classes = prompts.sum(dim=-2)\n"
        "    classes = classes / torch.linalg.norm(classes, dim=-1, keepdim=True)\n"
        "    images = image_embeds / torch.linalg.norm(image_embeds, dim=-1, keepdim=True)\n"
        "    return torch.exp(logit_scale) * torch.einsum('bd,cd->bc', images, classes)\n"),
]

# ----------------------------------------------------------------------------- 08.6 eot_pool
EOT = "def eot_pool(hidden, ids, eot_id):\n"
EOT_POOL = [
    bug("eot_pool", "nonzero columns (one <eot> per row assumed)", EOT +
        "    cols = (ids == eot_id).nonzero()[:, 1]\n"
        "    return hidden[torch.arange(hidden.shape[0]), cols]\n",
        expect=("first occurrence", "more than once")),
    bug("eot_pool", "argmax without dim (a flat index)", EOT +
        "    at = (ids == eot_id).int().argmax()\n"
        "    return hidden[:, at % ids.shape[1]]\n",
        expect=("flat index", "without dim", "dim=-1")),
    bug("eot_pool", "the book's end-of-text id hard-coded (2)", EOT +
        "    first = (ids == 2).int().argmax(dim=-1)\n"
        "    return hidden[torch.arange(hidden.shape[0]), first]\n",
        expect=("hard-coded", "the eot_id argument", "eot_id you are given")),
    bug("eot_pool", "position before <eot>", EOT +
        "    first = (ids == eot_id).int().argmax(dim=-1) - 1\n"
        "    return hidden[torch.arange(hidden.shape[0]), first]\n",
        expect=("position before the row's first <eot>",)),
    bug("eot_pool", "cumsum == 1 keeps the padding after <eot>", EOT +
        "    keep = (ids == eot_id).cumsum(dim=-1) == 1\n"
        "    return (hidden * keep[..., None]).sum(dim=1)\n",
        expect=("after the first <eot>", "positions after", "padding after")),
    bug("eot_pool", "gather index not expanded over d", EOT +
        "    first = (ids == eot_id).int().argmax(dim=-1)\n"
        "    return hidden.gather(1, first.view(-1, 1, 1)).squeeze(1)\n",
        expect=("gather", "expand", "shape (2, 1)")),
    alt("eot_pool", "list.index per row", EOT +
        "    rows = [h[row.tolist().index(eot_id)] for h, row in zip(hidden, ids)]\n"
        "    return torch.stack(rows)\n"),
    alt("eot_pool", "argmin of the non-<eot> mask", EOT +
        "    first = (ids != eot_id).int().argmin(dim=-1)\n"
        "    return hidden[torch.arange(len(ids)), first]\n"),
    alt("eot_pool", "cumsum == 1 and the <eot> itself", EOT +
        "    is_eot = ids == eot_id\n"
        "    keep = is_eot & (is_eot.cumsum(dim=-1) == 1)\n"
        "    return (hidden * keep[..., None].to(hidden.dtype)).sum(dim=1)\n"),
]

# ----------------------------------------------------------------------------- 09.1 LoRALinear
LORA = '''class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, r=8, alpha=16, bias=True):
        super().__init__()
        self.base = nn.Linear(in_features, out_features, bias=bias)
        self.base.requires_grad_(False)
        self.scaling = alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, in_features))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.lora_B = nn.Parameter(torch.zeros(out_features, r))
        self.merged = False

    def forward(self, x):
        h = self.base(x)
        if self.merged:
            return h
        return h + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)

    @torch.no_grad()
    def merge(self):
        if not self.merged:
            self.base.weight += self.scaling * self.lora_B @ self.lora_A
            self.merged = True

    @torch.no_grad()
    def unmerge(self):
        if self.merged:
            self.base.weight -= self.scaling * self.lora_B @ self.lora_A
            self.merged = False
'''
LORA_LINEAR = [
    bug("LoRALinear", "scaling = alpha // r (integer division)", sub(
        LORA, ("self.scaling = alpha / r", "self.scaling = alpha // r")),
        mutant="scale as an integer division"),
    bug("LoRALinear", "merge without the scaling", sub(
        LORA, ("self.base.weight += self.scaling * self.lora_B @ self.lora_A",
               "self.base.weight += self.lora_B @ self.lora_A")),
        mutant="merge without the scale"),
    bug("LoRALinear", "unmerge adds ΔW again", sub(
        LORA, ("self.base.weight -= self.scaling * self.lora_B @ self.lora_A",
               "self.base.weight += self.scaling * self.lora_B @ self.lora_A")),
        expect=("unmerge() subtracts",)),
    bug("LoRALinear", "only the weight frozen (bias trainable)", sub(
        LORA, ("self.base.requires_grad_(False)", "self.base.weight.requires_grad = False")),
        expect=("bias",)),
    bug("LoRALinear", "A ~ N(0, 1/d_in)", sub(
        LORA, ("        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))\n",
               "        nn.init.normal_(self.lora_A, std=1 / math.sqrt(in_features))\n")),
        expect=("Kaiming-uniform",)),
    alt("LoRALinear", "A taken from a fresh nn.Linear(d_in, r)", sub(
        LORA, ("        self.lora_A = nn.Parameter(torch.empty(r, in_features))\n"
               "        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))\n",
               "        self.lora_A = nn.Parameter(\n"
               "            nn.Linear(in_features, r, bias=False).weight.detach().clone())\n"))),
    alt("LoRALinear", "F.linear with the frozen weight, scaling stored as alpha and r", sub(
        LORA, ("        self.scaling = alpha / r\n",
               "        self.alpha, self.r = alpha, r\n        self.scaling = self.alpha / self.r\n"),
        ("        h = self.base(x)\n", "        h = F.linear(x, self.base.weight, self.base.bias)\n"),
        ("        return h + self.scaling * (x @ self.lora_A.T @ self.lora_B.T)\n",
         "        return h + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scaling\n"))),
]

# ----------------------------------------------------------------------------- 09.2 is_target
IT = "def is_target(name, target_modules):\n    import re\n\n"
IS_TARGET = [
    bug("is_target", "a tuple taken as a regex (isinstance list)", IT +
        "    if isinstance(target_modules, list):\n"
        "        return any(name == t or name.endswith('.' + t) for t in target_modules)\n"
        "    return re.fullmatch(target_modules, name) is not None\n",
        expect=("tuple", "set", "not a string", "anything else"), kind="type"),
    bug("is_target", "returns after the first entry", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.fullmatch(target_modules, name) is not None\n"
        "    for t in target_modules:\n"
        "        return name == t or name.endswith('.' + t)\n"
        "    return False\n",
        mutant="returns after the first entry"),
    bug("is_target", "an entry matched anywhere among the dotted parts", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.fullmatch(target_modules, name) is not None\n"
        "    return any(t in name.split('.') for t in target_modules)\n",
        expect=("compare the end of the name", "ends with")),
    bug("is_target", "None instead of False", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.fullmatch(target_modules, name) is not None\n"
        "    for t in target_modules:\n"
        "        if name == t or name.endswith('.' + t):\n"
        "            return True\n",
        expect=("bool", "None", "False"), kind="type"),
    bug("is_target", "the regex escaped", IT +
        "    if isinstance(target_modules, str):\n"
        "        return re.fullmatch(re.escape(target_modules), name) is not None\n"
        "    return any(name == t or name.endswith('.' + t) for t in target_modules)\n",
        expect=("escape", "the pattern first", "no name matches")),
    alt("is_target", "every dotted suffix of the name, a set intersection", IT +
        "    if isinstance(target_modules, str):\n"
        "        return bool(re.fullmatch(target_modules, name))\n"
        "    parts = name.split('.')\n"
        "    suffixes = {'.'.join(parts[i:]) for i in range(len(parts))}\n"
        "    return not suffixes.isdisjoint(target_modules)\n", kind="type"),
    alt("is_target", "a compiled pattern, a loop for the names", IT +
        "    if type(target_modules) is str:\n"
        "        return re.compile(target_modules).fullmatch(name) is not None\n"
        "    for t in target_modules:\n"
        "        if name == t or name.endswith(f'.{t}'):\n"
        "            return True\n"
        "    return False\n"),
]

# ----------------------------------------------------------------------------- 09.6 energy_shares
ES = "def energy_shares(matrix):\n"
ES_BODY = ES + '''    s = torch.linalg.svdvals(matrix)
    top = s[..., :1]
    s = s / torch.where(top > 0, top, torch.ones_like(top))
    energy = s * s
    total = energy.sum(-1, keepdim=True)
    return energy / torch.where(total > 0, total, torch.ones_like(total))
'''
ENERGY = [
    bug("energy_shares", "the largest σ of the whole batch as the divisor", sub(
        ES_BODY, ("    top = s[..., :1]\n", "    top = s.max()\n")),
        expect=("whole batch", "each matrix", "per matrix", "that element alone")),
    bug("energy_shares", "σ₁ clamped at 1e-12", sub(
        ES_BODY, ("    s = s / torch.where(top > 0, top, torch.ones_like(top))\n",
                  "    s = s / top.clamp(min=1e-12)\n")),
        expect=("clamp", "1e-12", "threshold")),
    bug("energy_shares", "F.normalize(σ) squared", ES +
        "    return F.normalize(torch.linalg.svdvals(matrix), dim=-1) ** 2\n",
        expect=("overflow", "F.normalize")),
    bug("energy_shares", "computed in float32 (.float())", sub(
        ES_BODY, ("torch.linalg.svdvals(matrix)", "torch.linalg.svdvals(matrix.float())")),
        expect=("dtype", "float64", "float32"), kind="type"),
    alt("energy_shares", "where after the division", ES + '''    s = torch.linalg.svdvals(matrix)
    s = s / s.amax(dim=-1, keepdim=True)
    energy = s ** 2
    total = energy.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, energy / total, torch.zeros_like(energy))
'''),
    alt("energy_shares", "in float64, back to the input's dtype", ES +
        '''    s = torch.linalg.svdvals(matrix.double())
    s = s / s[..., :1].clamp(min=torch.finfo(torch.float64).tiny)
    e = s ** 2
    return (e / e.sum(-1, keepdim=True).clamp(min=torch.finfo(torch.float64).tiny)).to(matrix.dtype)
''', kind="type"),
]

# ----------------------------------------------------------------------------- 09.3 nf4_code_book
NF = "def nf4_code_book(offset=0.9677083):\n"
NF_POS = "    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])\n"
NF_NEG = "    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])\n"
NF_CAT = "    values = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values\n"
NF_RET = "    return (values / values.max()).float()\n"
NF_BODY = NF + NF_POS + NF_NEG + NF_CAT + NF_RET
NF4 = [
    bug("nf4_code_book", "not sorted (the positive side descending)", sub(
        NF_BODY, (".sort().values", "")), expect=("sort", "order", "ascending")),
    bug("nf4_code_book", "divided by the default's largest quantile (1.848)", sub(
        NF_BODY, (NF_RET, "    return (values / 1.8481).float()\n")),
        expect=("hard-coded", "proportional", "a constant")),
    bug("nf4_code_book", "divided by the minimum", sub(
        NF_BODY, (NF_RET, "    return (values / values.min()).float()\n")),
        expect=("negated", "minimum")),
    bug("nf4_code_book", "negative side from 1 - offset, negated as well", sub(
        NF_BODY, (NF_NEG, "    negative = -torch.special.ndtri(\n"
                          "        torch.linspace(1 - offset, 0.5, 8, dtype=torch.float64)[:-1])\n")),
        expect=("sign", "negative values")),
    alt("nf4_code_book", "both halves with their zeros, torch.unique", NF +
        "    p = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64))\n"
        "    n = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64))\n"
        "    values = torch.unique(torch.cat([n, p]))\n"
        "    return (values / values.abs().max()).to(torch.float32)\n"),
    alt("nf4_code_book", "erfinv, √2 dropped (it cancels)", NF +
        "    p_pos = torch.linspace(0.5, offset, 9, dtype=torch.float64)[1:]\n"
        "    p_neg = torch.linspace(0.5, offset, 8, dtype=torch.float64)[1:]\n"
        "    pos = torch.erfinv(2 * p_pos - 1)\n"
        "    neg = -torch.erfinv(2 * p_neg - 1)\n"
        "    values, _ = torch.sort(torch.cat([neg, pos, pos.new_zeros(1)]))\n"
        "    return (values / pos.max()).float()\n"),
]

# ----------------------------------------------------------------------------- 09.4 quantize_blockwise
QB = "def quantize_blockwise(w, code, blocksize=64):\n"
QB_BLOCKS = "    blocks = w.detach().reshape(-1, blocksize).float()\n"
QB_ABSMAX = "    absmax = blocks.abs().amax(dim=1)\n"
QB_SCALED = "    scaled = blocks * (1.0 / absmax.clamp(min=1e-38))[:, None]\n"
QB_RET = ("    midpoints = (code[:-1] + code[1:]) / 2\n"
          "    return torch.bucketize(scaled.reshape(-1), midpoints).to(torch.uint8), absmax\n")
QB_BODY = QB + QB_BLOCKS + QB_ABSMAX + QB_SCALED + QB_RET
QUANTIZE = [
    bug("quantize_blockwise", "absmax clamped at 1e-8", sub(
        QB_BODY, (QB_SCALED, "    scaled = blocks / absmax.clamp(min=1e-8)[:, None]\n")),
        expect=("1e-8", "clamp", "threshold")),
    bug("quantize_blockwise", "blocks under 1e-8 treated as zero", sub(
        QB_BODY, (QB_SCALED, "    safe = torch.where(absmax > 1e-8, absmax, torch.ones_like(absmax))\n"
                             "    scaled = blocks / safe[:, None]\n")),
        expect=("1e-8", "clamp", "threshold")),
    bug("quantize_blockwise", "constants in the weight's dtype", sub(
        QB_BODY, (QB_BLOCKS, "    blocks = w.detach().reshape(-1, blocksize)\n"),
        (QB_SCALED, "    scaled = blocks.float() * (1.0 / absmax.float().clamp(min=1e-38))[:, None]\n")),
        expect=("float32",), kind="type"),
    bug("quantize_blockwise", "view (a transposed weight)", sub(
        QB_BODY, ("w.detach().reshape(-1, blocksize)", "w.detach().view(-1, blocksize)")),
        expect=("contiguous", "view", "reshape"), kind="layout"),
    bug("quantize_blockwise", "blocksize hard-coded (64)", sub(
        QB_BODY, ("reshape(-1, blocksize)", "reshape(-1, 64)")),
        expect=("hard-coded", "the blocksize argument")),
    alt("quantize_blockwise", "searchsorted on the midpoints, scale by 1/c", QB +
        "    x = w.detach().float().flatten().view(-1, blocksize)\n"
        "    c = x.abs().max(dim=1).values\n"
        "    inv = torch.where(c > 0, 1.0 / c, torch.zeros_like(c))\n"
        "    mids = (code[1:] + code[:-1]) / 2\n"
        "    idx = torch.searchsorted(mids, (x * inv[:, None]).flatten().contiguous())\n"
        "    return idx.to(torch.uint8), c\n"),
    alt("quantize_blockwise", "argmin over the distances, a division by c (float32)", QB +
        "    blocks = w.detach().float().reshape(-1, blocksize)\n"
        "    absmax = blocks.abs().amax(dim=1)\n"
        "    x = blocks / torch.where(absmax > 0, absmax, torch.ones_like(absmax))[:, None]\n"
        "    idx = (x.reshape(-1, 1) - code).abs().argmin(dim=1)\n"
        "    return idx.to(torch.uint8), absmax\n"),
    alt("quantize_blockwise", "bfloat16 weights upcast first, a loop over the blocks", QB +
        "    flat = w.detach().to(torch.float32).reshape(-1)\n"
        "    mids = (code[:-1] + code[1:]) / 2\n"
        "    idx, consts = [], []\n"
        "    for block in flat.split(blocksize):\n"
        "        c = block.abs().max()\n"
        "        x = block * (1 / c) if c > 0 else torch.zeros_like(block)\n"
        "        idx.append(torch.bucketize(x, mids))\n"
        "        consts.append(c)\n"
        "    return torch.cat(idx).to(torch.uint8), torch.stack(consts)\n", kind="type"),
]

# ----------------------------------------------------------------------------- 09.5 double_quantize
DQ = "def double_quantize(absmax, code, blocksize=256):\n"
DQ_MEAN = "    mean = absmax.mean()\n"
DQ_CENTRE = "    centred = absmax - mean\n"
DQ_PAD = "    pad = (-centred.numel()) % blocksize\n"
DQ_TAIL = ("    indices, absmax2 = quantize_blockwise(F.pad(centred, (0, pad)), code, blocksize)\n"
           "    return indices[:absmax.numel()], absmax2, mean\n")
DQ_BODY = DQ + DQ_MEAN + DQ_CENTRE + DQ_PAD + DQ_TAIL
DOUBLE = [
    bug("double_quantize", "a whole block of padding when n is a multiple", sub(
        DQ_BODY, (DQ_PAD, "    pad = blocksize - centred.numel() % blocksize\n")),
        expect=("multiple of", "extra block", "whole block of zeros")),
    bug("double_quantize", "blocksize argument ignored (256)", sub(
        DQ_BODY, (DQ_PAD, "    pad = (-centred.numel()) % 256\n"),
        ("code, blocksize)", "code, 256)")),
        expect=("not QLoRA's 256",)),
    bug("double_quantize", "mean with keepdim (shape (1,))", sub(
        DQ_BODY, (DQ_MEAN, "    mean = absmax.mean(dim=0, keepdim=True)\n")),
        expect=("0-d", "shape (1,), expected ()")),
    bug("double_quantize", "self-contained, the scale clamped at 1e-8", DQ + DQ_MEAN + DQ_CENTRE +
        DQ_PAD + '''    blocks = F.pad(centred, (0, pad)).view(-1, blocksize)
    absmax2 = blocks.abs().amax(dim=1)
    scaled = blocks / absmax2.clamp(min=1e-8)[:, None]
    idx = torch.bucketize(scaled.flatten(), (code[:-1] + code[1:]) / 2)
    return idx[:absmax.numel()].to(torch.uint8), absmax2, mean
''', expect=("1e-8", "clamp", "threshold")),
    alt("double_quantize", "padded with the mean before centring", DQ + DQ_MEAN +
        "    pad = -absmax.numel() % blocksize\n" +
        "    padded = F.pad(absmax, (0, pad), value=float(mean))\n"
        "    indices, absmax2 = quantize_blockwise(padded - mean, code, blocksize)\n"
        "    return indices[:len(absmax)], absmax2, mean\n"),
    alt("double_quantize", "torch.cat of zeros, ceil by negative floor division", DQ + DQ_MEAN +
        "    n = absmax.numel()\n"
        "    n_blocks = -(-n // blocksize)\n"
        "    centred = torch.cat([absmax - mean, absmax.new_zeros(n_blocks * blocksize - n)])\n"
        "    indices, absmax2 = quantize_blockwise(centred, code, blocksize)\n"
        "    return indices[:n], absmax2, mean\n"),
]

VARIANTS = [*PATCHIFY, *EMBEDDING, *ROLLOUT, *CLIP, *ZERO_SHOT, *EOT_POOL, *LORA_LINEAR,
            *IS_TARGET, *ENERGY, *NF4, *QUANTIZE, *DOUBLE]
