"""Chapter 8, notebook 08a (the Vision Transformer) — ``patchify``, ``ViTEmbedding`` and
``attention_rollout``.

``patchify``: the authority is ``F.unfold`` with kernel = stride = P, transposed to
(B, N, C·P·P): its patches are the windows of a strided convolution in row-major order, each
flattened in (channel, row, column) order, the layout of a ``nn.Conv2d`` weight (d_model, C, P, P)
flattened to (d_model, C·P·P). ``tests/test_ch08_vit_clip.py`` also checks it against Hugging
Face's ViT patch embedding.

``ViTEmbedding`` (z₀ = [x_class; x_p E] + E_pos): the authority is Hugging Face's
``transformers.models.vit.modeling_vit.ViTEmbeddings``, built from a small ``ViTConfig`` (an
(H, W) image size, no dropout; nothing is downloaded) with the case's weights ported under
coursekit's names, those of ``vit_from_hf`` (``tests/test_ch08_vit_clip.py``) without the
``patch_embed.`` prefix: ``patch_embeddings.projection`` -> ``proj`` (the Conv2d of
``coursekit.models.vit.PatchEmbedding``), ``cls_token`` -> ``cls_token``,
``position_embeddings`` -> ``pos_embed``. The solution is the package's ``PatchEmbedding`` with
the [CLS] token and the positions of ``ViT.embed``. Transformers is imported when a case first
builds the reference, not when the suites load.

``attention_rollout`` (Abnar & Zuidema 2020): the reference transcribes the authors' released
``compute_joint_attention`` (github.com/samiraabnar/attention_flow, attention_graph_util.py:
add the identity to each layer's head-averaged attention, renormalise the rows, multiply each
new layer from the left) in torch, batched, with the identity's weight generalised from their
fixed one half to the ``residual`` argument: Â = residual·I + (1 − residual)·Ā, rows
renormalised. The solution is the package's ``coursekit.models.vit.attention_rollout``; on
attention weights (rows summing to one) the renormalisation changes nothing, so the two agree.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from coursekit.grading.suite import Case, Mutant, Suite, backward, in_dtype, load_parameters
from coursekit.models import vit


def unfold_patches(images, patch_size):
    """F.unfold's windows of a stride-P convolution: (B, C·P·P, N) -> (B, N, C·P·P)."""
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)


def _variant(*, grid="rows", inside="c,r,col", naive=False):
    """A wrong patchify, one bug switched on by the arguments."""

    def variant(images, patch_size):
        B, C, H, W = images.shape
        P = patch_size
        if naive:  # cut the flattened image into consecutive chunks
            return images.reshape(B, (H // P) * (W // P), C * P * P)
        x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, rows, P, cols, P)
        grid_axes = (2, 4) if grid == "rows" else (4, 2)
        inside_axes = {"c,r,col": (1, 3, 5), "r,col,c": (3, 5, 1), "c,col,r": (1, 5, 3)}[inside]
        x = x.permute(0, *grid_axes, *inside_axes)
        return x.reshape(B, (H // P) * (W // P), C * P * P)

    return variant


def _case(B, C, H, W, P, by_hand=False):
    def make(g):
        if by_hand:
            return torch.arange(float(B * C * H * W)).reshape(B, C, H, W), P
        return torch.randn(B, C, H, W, generator=g), P

    return make


CASES = [
    Case("by hand: one 4x4 image holding 0..15, P = 2", _case(1, 1, 4, 4, 2, by_hand=True)),
    Case("B=2, C=1, 8x8, P=2", _case(2, 1, 8, 8, 2)),
    Case("three channels, 8x8, P=4", _case(2, 3, 8, 8, 4),
         hint="Inside a patch the features go channel by channel: all P·P pixels of channel 0 "
              "(row by row), then channel 1, ...: the order of a Conv2d weight (C, P, P)."),
    Case("non-square image: 4x8, P=2", _case(2, 2, 4, 8, 2),
         hint="Patches are numbered row by row over the grid: n = r·(W/P) + c. With H ≠ W the "
              "grid has H/P rows and W/P columns; keep the two apart."),
    Case("P = 1: every pixel a token", _case(1, 2, 3, 5, 1)),
    Case("P = H = W: one patch", _case(3, 2, 4, 4, 4)),
]
# What an observation implies for patchify, where it implies one thing.
PATCH_READINGS = (
    # 9 = (4 − 2 + 1)²: every 2 x 2 window of the 4 x 4 image, one pixel apart
    (r"'by hand: one 4x4 image holding 0\.\.15, P = 2', your output has shape \(1, 9, 4\)",
     "Your output holds 9 patches of 4 values, every 2 x 2 window of the 4 x 4 image one pixel "
     "apart: the windows overlap. Patches are cut side by side, a step of P (unfold(2, P, P), or "
     "the reshape into (H/P, P))."),
)

# The patches are the images' numbers rearranged: they keep the images' dtype.
CASES.append(in_dtype(
    CASES[2], torch.float64,
    hint="This case passes float64 images: the patches are the same numbers rearranged, so they "
         "come back in the images' dtype. A buffer made with torch.zeros(...) or torch.empty(...) "
         "is float32 unless you pass dtype=images.dtype (images.new_zeros(...) keeps it)."))

# ----------------------------------------------------------------------------- 08.3 ViTEmbedding

# the exercise's parameter names -> ViTEmbeddings' (transformers.models.vit)
HF_EMBEDDING_NAMES = {"proj.weight": "patch_embeddings.projection.weight",
                      "proj.bias": "patch_embeddings.projection.bias",
                      "cls_token": "cls_token", "pos_embed": "position_embeddings"}
EMBEDDING_NAMES = tuple(HF_EMBEDDING_NAMES)


class HFViTEmbedding(nn.Module):
    """The authority: Hugging Face's ``ViTEmbeddings`` (from a ``ViTConfig`` with an (H, W) image
    size and no dropout) behind the exercise's interface and parameter names."""

    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__()
        from transformers import ViTConfig
        from transformers.models.vit.modeling_vit import ViTEmbeddings

        config = ViTConfig(image_size=tuple(image_size), patch_size=patch_size,
                           num_channels=in_channels, hidden_size=d_model, num_hidden_layers=1,
                           num_attention_heads=1, intermediate_size=d_model,
                           hidden_dropout_prob=0.0)
        with torch.random.fork_rng(devices=[]):  # its random init leaves the caller's RNG alone
            self.embeddings = ViTEmbeddings(config)

    def load_state_dict(self, state, strict=True, assign=False):
        return self.embeddings.load_state_dict(
            {HF_EMBEDDING_NAMES.get(k, k): v for k, v in state.items()}, strict=strict,
            assign=assign)

    def named_parameters(self, *args, **kwargs):
        inverse = {v: k for k, v in HF_EMBEDDING_NAMES.items()}
        for name, p in nn.Module.named_parameters(self, *args, **kwargs):
            name = name.removeprefix("embeddings.")
            yield inverse.get(name, name), p

    def forward(self, images):
        return self.embeddings(images)


class ViTEmbedding(vit.PatchEmbedding):
    """coursekit's: the package's PatchEmbedding (a Conv2d, kernel = stride = P, flattened to
    (B, N, d_model)), then the [CLS] token and the learned positions of ``ViT.embed``."""

    def __init__(self, image_size, patch_size, in_channels, d_model):
        super().__init__(patch_size, in_channels, d_model)
        H, W = image_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, (H // patch_size) * (W // patch_size) + 1,
                                                  d_model))

    def forward(self, images):
        patches = super().forward(images)  # (B, N, d_model)
        cls = self.cls_token.expand(images.shape[0], -1, -1)  # (B, 1, d_model)
        return torch.cat([cls, patches], dim=1) + self.pos_embed


def run_embedding(cls, args):
    image_size, patch_size, in_channels, d_model, *weights, images = args
    module = cls(image_size, patch_size, in_channels, d_model)
    load_parameters(module, dict(zip(EMBEDDING_NAMES, weights, strict=True)))
    # trained through (the ViT learns E, x_class and E_pos): the gradients of z₀ with respect
    # to the images and to every parameter are compared too
    return backward(module, (images,), {"images": 0}, params=True)


def _embedding_case(B, C, H, W, P, d, scale=1.0):
    def make(g):
        n = (H // P) * (W // P)
        weights = [0.5 * torch.randn(d, C, P, P, generator=g), 0.5 * torch.randn(d, generator=g),
                   torch.randn(1, 1, d, generator=g), torch.randn(1, n + 1, d, generator=g)]
        images = scale * torch.rand(B, C, H, W, generator=g)
        return ((H, W), P, C, d, *weights, images)

    return make


def _embedding_observe(expected, got):
    """What is observably wrong with z₀ (output 0): only the patch tokens, with [CLS] (token 0)
    right; or every token normalised (mean 0, variance 1 over its features, as after a
    LayerNorm) where z₀ is not. Empty otherwise."""
    e, a = expected[0], got[0]
    if a.shape != e.shape or a.dim() != 3 or not torch.isfinite(a).all():
        return ""
    close = torch.isclose(a, e, atol=1e-5, rtol=1e-4).all(-1)  # (B, N + 1)
    if a.shape[1] > 1 and bool(close[:, 0].all()) and not bool(close[:, 1:].any()):
        return ("Token 0 of your output, [CLS] with its position embedding, is right; every patch "
                "token (1..N) is wrong, so look at what happens to the patches before the "
                "positions are added")
    mean, var = a.mean(-1), a.var(-1, unbiased=False)
    if a.shape[-1] > 2 and bool((mean.abs() < 1e-3).all() & ((var - 1).abs() < 1e-2).all()) \
            and not bool((e.mean(-1).abs() < 1e-3).all()):
        return ("Every token of your output has mean 0 and variance 1 over its d_model features, "
                "as after a LayerNorm; ViT's z₀ is not normalised (its first block's LayerNorm "
                "comes later)")
    return ""


def _embedding_variant(*, cls_at="front", cls_position=True, tokens="flatten", bias=True):
    """A wrong ViTEmbedding, one bug switched on by the arguments."""

    class Variant(ViTEmbedding):
        def forward(self, images):
            B, P = images.shape[0], self.patch_size
            grid = F.conv2d(images, self.proj.weight, self.proj.bias if bias else None, stride=P)
            if tokens == "reshape":  # (B, d, rows, cols) read as (B, N, d) without transposing
                patches = grid.reshape(B, -1, grid.shape[1])
            elif tokens == "columns":  # patches numbered column by column
                patches = grid.transpose(2, 3).flatten(2).transpose(1, 2)
            else:
                patches = grid.flatten(2).transpose(1, 2)
            cls = self.cls_token.expand(B, -1, -1)
            if not cls_position:  # positions added to the patches only
                return torch.cat([cls, patches + self.pos_embed[:, 1:]], dim=1)
            parts = [cls, patches] if cls_at == "front" else [patches, cls]
            return torch.cat(parts, dim=1) + self.pos_embed

    Variant.__name__ = Variant.__qualname__ = "ViTEmbedding"
    return Variant


NON_SQUARE_HINT = ("With H ≠ W keep the grid's H/P rows and W/P columns apart: N = (H/P)·(W/P) "
                   "patches (pos_embed has N + 1 rows), and the patch tokens are the Conv2d's "
                   "output grid read row by row, (B, d_model, H/P, W/P) -> flatten(2) -> "
                   "transpose(1, 2) -> (B, N, d_model).")

EMBEDDING_CASES = [
    Case("C=1, 8x8 images, P=2, d_model=16 (the chapter's ViT)", _embedding_case(2, 1, 8, 8, 2, 16)),
    Case("three channels, 8x12 (wider than tall), P=4",
         _embedding_case(2, 3, 8, 12, 4, 8),
         hint=NON_SQUARE_HINT),
    Case("12x8 (taller than wide), C=2, P=2, d_model=5",
         _embedding_case(3, 2, 12, 8, 2, 5),
         hint=NON_SQUARE_HINT),
    Case("B=1, three channels, 4x4, P=2", _embedding_case(1, 3, 4, 4, 2, 6),
         hint="With B = 1 the batch axis is still there: the output is (1, N + 1, d_model)."),
    Case("one patch: P = H = W (two tokens)", _embedding_case(2, 2, 4, 4, 4, 8)),
    Case("P = 1: every pixel a token, 3x5", _embedding_case(2, 1, 3, 5, 1, 4)),
    Case("pixel values up to 1000", _embedding_case(2, 3, 8, 8, 4, 8, scale=1000.0)),
]

# ----------------------------------------------------------------------------- 08.4 rollout


def joint_attention(weights, residual=0.5):
    """Abnar & Zuidema's compute_joint_attention (attention_flow/attention_graph_util.py),
    transcribed to torch and batched: heads averaged, the identity mixed in with weight
    ``residual`` (theirs: A + I, i.e. one half), rows renormalised, then
    joint[i] = aug[i] @ joint[i − 1]; the last layer's joint attention is returned."""
    att_mat = torch.stack(list(weights)).mean(dim=2)  # (L, B, N, N)
    residual_att = torch.eye(att_mat.shape[-1], dtype=att_mat.dtype)[None, None]
    aug_att_mat = residual * residual_att + (1 - residual) * att_mat
    aug_att_mat = aug_att_mat / aug_att_mat.sum(dim=-1)[..., None]
    joint = aug_att_mat[0]
    for i in range(1, aug_att_mat.shape[0]):
        joint = aug_att_mat[i] @ joint
    return joint


def _rollout_observe(expected, got):
    """'every row sums to c' when the submission's rows all sum to one constant other than 1
    (the rollout of attention maps is row-stochastic); else empty."""
    e, a = expected[0], got[0]
    if a.shape != e.shape or not torch.isfinite(a).all():
        return ""
    sums, wanted = a.sum(-1), e.sum(-1)
    if not torch.allclose(wanted, torch.ones_like(wanted), atol=1e-4):
        return ""
    c = sums.mean()
    if (sums - c).abs().max() > 1e-4 * max(1.0, float(c.abs())) or abs(float(c) - 1) < 1e-3:
        return ""
    return (f"Every row of your output sums to {float(c):.4g}; the rows of the rollout sum to 1 "
            "(each Â_ℓ's rows sum to 1, and so do those of a product of such matrices)")


def _rollout_variant(*, identity=True, renormalise=True, order="later on the left",
                     heads="mean", swapped=False):
    """A wrong rollout, one bug switched on by the arguments."""

    def attention_rollout(weights, residual=0.5):
        rollout = None
        for w in weights:
            a = w.mean(dim=1) if heads == "mean" else w.max(dim=1).values
            eye = torch.eye(a.shape[-1])
            if not identity:  # the attention maps alone
                pass
            elif not renormalise:  # the identity added, the rows left summing to 2
                a = a + eye
            elif swapped:
                a = (1 - residual) * eye + residual * a
            else:
                a = residual * eye + (1 - residual) * a
            if rollout is None:
                rollout = a
            else:
                rollout = a @ rollout if order == "later on the left" else rollout @ a
        return rollout

    return attention_rollout


def _rollout_case(B, L, H, N, residual=None, sharp=1.0, by_hand=False):
    def make(g):
        if by_hand:
            weights = [torch.tensor([[[[0.5, 0.5], [0.1, 0.9]]]]),
                       torch.tensor([[[[0.8, 0.2], [0.3, 0.7]]]])]
        else:
            weights = [torch.softmax(sharp * torch.randn(B, H, N, N, generator=g), dim=-1)
                       for _ in range(L)]
        return (weights,) if residual is None else (weights, residual)

    return make


RESIDUAL_HINT = ("Use the residual argument as the identity's weight: Â_ℓ = residual·I + "
                 "(1 − residual)·Ā_ℓ. residual = 0 leaves the plain product of the head-averaged "
                 "maps, residual = 1 the identity.")

ROLLOUT_CASES = [
    Case("by hand: 2 layers, 1 head, N=2, residual 0.5", _rollout_case(1, 2, 1, 2, 0.5,
                                                                        by_hand=True)),
    Case("B=2, 2 layers, 4 heads, N=5", _rollout_case(2, 2, 4, 5, 0.5)),
    Case("one layer, 3 heads", _rollout_case(2, 1, 3, 4, 0.5),
         hint="Average the heads (the mean over dim 1) before mixing in the identity."),
    Case("4 layers, 1 head: the order of the product", _rollout_case(2, 4, 1, 4, 0.5),
         hint="Each new layer multiplies from the left, R = Â_L ··· Â_2 Â_1 (rollout = Â_ℓ @ "
              "rollout): matrix products do not commute."),
    Case("residual = 0", _rollout_case(2, 3, 2, 4, 0.0), hint=RESIDUAL_HINT),
    Case("residual = 1", _rollout_case(1, 2, 2, 3, 1.0), hint=RESIDUAL_HINT),
    Case("residual = 0.2", _rollout_case(2, 3, 4, 5, 0.2), hint=RESIDUAL_HINT),
    Case("residual left to its default (0.5)", _rollout_case(2, 2, 2, 4),
         hint="residual defaults to 0.5: attention_rollout(weights) mixes I and Ā_ℓ half and "
              "half."),
    Case("B=1, 3 layers, 4 heads, N=17 (the chapter's ViT)", _rollout_case(1, 3, 4, 17, 0.5)),
    Case("sharp attention: scores of large magnitude, rows near one-hot",
         _rollout_case(2, 3, 4, 6, 0.5, sharp=30.0)),
]
# Attention maps may come in float64 (an analysis in double precision): R keeps their dtype.
ROLLOUT_CASES.append(in_dtype(
    ROLLOUT_CASES[1], torch.float64,
    hint="This case passes float64 attention maps: make the identity (and any matrix you start "
         "the product from) in their dtype, torch.eye(N, dtype=w.dtype), so that R comes back "
         "float64 (a float32 matrix times a float64 one raises in a matmul)."))

# What an observation implies for the rollout, where it implies one thing.
ROLLOUT_READINGS = (
    (r"is the transpose of the expected one",
     "Your output is R transposed: row i of R says how much output token i draws on each input "
     "token (row 0 is [CLS]'s). A transpose is extra somewhere, of a map, of the product or of "
     "the result."),
    (r"'B=2, 2 layers, 4 heads, N=5', your output has shape \(4, 5, 5\)",
     "Your output's first axis has 4 entries where the batch has 2; in this case 4 is the number "
     "of heads (and of layers times images). Each map is (B, H, N, N): average over the heads, "
     "dim 1 (not dim 0, the batch), and multiply the L layers' maps, so that R is (B, N, N)."),
    (r"shape \((\d+), 1, (\d+), \2\), expected \(\1, \2, \2\)",
     "Your output still has a head axis, (B, 1, N, N) with one head: average the heads away, "
     "weights[ℓ].mean(dim=1) without keepdim=True, so that each Â_ℓ and R are (B, N, N)."),
    (r"shape \((\d+), (\d+)\), expected \(\1, \2, \2\)",
     "Your output is (B, N), one axis short: return the whole matrix R, (B, N, N), not one row "
     "of it or a sum over one of its axes (the figure reads row 0 afterwards)."),
)

SUITES = [
    Suite(
        exercise="08.1",
        name="patchify",
        points=2,
        reference=unfold_patches,
        solution=vit.patchify,
        cases=CASES,
        readings=PATCH_READINGS,
        arg_names=("images", "patch_size"),
        hint="Split H into (H/P, P) and W into (W/P, P), permute to (B, rows, cols, C, P, P), then "
             "flatten to (B, N, C·P·P).",
        mutants=[
            Mutant("plain reshape", _variant(naive=True),
                   "A plain reshape cuts the image into runs of consecutive pixels (rows of the "
                   "image), not P x P squares: split each spatial axis into (grid, P) and permute "
                   "before flattening."),
            Mutant("columns before rows", _variant(grid="cols"),
                   "Your patches are numbered column by column. The order is row-major over the "
                   "grid, as a convolution's output flattened: patch n = r·(W/P) + c."),
            Mutant("channels last inside a patch", _variant(inside="r,col,c"),
                   "Your patch features are (row, column, channel), channels last, as in "
                   "einops' 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)'. The book's (and a Conv2d "
                   "weight's) order is (channel, row, column)."),
            Mutant("pixels inside a patch transposed", _variant(inside="c,col,r"),
                   "Inside a patch your pixels go column by column; flatten each patch row by "
                   "row: permute to (..., C, P_row, P_col)."),
        ],
    ),
    Suite(
        exercise="08.3",
        name="ViTEmbedding",
        points=3,
        reference=HFViTEmbedding,
        solution=ViTEmbedding,
        call=run_embedding,
        arg_names=("image_size", "patch_size", "in_channels", "d_model", *EMBEDDING_NAMES,
                   "images"),
        cases=EMBEDDING_CASES,
        observe=_embedding_observe,
        hint="z₀ = [x_class; x_p E] + E_pos: the Conv2d's output (B, d_model, H/P, W/P) flattened "
             "to (B, N, d_model), cls_token expanded to (B, 1, d_model) and put in front "
             "(torch.cat on dim 1), then pos_embed (1, N + 1, d_model) added to every token.",
        mutants=[
            Mutant("[CLS] appended at the end", _embedding_variant(cls_at="back"),
                   "Your [CLS] token comes last. It goes in front, token 0: "
                   "torch.cat([cls, patches], dim=1); the classifier reads position 0."),
            Mutant("[CLS] without its position embedding", _embedding_variant(cls_position=False),
                   "Your [CLS] token gets no position embedding: E_pos has N + 1 rows, row 0 is "
                   "the [CLS] token's. Prepend [CLS] first, then add all of pos_embed."),
            Mutant("conv output reshaped, not transposed", _embedding_variant(tokens="reshape"),
                   "You reshape the Conv2d's output (B, d_model, H/P, W/P) straight to (B, N, "
                   "d_model), which mixes features and patches. Flatten the grid, then swap the "
                   "axes: .flatten(2).transpose(1, 2)."),
            Mutant("patches numbered column by column", _embedding_variant(tokens="columns"),
                   "Your patch tokens go column by column over the grid. The order is row-major, "
                   "as the Conv2d's output flattens: token 1 + r·(W/P) + c is the patch at grid "
                   "row r, column c."),
            Mutant("patch bias left out", _embedding_variant(bias=False),
                   "Your patch embedding leaves out the bias: x_p E + b, the Conv2d with its "
                   "bias (self.proj(images), or F.conv2d(..., self.proj.bias, stride=P))."),
        ],
    ),
    Suite(
        exercise="08.4",
        name="attention_rollout",
        points=2,
        reference=joint_attention,
        solution=vit.attention_rollout,
        cases=ROLLOUT_CASES,
        observe=_rollout_observe,
        readings=ROLLOUT_READINGS,
        arg_names=("weights", "residual"),
        hint="Per layer: Ā_ℓ = the mean of weights[ℓ] over the heads (dim 1), Â_ℓ = residual·I + "
             "(1 − residual)·Ā_ℓ; then R = Â_L ··· Â_1, each new layer multiplied from the "
             "left. Returns (B, N, N).",
        mutants=[
            Mutant("no identity added", _rollout_variant(identity=False),
                   "Your rollout multiplies the attention maps alone. Each block also passes its "
                   "input on through the residual connection: mix in the identity, Â_ℓ = "
                   "residual·I + (1 − residual)·Ā_ℓ."),
            Mutant("identity added, rows not renormalised", _rollout_variant(renormalise=False),
                   "Your Ā_ℓ + I has rows that sum to 2, so the rollout grows by 2 per layer. "
                   "Weight the two paths so that each row still sums to 1: residual·I + "
                   "(1 − residual)·Ā_ℓ."),
            Mutant("product in the wrong order", _rollout_variant(order="earlier on the left"),
                   "Your product runs the wrong way, Â_1 ··· Â_L. A later layer acts on the "
                   "output of the earlier ones, so it multiplies from the left: "
                   "R = Â_L ··· Â_1 (rollout = Â_ℓ @ rollout)."),
            Mutant("heads max instead of mean", _rollout_variant(heads="max"),
                   "You take the maximum over the heads. Rollout averages them: "
                   "weights[ℓ].mean(dim=1)."),
            Mutant("residual weight on the attention", _rollout_variant(swapped=True),
                   "Your weights are swapped: residual is the weight of the identity (the "
                   "residual path), Â_ℓ = residual·I + (1 − residual)·Ā_ℓ."),
        ],
    ),
]
