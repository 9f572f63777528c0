"""4-bit NormalFloat (NF4) quantisation, as QLoRA stores a frozen base model (Dettmers et al., 2023).

A weight tensor is cut into blocks of 64 values. Each block keeps its absolute maximum
c = max|w| (one float32 "quantisation constant") and, for every value, the 4-bit index of the
code-book entry nearest to w / c ∈ [−1, 1]::

    quantise:    i = argmin_j |w / c − q_j|          (16 code values q_0 < ... < q_15)
    dequantise:  ŵ = q_i · c

NF4's 16 values are normal quantiles at equally spaced probabilities, rescaled to [−1, 1]; 8 are
positive and 7 negative, so that 0 is represented exactly (:func:`nf4_code_book`). They are not
used equally often: the code book places the block's absmax at Φ⁻¹(0.9677) = 1.85σ, while the
absmax of 64 normal values is 2.6σ on average, so the inner levels take more of the weights than
the outer ones (1.7 % to 9.3 % per level on normal weights, an entropy of 3.88 of 4 bits; the
chapter measures it). The layout and the arithmetic are ``bitsandbytes``'
(``quantize_4bit(..., quant_type="nf4", blocksize=64)``: two indices per byte, the first in the
high nibble; ties go to the lower value), and the tests hold them equal: bit for bit with
bitsandbytes' published table; with the code book computed here (1.2e-7 from the table), a
weight that lies on a midpoint between two code values may round the other way (3 of 16.8
million normal weights).

*Double quantisation* stores the constants themselves in 8 bits, as QLoRA and bitsandbytes do
(``quantize_4bit(..., compress_statistics=True)``): subtract their mean, then quantise them
block-wise (blocks of 256) to bitsandbytes' 8-bit *dynamic* code (:func:`dynamic_map`, a float
format with a variable-length exponent). 32/64 = 0.5 extra bits per parameter become
8/64 + 32/(64·256) ≈ 0.127. bitsandbytes' CPU kernel rounds w / c to a grid of 2^16 points before
it looks the code up (:func:`snap_to_grid`); :func:`double_quantize` does the same by default, so
that its bytes, constants and dequantised weights equal bitsandbytes' on the CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# bitsandbytes' outermost probability (create_normal_map's default offset). The QLoRA paper does
# not give it; numerically it is ½(31/32 + 29/30), the mean of 1 − 1/(2·16) and 1 − 1/(2·15).
NF4_OFFSET = 0.9677083
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


def snap_to_grid(x: Tensor, bits: int = 16) -> Tensor:
    """x ∈ [−1, 1] rounded to the nearest of 2^bits evenly spaced points from −1 to 1 (a half-way
    value rounds up), in float32 as bitsandbytes' CPU kernel computes it: that kernel looks the
    code index of each of the 65,536 points up once per code book, then reads every w / c's index
    from the table, instead of searching the code for each value."""
    top = 2 ** bits - 1
    k = ((x.clamp(-1, 1) + 1.0) * 0.5 * float(top) + 0.5).to(torch.int32)  # truncation: floor
    return -1.0 + (2.0 * k) / top


def quantize_blockwise(w: Tensor, code: Tensor, blocksize: int = 64,
                       grid_bits: int | None = None) -> tuple[Tensor, Tensor]:
    """Block-wise absmax quantisation of ``w`` (any shape, numel divisible by ``blocksize``).

    ``grid_bits=16`` reproduces bitsandbytes' CPU kernel for 8-bit codes (:func:`snap_to_grid`
    first; a block of zeros gets index 0). -> indices (numel,) uint8 into ``code``, absmax
    (numel / blocksize,) float32.
    """
    blocks = w.detach().reshape(-1, blocksize).float()  # (n_blocks, blocksize)
    absmax = blocks.abs().amax(dim=1)
    scaled = torch.clamp(blocks * (1.0 / absmax.clamp(min=1e-38))[:, None], -1, 1)  # w / c
    if grid_bits is not None:
        scaled = snap_to_grid(scaled, grid_bits)
    bounds = (code[:-1] + code[1:]) / 2  # midpoints: nearest value, ties to the lower one
    indices = torch.bucketize(scaled, bounds)
    if grid_bits is not None:
        indices[absmax == 0] = 0
    return indices.reshape(-1).to(torch.uint8), absmax


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


def dynamic_map() -> Tensor:
    """bitsandbytes' signed 8-bit dynamic code (``create_dynamic_map()``), built by hand.

    The format behind it (Dettmers, 2015) is a float whose exponent has a variable length. Read an
    8-bit pattern as: a sign bit; then e zeros and a 1 (the indicator bit), which give the decade
    10^−e, e = 0, ..., 6; then the remaining 6 − e bits, a linear fraction: the middle of one of
    2^(6−e) equal bins of [0.1, 1]. So a magnitude near 1 has 64 values to choose from, near 10^−6
    one: relative precision is spent where the magnitudes are large, and the range still spans
    seven decades. Each sign gets 64 + 32 + ... + 1 = 127 values; bitsandbytes adds 0 and 1 to
    make 256 (so 1 is a code value and −1 is not). The 256 values are sorted, and a stored byte
    is an index into the sorted table (not the bit pattern above). -> (256,) float32, from −0.993
    to 1.
    """
    magnitudes = []
    for e in range(7):
        edges = torch.linspace(0.1, 1, 2 ** (6 - e) + 1)  # float32, as bitsandbytes computes it
        magnitudes.append(10.0 ** -e * ((edges[:-1] + edges[1:]) / 2))
    positive = torch.cat(magnitudes)  # 127 values
    return torch.cat([-positive, positive, torch.tensor([0.0, 1.0])]).sort().values


def double_quantize(absmax: Tensor, code: Tensor | None = None, blocksize: int = 256,
                    grid_bits: int | None = 16) -> tuple[Tensor, Tensor, Tensor]:
    """Quantise the constants: subtract their mean, then 8-bit block-wise absmax quantisation to
    ``code`` (default :func:`dynamic_map`) in blocks of ``blocksize``. With ``grid_bits=16`` the
    bytes are those of bitsandbytes' CPU kernel; ``grid_bits=None`` takes the nearest code value
    (bitsandbytes' PyTorch kernel). -> (indices (n,) uint8, absmax₂ (ceil(n / blocksize),), mean ())."""
    code = dynamic_map() if code is None else code
    mean = absmax.mean()
    centred = absmax - mean
    pad = (-centred.numel()) % blocksize  # zeros complete the last block (its absmax unchanged)
    indices, absmax2 = quantize_blockwise(F.pad(centred, (0, pad)), code, blocksize, grid_bits)
    return indices[:absmax.numel()], absmax2, mean


def double_dequantize(indices: Tensor, absmax2: Tensor, mean: Tensor, code: Tensor | None = None,
                      blocksize: int = 256) -> Tensor:
    """ĉ = code[i] · absmax₂ + mean, block by block (n,)."""
    code = dynamic_map() if code is None else code
    pad = (-indices.numel()) % blocksize
    values = dequantize_blockwise(F.pad(indices, (0, pad)), absmax2, code, blocksize)
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

    def __init__(self, linear: nn.Linear, blocksize: int = 64, double_quant: bool = True,
                 code: Tensor | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.blocksize, self.double_quant = blocksize, double_quant
        self.register_buffer("code", nf4_code_book() if code is None else code.float())
        indices, absmax = quantize_blockwise(linear.weight, self.code, blocksize)
        self.register_buffer("packed", pack_4bit(indices))
        if double_quant:
            q8, absmax2, mean = double_quantize(absmax)
            self.register_buffer("absmax_q", q8)
            self.register_buffer("absmax2", absmax2)
            self.register_buffer("absmax_mean", mean)
            self.register_buffer("code8", dynamic_map())
        else:
            self.register_buffer("absmax", absmax)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(),
                                                                  requires_grad=False)

    def constants(self) -> Tensor:
        if self.double_quant:
            return double_dequantize(self.absmax_q, self.absmax2, self.absmax_mean, self.code8)
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
        skip = {"code", "code8"} | ({"bias"} if self.bias is not None else set())  # shared tables
        return sum(t.numel() * t.element_size() for name, t in self.state_dict().items()
                   if name not in skip)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"blocksize={self.blocksize}, double_quant={self.double_quant}")


def quantize_model_(model: nn.Module, blocksize: int = 64, double_quant: bool = True) -> nn.Module:
    """Replace every frozen ``nn.Linear`` of ``model`` (the bases under LoRA layers included) by an
    :class:`NF4Linear`, in place. Trainable layers (a task head, the LoRA matrices) stay float32,
    as do embeddings and LayerNorms. A frozen output layer is quantised too, which QLoRA does not
    do (it keeps the output layer in 16 bits, as transformers' ``BitsAndBytesConfig`` does)."""
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
