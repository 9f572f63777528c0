"""Chapter 8a: position embeddings resized to a new patch grid, against Hugging Face.

The authority is ``transformers.ViTEmbeddings.interpolate_pos_encoding`` (bicubic,
``align_corners=False``, ``[CLS]`` kept apart), and ``ViTForImageClassification`` run with
``interpolate_pos_encoding=True``, on a small random config whose weights are redrawn with std 0.5
(nothing is downloaded).
"""

import re

import pytest
import torch
import torch.nn.functional as F
import transformers  # the authority: a broken install fails these tests, never skips them

from coursekit.models.vit import ViT, interpolate_pos_embed, vit_from_hf

transformers.logging.set_verbosity_error()


def hf_vit(seed: int = 0) -> transformers.ViTForImageClassification:
    config = transformers.ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=16,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=32, num_labels=10)
    model = transformers.ViTForImageClassification(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = 0.5 * torch.randn(p.shape, generator=g)
            p.copy_(1 + noise if re.search(r"layernorm\w*\.weight$", name) else noise)
    return model.eval()


@pytest.mark.parametrize("pixels", [(16, 16), (12, 20), (6, 6)])
def test_interpolate_pos_embed_equals_hugging_face(pixels):
    """4x4 grid -> 8x8 (2x), 6x10 (non-square, non-integer factors), 3x3 (smaller)."""
    hf = hf_vit()
    emb = hf.vit.embeddings
    height, width = pixels
    grid = (height // 2, width // 2)
    tokens = torch.zeros(1, 1 + grid[0] * grid[1], 16)  # HF reads only its shape
    with torch.no_grad():
        theirs = emb.interpolate_pos_encoding(tokens, height, width)
        ours = interpolate_pos_embed(emb.position_embeddings, grid)
    assert ours.shape == theirs.shape == (1, 1 + grid[0] * grid[1], 16)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-6)
    assert torch.equal(ours[:, 0], emb.position_embeddings[:, 0])  # [CLS] untouched


def test_vit_at_a_new_resolution_equals_hf_interpolate_pos_encoding():
    """A coursekit ViT built for 16x16 images, carrying the 8x8 model's weights with its position
    embeddings interpolated, gives HF's logits for ``interpolate_pos_encoding=True``."""
    hf = hf_vit(seed=1)
    small = vit_from_hf(hf)
    big = ViT(image_size=16, patch_size=2, in_channels=1, d_model=16, n_heads=4, n_layers=2,
              d_ff=32, n_classes=10)
    state = small.state_dict()
    state["pos_embed"] = interpolate_pos_embed(state["pos_embed"], (8, 8))
    big.load_state_dict(state)
    big.eval()
    x = torch.rand(4, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = hf(pixel_values=x, interpolate_pos_encoding=True).logits
        ours = big(x)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_interpolate_pos_embed_same_grid_is_identity_and_nearest_copies_cells():
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(1, 1 + 16, 8, generator=g)
    assert torch.equal(interpolate_pos_embed(pos, (4, 4)), pos)  # cubic weights (0, 1, 0, 0)
    near = interpolate_pos_embed(pos, (8, 8), mode="nearest")[0, 1:].reshape(8, 8, 8)
    old = pos[0, 1:].reshape(4, 4, 8)
    assert torch.equal(near, old.repeat_interleave(2, 0).repeat_interleave(2, 1))
    # a non-square old grid, given explicitly, against F.interpolate on the (d, H, W) image
    pos = torch.randn(1, 1 + 2 * 3, 5, generator=g)
    out = interpolate_pos_embed(pos, (4, 5), old_grid=(2, 3))
    image = pos[0, 1:].reshape(2, 3, 5).permute(2, 0, 1)[None]
    want = F.interpolate(image, size=(4, 5), mode="bicubic", align_corners=False)
    torch.testing.assert_close(out[0, 1:], want[0].permute(1, 2, 0).reshape(20, 5))
    with pytest.raises(ValueError):
        interpolate_pos_embed(torch.randn(1, 1 + 6, 5), (4, 4))  # 6 is not a square
