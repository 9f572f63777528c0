"""The Vision Transformer (Dosovitskiy et al., 2021): an image read as a sequence of patches.

An image (B, C, H, W) is cut into N = (H/P)·(W/P) square patches of P x P pixels; each patch,
flattened to C·P·P numbers, is mapped linearly to a d_model-vector (the *patch embedding*). A
learned ``[CLS]`` vector is put in front, learned position embeddings are added, and the
sequence of N + 1 tokens goes through the Pre-LN encoder of Chapter 6
(:class:`coursekit.transformer.Encoder`). The classifier reads the final ``[CLS]`` token.

Patch order (the book's convention, and that of a strided ``nn.Conv2d`` followed by
``flatten(2).transpose(1, 2)``): patches in row-major order over the (H/P) x (W/P) grid, and
inside a patch the features in the order (channel, row, column) -- ``F.unfold``'s order.

Weight-compatible with ``transformers.ViTForImageClassification`` (:func:`vit_from_hf`) and,
with ``pre_norm=True, patch_bias=False``, with the vision tower of ``transformers.CLIPModel``
(see :mod:`coursekit.models.clip`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.transformer import Encoder, LayerNorm


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """images: (B, C, H, W) -> patches (B, N, C·P·P), N = (H/P)·(W/P).

    Patch n = r·(W/P) + c is the one at grid row r, column c (row-major); its features are in the
    order (channel, pixel row, pixel column), as in ``F.unfold`` and in a Conv2d's flattened
    weight (d_model, C, P, P) -> (d_model, C·P·P).
    """
    B, C, H, W = images.shape
    P = patch_size
    if H % P or W % P:
        raise ValueError(f"image {H}x{W} is not divisible into {P}x{P} patches")
    x = images.reshape(B, C, H // P, P, W // P, P)  # (B, C, rows, P, cols, P)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, P, P)
    return x.reshape(B, (H // P) * (W // P), C * P * P)


class PatchEmbedding(nn.Module):
    """A linear map of each flattened patch to d_model, written as a Conv2d with kernel = stride
    = P (one output position per patch; the same numbers as ``patchify(x) @ W.T + b`` with
    W = ``proj.weight.flatten(1)``). (B, C, H, W) -> (B, N, d_model)."""

    def __init__(self, patch_size: int, in_channels: int, d_model: int, bias: bool = True) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size,
                              bias=bias)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, d_model, rows, cols) -> (B, N, d_model)


class ViT(nn.Module):
    """Patch embedding, ``[CLS]`` + learned positions, Pre-LN encoder, final LayerNorm, head.

    z_0 = [x_cls; x_1 E; ...; x_N E] + E_pos,  z_ℓ = Block_ℓ(z_{ℓ-1}),  y = head(LN(z_L)[0]).

    ``pre_norm`` adds CLIP's LayerNorm on z_0 (before the first block); ``patch_bias=False`` is
    CLIP's bias-free patch projection; ``n_classes=None`` leaves the head out and ``forward``
    returns the normalised ``[CLS]`` vector (B, d_model), which CLIP projects.
    HF ViT's defaults are the exact GELU and LayerNorm ε = 1e-12.

    Variants (the defaults are the ViT paper's, and Hugging Face's):

    - ``pos="learned"``: a free vector per position (``pos_embed``, a parameter);
      ``pos="sincos"``: fixed 2-D sin-cos embeddings (:func:`sincos_2d_pos_embed`, MAE's layout,
      ``pos_embed`` a buffer, zero for ``[CLS]``); ``pos="none"``: no position information at all,
      so that the encoder sees a bag of patches (``pos_embed`` is None).
    - ``pool="cls"``: the head reads the final ``[CLS]`` token; ``pool="mean"``: there is no
      ``[CLS]`` token (``cls_token`` is None, the sequence is the N patch tokens) and the head reads
      the mean of LN(z_L) over the patch tokens: global average pooling, as in the ViT paper's
      Appendix D.3 and in Beyer et al. (2022).
    """

    def __init__(self, image_size: int = 8, patch_size: int = 2, in_channels: int = 1,
                 d_model: int = 64, n_heads: int = 4, n_layers: int = 4, d_ff: int | None = None,
                 n_classes: int | None = 10, dropout: float = 0.0, activation: str = "gelu",
                 eps: float = 1e-12, pre_norm: bool = False, patch_bias: bool = True,
                 pos: str = "learned", pool: str = "cls") -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} is not a multiple of patch_size={patch_size}")
        if pos not in ("learned", "sincos", "none"):
            raise ValueError(f"pos={pos!r}: expected 'learned', 'sincos' or 'none'")
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool={pool!r}: expected 'cls' or 'mean'")
        self.image_size, self.patch_size, self.pos, self.pool = image_size, patch_size, pos, pool
        side = image_size // patch_size
        self.n_patches = side * side
        n_prefix = 1 if pool == "cls" else 0  # the [CLS] token, if any
        self.patch_embed = PatchEmbedding(patch_size, in_channels, d_model, bias=patch_bias)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d_model)) if n_prefix else None
        if pos == "learned":
            self.pos_embed = nn.Parameter(0.02 * torch.randn(1, self.n_patches + n_prefix, d_model))
        elif pos == "sincos":
            table = sincos_2d_pos_embed((side, side), d_model)  # (N, d_model)
            table = torch.cat([torch.zeros(n_prefix, d_model), table])[None]  # [CLS]'s row: zeros
            self.register_buffer("pos_embed", table)
        else:
            self.pos_embed = None
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = LayerNorm(d_model, eps) if pre_norm else None
        self.encoder = Encoder(n_layers, d_model, n_heads, d_ff or 4 * d_model, dropout,
                               activation, norm_first=True, final_norm=True, eps=eps)
        self.head = nn.Linear(d_model, n_classes) if n_classes else None

    def embed(self, images: Tensor) -> Tensor:
        """(B, C, H, W) -> z_0: (B, N + 1, d_model), the [CLS] token first ((B, N, d_model) with
        ``pool="mean"``, which has no [CLS] token)."""
        z = self.patch_embed(images)  # (B, N, d_model)
        if self.cls_token is not None:
            cls = self.cls_token.expand(images.shape[0], -1, -1)  # (B, 1, d_model)
            z = torch.cat([cls, z], dim=1)
        if self.pos_embed is not None:
            z = z + self.pos_embed
        z = self.dropout(z)
        return self.pre_norm(z) if self.pre_norm is not None else z

    def features(self, images: Tensor, need_weights: bool = False,
                 ) -> tuple[Tensor, list[Tensor] | None]:
        """(B, C, H, W) -> LN(z_L): (B, N + 1, d_model) and, with ``need_weights``, every
        layer's attention weights (B, H, N + 1, N + 1)."""
        return self.encoder(self.embed(images), need_weights=need_weights)

    def forward(self, images: Tensor) -> Tensor:
        """(B, C, H, W) -> logits (B, n_classes), or the pooled vector (B, d_model) without head:
        the final [CLS] token, or with ``pool="mean"`` the mean of the final patch tokens."""
        z = self.features(images)[0]  # (B, N + 1, d_model), or (B, N, d_model) without [CLS]
        pooled = z[:, 0] if self.pool == "cls" else z.mean(dim=1)  # (B, d_model)
        return self.head(pooled) if self.head is not None else pooled


def sincos_2d_pos_embed(grid: tuple[int, int], d_model: int, temperature: float = 10000.0) -> Tensor:
    """Fixed 2-D sin-cos position embeddings for a (rows, cols) patch grid -> (rows·cols, d_model),
    patches in row-major order, laid out as MAE's (He et al., 2022) code lays them out.

    Each half of the features encodes one grid coordinate with Chapter 5's sinusoids: the first
    d_model/2 the column, the second d_model/2 the row, each as [sin(p·ω_f) | cos(p·ω_f)] with
    ω_f = temperature^(−f/(d_model/4)), f = 0, ..., d_model/4 − 1 (MAE's code calls the first half
    "h", but its grid puts the column there; Hugging Face's ``ViTMAEEmbeddings`` keeps this layout).
    Beyer et al.'s big_vision has the same layout with ω_f = temperature^(−f/(d_model/4 − 1)).
    """
    if d_model % 4:
        raise ValueError(f"d_model={d_model} is not a multiple of 4")
    rows, cols = grid
    omega = temperature ** (-torch.arange(d_model // 4, dtype=torch.float64) / (d_model // 4))
    r, c = torch.meshgrid(torch.arange(rows, dtype=torch.float64),
                          torch.arange(cols, dtype=torch.float64), indexing="ij")  # (rows, cols)
    angles_c = c.flatten()[:, None] * omega  # (N, d_model/4): column · ω_f
    angles_r = r.flatten()[:, None] * omega  # (N, d_model/4): row · ω_f
    table = torch.cat([angles_c.sin(), angles_c.cos(), angles_r.sin(), angles_r.cos()], dim=1)
    return table.float()


def attention_rollout(weights: list[Tensor], residual: float = 0.5) -> Tensor:
    """Abnar & Zuidema's (2020) attention rollout: how much each output token draws on each input
    token through all layers, attention and residual paths together.

    Per layer, average the heads and mix in the residual: Â_ℓ = residual·I + (1 − residual)·Ā_ℓ
    (rows still sum to 1); then R = Â_L ··· Â_1. weights: per layer (B, H, N, N) -> R (B, N, N).
    """
    rollout = None
    for w in weights:
        a = w.mean(dim=1)  # (B, N, N): heads averaged
        a = residual * torch.eye(a.shape[-1], device=a.device) + (1 - residual) * a
        rollout = a if rollout is None else a @ rollout
    return rollout


def interpolate_pos_embed(pos_embed: Tensor, new_grid: tuple[int, int],
                          old_grid: tuple[int, int] | None = None, n_prefix: int = 1,
                          mode: str = "bicubic") -> Tensor:
    """Learned position embeddings resized to a new patch grid, for images of another size.

    Dosovitskiy et al. (2021, Sec. 3.2) fine-tune at a higher resolution with the same patch size,
    so the grid grows, and "perform 2D interpolation of the pre-trained position embeddings,
    according to their location in the original image". As Hugging Face's
    ``ViTEmbeddings.interpolate_pos_encoding`` does: the first ``n_prefix`` rows (``[CLS]``) are
    kept as they are; the others, laid out as the (H_0, W_0) grid in row-major order, are resized
    as a d_model-channel image with ``F.interpolate(size=new_grid, mode="bicubic",
    align_corners=False)`` (the old and the new grid cover the same image area; each new cell
    centre is placed where it falls on the old grid, and taps beyond the border repeat the border
    cells). ``mode="nearest"`` copies each new cell's nearest old embedding instead.

    pos_embed: (1, n_prefix + H_0·W_0, d_model); new_grid: (H_1, W_1) patches; old_grid defaults
    to a square grid -> (1, n_prefix + H_1·W_1, d_model).
    """
    prefix, grid = pos_embed[:, :n_prefix], pos_embed[:, n_prefix:]
    n, d = grid.shape[1], grid.shape[2]
    if old_grid is None:
        side = round(n ** 0.5)
        if side * side != n:
            raise ValueError(f"{n} positions are not a square grid: give old_grid")
        old_grid = (side, side)
    if old_grid[0] * old_grid[1] != n:
        raise ValueError(f"old_grid {old_grid} does not hold {n} positions")
    image = grid.reshape(1, *old_grid, d).permute(0, 3, 1, 2)  # (1, d_model, H_0, W_0)
    align = False if mode in ("bilinear", "bicubic") else None
    image = F.interpolate(image, size=tuple(new_grid), mode=mode, align_corners=align)
    grid = image.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], d)  # row-major again
    return torch.cat([prefix, grid], dim=1)


# ----------------------------------------------------------------------------- Hugging Face


def encoder_layers_from_hf(hf_encoder: nn.Module) -> dict[str, Tensor]:
    """The blocks of a HF ViT, ViTMAE or CLIP tower under coursekit's names: q, k, v concatenated
    into the packed ``in_proj`` (W^Q; W^K; W^V). ``hf_encoder`` is anything
    :func:`coursekit.hf_compat.vit_layers` reads (the model, the tower or its list of layers),
    which knows the layouts of Transformers 4 and 5."""
    from coursekit.hf_compat import vit_layers

    state = {}
    for i, layer in enumerate(vit_layers(hf_encoder)):
        qkv = [layer.q, layer.k, layer.v]
        p = f"encoder.layers.{i}."
        state[p + "self_attn.in_proj.weight"] = torch.cat([m.weight for m in qkv])
        state[p + "self_attn.in_proj.bias"] = torch.cat([m.bias for m in qkv])
        state[p + "self_attn.out_proj.weight"] = layer.o.weight
        state[p + "self_attn.out_proj.bias"] = layer.o.bias
        state[p + "norm1.weight"], state[p + "norm1.bias"] = layer.norm1.weight, layer.norm1.bias
        state[p + "norm2.weight"], state[p + "norm2.bias"] = layer.norm2.weight, layer.norm2.bias
        state[p + "ff.linear1.weight"], state[p + "ff.linear1.bias"] = layer.fc1.weight, layer.fc1.bias
        state[p + "ff.linear2.weight"], state[p + "ff.linear2.bias"] = layer.fc2.weight, layer.fc2.bias
    return state


def vit_from_hf(hf_model: nn.Module) -> ViT:
    """A coursekit :class:`ViT` carrying the weights of a ``transformers.ViTForImageClassification``
    (qkv_bias=True, exact GELU, no pooler)."""
    cfg = hf_model.config
    if cfg.hidden_act != "gelu":
        raise ValueError(f"hidden_act={cfg.hidden_act!r}: coursekit's ViT uses the exact GELU")
    model = ViT(cfg.image_size, cfg.patch_size, cfg.num_channels, cfg.hidden_size,
                cfg.num_attention_heads, cfg.num_hidden_layers, cfg.intermediate_size,
                cfg.num_labels, eps=cfg.layer_norm_eps)
    vit = hf_model.vit
    emb = vit.embeddings
    state = {
        "patch_embed.proj.weight": emb.patch_embeddings.projection.weight,
        "patch_embed.proj.bias": emb.patch_embeddings.projection.bias,
        "cls_token": emb.cls_token, "pos_embed": emb.position_embeddings,
        "encoder.norm.weight": vit.layernorm.weight, "encoder.norm.bias": vit.layernorm.bias,
        "head.weight": hf_model.classifier.weight, "head.bias": hf_model.classifier.bias,
        **encoder_layers_from_hf(vit),
    }
    model.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    return model.eval()
