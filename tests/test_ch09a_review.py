"""Chapter 9a's claims about where LoRA's adapters can act, checked without training.

A value projection does not enter its own layer's scores, so an update of W^V alone leaves that
layer's attention weights unchanged bit for bit; it does change the next layer's, through the
residual stream. W^K (like W^Q) enters the scores and changes the layer's own pattern.
"""

import torch

from coursekit.lora import inject_lora
from coursekit.models.tiny_transformer import TinyTransformer


def _model_and_adapted(target, seed=0):
    torch.manual_seed(seed)
    base = TinyTransformer(10, d_model=32, n_heads=4, n_layers=2, max_len=8, causal=False).eval()
    adapted = TinyTransformer(10, d_model=32, n_heads=4, n_layers=2, max_len=8, causal=False).eval()
    adapted.load_state_dict(base.state_dict())
    inject_lora(adapted, [target], r=4, alpha=8)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:                          # a non-zero update, as if trained
                p.copy_(torch.randn(p.shape, generator=g))
    return base, adapted


def _weights(model, x):
    with torch.no_grad():
        return model(x, need_weights=True)[1]             # L x (B, H, N, N)


def test_value_update_leaves_its_own_layer_pattern_and_moves_the_next():
    base, adapted = _model_and_adapted("v")
    x = torch.randint(0, 10, (16, 8), generator=torch.Generator().manual_seed(3))
    before, after = _weights(base, x), _weights(adapted, x)
    assert torch.equal(before[0], after[0]), "block 0's scores do not involve W^V"
    assert (before[1] - after[1]).abs().max() > 1e-2, "block 0's new values move block 1's queries and keys"
    with torch.no_grad():
        assert (base(x)[0] - adapted(x)[0]).abs().max() > 1e-2, "the output does change"


def test_key_update_moves_its_own_layer_pattern():
    base, adapted = _model_and_adapted("k")
    x = torch.randint(0, 10, (16, 8), generator=torch.Generator().manual_seed(3))
    before, after = _weights(base, x), _weights(adapted, x)
    assert (before[0] - after[0]).abs().max() > 1e-2, "W^K enters block 0's scores"
