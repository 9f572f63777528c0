"""4-bit NormalFloat (NF4) quantisation, as QLoRA stores a frozen base model (Dettmers et al., 2023).

A weight tensor is cut into blocks of 64 values. Each block keeps its absolute maximum
c = max|w| (one float32 "quantisation constant") and, for every value, the 4-bit index of the
code-book entry nearest to w / c ∈ [−1, 1]::

    quantise:    i = argmin_j |w / c − q_j|          (16 code values q_0 < ... < q_15)
    dequantise:  ŵ = q_i · c

NF4's 16 values are quantiles of the standard normal distribution, rescaled to [−1, 1], so that
each is used about equally often by normally distributed weights; 8 are positive and 7 negative,
so that 0 is represented exactly (:func:`nf4_code_book`). The layout and the arithmetic are
``bitsandbytes``' (``quantize_4bit(..., quant_type="nf4", blocksize=64)``: two indices per byte, the
first in the high nibble; ties go to the lower value), and the tests hold them equal: bit for bit
with bitsandbytes' published table; with the code book computed here (1.2e-7 from the table), a
weight that lies on a midpoint between two code values may round the other way (3 of 16.8
million normal weights).

*Double quantisation* stores the constants themselves in 8 bits (blocks of 256, after
subtracting their mean): 32/64 = 0.5 extra bits per parameter become 8/64 + 32/(64·256) ≈ 0.127.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NF4_OFFSET = 0.9677083  # the outermost quantile: (1 − 1/(2·15) + 1 − 1/(2·16)) / 2, from the paper
# bitsandbytes' published table (bitsandbytes.functional.get_4bit_type("nf4")), for the tests.
NF4_PUBLISHED = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
)


def nf4_code_book(offset: float = NF4_OFFSET) -> Tensor:
    """The 16 NF4 values, sorted: normal quantiles at equal steps of probability, scaled to [−1, 1].

    Positive side: Φ⁻¹ at 9 equally spaced probabilities from ``offset`` down to 1/2 (the last
    is 0, dropped here and kept once); negative side: −Φ⁻¹ at 8 from ``offset`` down to 1/2
    (the 1/2 dropped). Both sides are divided by the largest value, so the code runs from −1 to 1.
    -> (16,) float32.
    """
    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    values = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values
    return (values / values.max()).float()


def uniform_code_book(bits: int = 4) -> Tensor:
    """2^bits equally spaced values from −1 to 1 (a plain "int4" grid with absmax scaling)."""
    return torch.linspace(-1.0, 1.0, 2 ** bits)


def quantize_blockwise(w: Tensor, code: Tensor, blocksize: int = 64) -> tuple[Tensor, Tensor]:
    """Block-wise absmax quantisation of ``w`` (any shape, numel divisible by ``blocksize``).

    -> indices (numel,) uint8 into ``code``, absmax (numel / blocksize,) float32.
    """
    blocks = w.detach().reshape(-1, blocksize).float()  # (n_blocks, blocksize)
    absmax = blocks.abs().amax(dim=1)
    scaled = torch.clamp(blocks * (1.0 / absmax.clamp(min=1e-38))[:, None], -1, 1)  # w / c
    bounds = (code[:-1] + code[1:]) / 2  # midpoints: nearest value, ties to the lower one
    return torch.bucketize(scaled.reshape(-1), bounds).to(torch.uint8), absmax


def dequantize_blockwise(indices: Tensor, absmax: Tensor, code: Tensor, blocksize: int = 64,
                         shape: tuple[int, ...] | torch.Size | None = None) -> Tensor:
    """ŵ = code[i] · c, block by block; reshaped to ``shape`` when given."""
    values = code[indices.long()].reshape(-1, blocksize) * absmax[:, None]
    return values.reshape(shape if shape is not None else (-1,))


def pack_4bit(indices: Tensor) -> Tensor:
    """Two 4-bit indices per byte, the first in the high nibble (bitsandbytes' layout)."""
    return (indices[0::2] << 4) | indices[1::2]


def unpack_4bit(packed: Tensor) -> Tensor:
    return torch.stack([packed >> 4, packed & 0xF], dim=1).reshape(-1)


def double_quantize(absmax: Tensor, blocksize: int = 256) -> tuple[Tensor, Tensor, Tensor]:
    """Quantise the constants: subtract their mean, then 8-bit block-wise absmax (a linear code of
    255 values from −1 to 1) in blocks of ``blocksize``. -> (indices uint8, absmax₂, mean)."""
    mean = absmax.mean()
    centred = absmax - mean
    pad = (-centred.numel()) % blocksize  # the last block is padded with zeros
    indices, absmax2 = quantize_blockwise(F.pad(centred, (0, pad)), torch.linspace(-1, 1, 255),
                                          blocksize)
    return indices[:absmax.numel()], absmax2, mean


def double_dequantize(indices: Tensor, absmax2: Tensor, mean: Tensor, blocksize: int = 256) -> Tensor:
    pad = (-indices.numel()) % blocksize
    full = F.pad(indices, (0, pad))
    values = dequantize_blockwise(full, absmax2, torch.linspace(-1, 1, 255), blocksize)
    return values[:indices.numel()] + mean


def bits_per_parameter(blocksize: int = 64, double_quant: bool = False, blocksize2: int = 256) -> float:
    """4 bits per value plus the constants: 32/blocksize, or 8/blocksize + 32/(blocksize·blocksize2)."""
    if double_quant:
        return 4 + 8 / blocksize + 32 / (blocksize * blocksize2)
    return 4 + 32 / blocksize


class NF4Linear(nn.Module):
    """A frozen ``nn.Linear`` stored in NF4: packed 4-bit indices, one constant per 64 weights
    (optionally double-quantised), the bias in float32. The weight is dequantised on the fly in
    every forward pass, as QLoRA computes in 16 bits from 4-bit storage. x: (..., d_in) -> (..., d_out).
    """

    def __init__(self, linear: nn.Linear, blocksize: int = 64, double_quant: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.blocksize, self.double_quant = blocksize, double_quant
        self.register_buffer("code", nf4_code_book())
        indices, absmax = quantize_blockwise(linear.weight, self.code, blocksize)
        self.register_buffer("packed", pack_4bit(indices))
        if double_quant:
            q8, absmax2, mean = double_quantize(absmax)
            self.register_buffer("absmax_q", q8)
            self.register_buffer("absmax2", absmax2)
            self.register_buffer("absmax_mean", mean)
        else:
            self.register_buffer("absmax", absmax)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(),
                                                                  requires_grad=False)

    def constants(self) -> Tensor:
        if self.double_quant:
            return double_dequantize(self.absmax_q, self.absmax2, self.absmax_mean)
        return self.absmax

    @property
    def weight(self) -> Tensor:
        """The dequantised weight (d_out, d_in)."""
        return dequantize_blockwise(unpack_4bit(self.packed), self.constants(), self.code,
                                    self.blocksize, (self.out_features, self.in_features))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def storage_bytes(self) -> int:
        """Bytes of the stored weight (indices and constants; the bias is counted apart)."""
        skip = {"code"} | ({"bias"} if self.bias is not None else set())
        return sum(t.numel() * t.element_size() for name, t in self.state_dict().items()
                   if name not in skip)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"blocksize={self.blocksize}, double_quant={self.double_quant}")


def quantize_model_(model: nn.Module, blocksize: int = 64, double_quant: bool = True) -> nn.Module:
    """Replace every frozen ``nn.Linear`` of ``model`` (the bases under LoRA layers included) by an
    :class:`NF4Linear`, in place. Trainable layers (a task head, the LoRA matrices) stay float32,
    as do embeddings and LayerNorms (QLoRA quantises the linear layers)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and not module.weight.requires_grad \
                and module.weight.numel() % blocksize == 0:
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf,
                    NF4Linear(module, blocksize, double_quant))
    return model


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes of the model's linear weights by kind: float32 ``nn.Linear`` weights, NF4 storage."""
    out = {"float32 linear": 0, "nf4 linear": 0}
    for module in model.modules():
        if isinstance(module, nn.Linear):
            out["float32 linear"] += module.weight.numel() * 4
        elif isinstance(module, NF4Linear):
            out["nf4 linear"] += module.storage_bytes()
    return out


def quantization_error(w: Tensor, code: Tensor, blocksize: int = 64) -> float:
    """Root-mean-square error of block-wise absmax quantisation of ``w`` with ``code``."""
    indices, absmax = quantize_blockwise(w, code, blocksize)
    w_hat = dequantize_blockwise(indices, absmax, code, blocksize, w.shape)
    return math.sqrt(((w_hat - w) ** 2).mean().item())
