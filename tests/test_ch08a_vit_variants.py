"""Chapter 8a: the ViT's variants -- fixed 2-D sin-cos positions, no positions, mean pooling.

The authority for the sin-cos table is Hugging Face's ``transformers.ViTMAEModel`` (MAE's fixed
embeddings, in the layout of MAE's released code), built from a small random config (nothing is
downloaded), and a whole ViT with ``pos="sincos"`` is checked against it with ported weights
(masking switched off). Mean pooling is checked against a mean taken by hand over ``features``;
the defaults are checked to leave the model of the ViT paper (and Hugging Face's) unchanged.
"""


import pytest
import torch
import transformers  # the authority: a broken install fails these tests, never skips them
from test_ch08_vit_clip import TOL, spread_  # the same tolerance and weight spread
from torch import nn

from coursekit.models.vit import ViT, encoder_layers_from_hf, patchify, sincos_2d_pos_embed

transformers.logging.set_verbosity_error()


def hf_mae(image_size=8, patch_size=2, hidden_size=32, layers=2):
    config = transformers.ViTMAEConfig(image_size=image_size, patch_size=patch_size, num_channels=1,
                                       hidden_size=hidden_size, num_hidden_layers=layers,
                                       num_attention_heads=4, intermediate_size=48, mask_ratio=0.0)
    model = transformers.ViTMAEModel(config).eval()
    # transformers 5 marks the patch projection initialised before it reaches the embeddings, and
    # then skips ViTMAEEmbeddings.initialize_weights, leaving the fixed table at zero: run it
    emb = model.embeddings
    emb.patch_embeddings.projection._is_hf_initialized = False
    emb.initialize_weights()
    assert emb.position_embeddings.abs().max() > 0.5, "ViTMAE's sin-cos table should be filled in"
    return model


@pytest.mark.parametrize("grid,d_model", [(4, 32), (3, 16), (7, 64)])
def test_sincos_table_equals_hugging_face_vit_mae(grid, d_model):
    theirs = hf_mae(image_size=2 * grid, hidden_size=d_model).embeddings.position_embeddings[0]
    ours = sincos_2d_pos_embed((grid, grid), d_model)                      # (grid², d_model)
    assert theirs[0].abs().max() == 0, "MAE gives [CLS] a zero row"
    torch.testing.assert_close(ours, theirs[1:], atol=1e-6, rtol=1e-6,
                               msg=lambda m: "the sin-cos table differs from ViTMAE's: check that the "
                                             "first half encodes the column, [sin | cos] in each half, "
                                             f"and ω_f = 10000^(−f/(d/4)). {m}")


def test_sincos_table_is_row_major_and_separable():
    table = sincos_2d_pos_embed((3, 5), 16)                                  # non-square grid
    square = sincos_2d_pos_embed((5, 5), 16)
    for r in range(3):
        for c in range(5):
            torch.testing.assert_close(table[r * 5 + c], square[r * 5 + c])  # patch (r, c) in row-major order
    torch.testing.assert_close(table[7, :8], table[2, :8])   # (1, 2) and (0, 2): same column, same first half
    torch.testing.assert_close(table[7, 8:], table[5, 8:])   # (1, 2) and (1, 0): same row, same second half
    with pytest.raises(ValueError, match="multiple of 4"):
        sincos_2d_pos_embed((2, 2), 6)


def test_vit_with_sincos_positions_equals_hugging_face_vit_mae():
    theirs = spread_(hf_mae())
    with torch.no_grad():   # spread_ redrew the fixed table too: put MAE's back
        theirs.embeddings.position_embeddings.copy_(hf_mae().embeddings.position_embeddings)
    ours = ViT(8, 2, 1, 32, 4, 2, 48, n_classes=None, pos="sincos").eval()
    assert "pos_embed" not in dict(ours.named_parameters()), "sin-cos positions are fixed, not trained"
    emb = theirs.embeddings
    state = {"patch_embed.proj.weight": emb.patch_embeddings.projection.weight,
             "patch_embed.proj.bias": emb.patch_embeddings.projection.bias,
             "cls_token": emb.cls_token, "pos_embed": emb.position_embeddings,
             "encoder.norm.weight": theirs.layernorm.weight, "encoder.norm.bias": theirs.layernorm.bias,
             **encoder_layers_from_hf(theirs)}
    ours.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    x = torch.rand(3, 1, 8, 8)
    in_order = torch.arange(16.0).expand(3, 16)                             # MAE's shuffle: the identity
    with torch.no_grad():
        expected = theirs(pixel_values=x, noise=in_order).last_hidden_state  # (3, 17, 32)
        got = ours.features(x)[0]
    assert expected.abs().max() > 1
    torch.testing.assert_close(got, expected, **TOL)


def test_defaults_are_learned_positions_and_cls_pooling():
    torch.manual_seed(0)
    default = ViT(8, 2, 1, 32, 4, 2, n_classes=10)
    torch.manual_seed(0)
    explicit = ViT(8, 2, 1, 32, 4, 2, n_classes=10, pos="learned", pool="cls")
    assert default.state_dict().keys() == explicit.state_dict().keys()
    for key, value in default.state_dict().items():   # the same draws in the same order
        assert torch.equal(value, explicit.state_dict()[key]), key
    assert isinstance(default.pos_embed, nn.Parameter) and default.pos_embed.shape == (1, 17, 32)
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        z = default.features(x)[0]
        torch.testing.assert_close(default(x), default.head(z[:, 0]))


@pytest.mark.parametrize("pos", ["learned", "sincos", "none"])
def test_mean_pooling_is_the_mean_of_the_patch_tokens(pos):
    model = spread_(ViT(8, 2, 1, 32, 4, 2, n_classes=10, pos=pos, pool="mean"))
    assert model.cls_token is None
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        z = model.features(x)[0]
        assert z.shape == (5, 16, 32), "no [CLS] token: the sequence is the 16 patch tokens"
        by_hand = model.head(z.mean(dim=1))
        logits = model(x)
    assert logits.abs().max() > 1
    torch.testing.assert_close(logits, by_hand, atol=1e-6, rtol=1e-6)
    headless = spread_(ViT(8, 2, 1, 32, 4, 2, n_classes=None, pos=pos, pool="mean"))
    with torch.no_grad():
        torch.testing.assert_close(headless(x), headless.features(x)[0].mean(dim=1))


def unpatchify(patches, patch_size, side):
    """(B, N, C·P·P) -> (B, C, H, W): the inverse of ``patchify`` for a square grid of ``side``."""
    B, N, _ = patches.shape
    P = patch_size
    x = patches.reshape(B, side, side, -1, P, P).permute(0, 3, 1, 4, 2, 5)   # (B, C, rows, P, cols, P)
    return x.reshape(B, -1, side * P, side * P)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_without_positions_shuffling_the_patches_leaves_the_output_unchanged(pool):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 1, 8, 8, generator=g)
    order = torch.randperm(16, generator=g)
    shuffled = unpatchify(patchify(x, 2)[:, order], 2, 4)
    assert torch.equal(patchify(shuffled, 2), patchify(x, 2)[:, order])
    bag = spread_(ViT(8, 2, 1, 32, 4, 2, n_classes=10, pos="none", pool=pool))
    placed = spread_(ViT(8, 2, 1, 32, 4, 2, n_classes=10, pos="learned", pool=pool))
    with torch.no_grad():
        torch.testing.assert_close(bag(shuffled), bag(x), atol=1e-5, rtol=1e-5)
        assert (placed(shuffled) - placed(x)).abs().max() > 0.1, "with positions, the order matters"


def test_bad_variant_names_are_refused():
    with pytest.raises(ValueError, match="pos="):
        ViT(8, 2, pos="rope")
    with pytest.raises(ValueError, match="pool="):
        ViT(8, 2, pool="max")
