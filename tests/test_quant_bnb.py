"""coursekit.quant's double quantisation against bitsandbytes (CPU), byte for byte.

bitsandbytes stores the NF4 constants of ``quantize_4bit(..., compress_statistics=True)`` (and of
``bnb.nn.Linear4bit(compress_statistics=True)``) as: their mean (``offset``), then block-wise
8-bit quantisation of ``absmax - offset`` in blocks of 256 with its dynamic map. Its CPU kernel
rounds each w / c to a 16-bit grid before the look-up; coursekit does the same by default. Every
comparison here is exact: the packed 4-bit bytes, the quantised constants, absmax₂, the offset,
the dequantised weights and a layer's output.
"""

from __future__ import annotations

import logging

import pytest
import torch

from coursekit.quant import (
    NF4_PUBLISHED,
    NF4Linear,
    dequantize_blockwise,
    double_dequantize,
    double_quantize,
    dynamic_map,
    pack_4bit,
    quantize_blockwise,
    snap_to_grid,
)

logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
import bitsandbytes as bnb  # noqa: E402 (pinned in requirements.txt: a missing one fails, never skips)

bnbf = bnb.functional

NF4 = torch.tensor(NF4_PUBLISHED)  # bitsandbytes' table: the 4-bit part is then exact as well
SHAPES = [((512, 256), 64), ((300, 128), 32), ((256, 512), 128), ((96, 1024), 256),
          ((64, 4096), 1024), ((10, 64), 64), ((1000, 64), 64)]


def test_dynamic_map_equals_bitsandbytes():
    code = dynamic_map()
    assert torch.equal(code, bnbf.create_dynamic_map())
    positive = code[code > 0]
    assert code.numel() == 256 and code.unique().numel() == 256
    assert code.min() == -code[code < 1].max() and code.max() == 1.0  # 1 is there, −1 is not
    for e, count in enumerate([64, 32, 16, 8, 4, 2, 1]):  # values per decade 10^−e
        in_decade = ((positive >= 0.1 * 10.0 ** -e) & (positive < 10.0 ** -e)).sum().item()
        assert in_decade == count


def test_snap_to_grid_is_the_cpu_kernels_table():
    """The CPU kernel's indices equal ours with the 16-bit grid, on random values, on values within
    half a grid step of a grid point and on values below 1e-4 (where the dynamic map is finer than
    the grid), and differ from the exact nearest value's on some of them."""
    code = dynamic_map()
    g = torch.Generator().manual_seed(0)
    x = torch.rand(255 * 64, generator=g) * 2 - 1
    x[:2000] = snap_to_grid(x[:2000]) + 1.5e-5 * (torch.rand(2000, generator=g) - 0.5)
    x[2000:3000] = 1e-4 * (torch.rand(1000, generator=g) - 0.5)  # finer levels than the grid
    blocks = torch.cat([torch.ones(64, 1), x.reshape(64, 255)], 1).reshape(-1)  # absmax 1
    ref, state = bnbf.quantize_blockwise(blocks, code=code, blocksize=256)
    ours, absmax = quantize_blockwise(blocks, code, 256, grid_bits=16)
    assert torch.equal(ours, ref) and torch.equal(absmax, state.absmax)
    nearest, _ = quantize_blockwise(blocks, code, 256)
    assert (nearest != ref).sum() > 100, "the grid changes indices: the test can tell"


@pytest.mark.parametrize("std", [0.5, 0.02])
@pytest.mark.parametrize("shape,blocksize", SHAPES)
def test_double_quantisation_equals_bitsandbytes(shape, blocksize, std):
    W = std * torch.randn(shape, generator=torch.Generator().manual_seed(blocksize))
    packed, state = bnbf.quantize_4bit(W, blocksize=blocksize, quant_type="nf4",
                                       compress_statistics=True)
    indices, absmax = quantize_blockwise(W, NF4, blocksize)
    q8, absmax2, mean = double_quantize(absmax)
    assert torch.equal(pack_4bit(indices), packed.flatten())
    assert torch.equal(q8, state.absmax)
    assert torch.equal(absmax2, state.state2.absmax)
    assert torch.equal(mean, state.offset)
    assert torch.equal(state.state2.code, dynamic_map()) and state.state2.blocksize == 256
    W_hat = dequantize_blockwise(indices, double_dequantize(q8, absmax2, mean), NF4, blocksize,
                                 W.shape)
    assert torch.equal(W_hat, bnbf.dequantize_4bit(packed, state))


@pytest.mark.parametrize("std", [0.5, 0.02])
def test_nearest_differs_from_the_cpu_kernel_only_near_a_boundary(std):
    """Without the 16-bit grid, the indices are those of bitsandbytes' PyTorch kernel (the exact
    nearest value) and differ from the CPU kernel's for a few constants, by one level."""
    W = std * torch.randn(1024, 1024, generator=torch.Generator().manual_seed(1))
    _, state = bnbf.quantize_4bit(W, blocksize=64, quant_type="nf4", compress_statistics=True)
    _, absmax = quantize_blockwise(W, NF4)
    q8, _, _ = double_quantize(absmax, grid_bits=None)
    differ = q8 != state.absmax
    assert 0 < differ.float().mean() < 0.01
    assert (q8.int() - state.absmax.int()).abs().max() == 1


# Rows whose length is a multiple of the block: with blocks that span rows (e.g. (40, 96) in blocks
# of 64), bitsandbytes 0.50.2's CPU dequantisation disagrees with its own quantisation.
@pytest.mark.parametrize("std", [0.5, 0.02])
@pytest.mark.parametrize("shape,blocksize", [((96, 64), 64), ((300, 128), 32), ((256, 512), 128),
                                             ((48, 256), 256), ((64, 4096), 1024)])
def test_nf4_linear_equals_linear4bit_with_compressed_statistics(shape, blocksize, std):
    out_features, in_features = shape
    g = torch.Generator().manual_seed(3)
    linear = torch.nn.Linear(in_features, out_features)
    with torch.no_grad():
        linear.weight.copy_(std * torch.randn(shape, generator=g))
        linear.bias.copy_(torch.randn(out_features, generator=g))
    layer = bnb.nn.Linear4bit(in_features, out_features, compute_dtype=torch.float32,
                              compress_statistics=True, quant_type="nf4")
    layer.weight = bnb.nn.Params4bit(linear.weight.detach().clone(), requires_grad=False,
                                     blocksize=blocksize, compress_statistics=True,
                                     quant_type="nf4", module=layer)
    layer.bias = torch.nn.Parameter(linear.bias.detach().clone())
    layer = layer.to("cpu")  # quantises
    assert layer.weight.quant_state.nested and layer.weight.quant_state.blocksize == blocksize
    ours = NF4Linear(linear, blocksize=blocksize, code=NF4)
    x = torch.randn(2, 7, in_features, generator=g)
    with torch.no_grad():
        assert torch.equal(ours(x), layer(x))
        single = NF4Linear(linear, blocksize=blocksize, double_quant=False, code=NF4)
        assert not torch.equal(single(x), layer(x)), "the output depends on the 8-bit constants"
