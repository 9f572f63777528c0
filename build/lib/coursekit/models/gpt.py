"""GPT: a decoder-only transformer, weight-compatible with Hugging Face's ``GPT2LMHeadModel``.

GPT-2's block is the book's pre-norm block with causal self-attention, stacked (Radford et al.
2019, section 2.3)::

    h⁰ = W_e[ids] + W_p[0..N-1]                     # token table wte, learned positions wpe
    h^ℓ = h^ℓ-1 + MHA(LN(h^ℓ-1));  h^ℓ = h^ℓ + FFN(LN(h^ℓ))    ℓ = 1..L  (causal attention)
    P(x_i+1 | x_≤i) = softmax(LN(h^L_i) W_eᵀ)         # the output layer is the token table, tied

GPT-1 (Radford et al. 2018) is the same stack with the original Transformer's Post-LN blocks and
no final LayerNorm; it already used GELU and the tied output layer. GPT-2 moved the LayerNorm
to the input of each sub-block, added the final one and scaled the residual projections' initial
weights by 1/√(number of residual layers).

:class:`GPT` is :class:`coursekit.models.tiny_transformer.TinyTransformer` with GPT-2's choices:
the FFN's φ is the tanh approximation of GELU (``"gelu_new"`` in transformers), LayerNorm's
ε = 1e-5, and the output layer has no bias and shares its weight with the token embedding.

Hugging Face stores the same numbers in another layout: its ``Conv1D`` keeps a weight as
(in, out), the transpose of ``nn.Linear``'s (out, in), and ``c_attn`` packs W^Q, W^K, W^V in that
order along its output axis, as ``in_proj`` does. :func:`gpt_to_hf` ports the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from coursekit.models.tiny_transformer import TinyTransformer


class GPT(TinyTransformer):
    """GPT-2's architecture: ``GPT(vocab_size, d_model, n_heads, n_layers, max_len)``.

    forward(ids, caches=...) -> logits (B, N, vocab_size), attention weights (as TinyTransformer).
    ``head.weight`` *is* ``tok.weight`` (tied): one (vocab_size, d_model) table reads tokens in
    and scores them out.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 max_len: int = 64, dropout: float = 0.0) -> None:
        super().__init__(vocab_size, d_model, n_heads, n_layers, 4 * d_model, max_len,
                         causal=True, dropout=dropout, positional="learned",
                         activation="gelu_tanh")
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied: W_out = W_e
        for module in self.modules():  # GPT-2's initialisation: N(0, 0.02), zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.pos.weight, std=0.01)
        for block in self.blocks:  # residual projections scaled by 1/√(2L) (GPT-2, section 2.3)
            for layer in (block.self_attn.out_proj, block.ff.linear2):
                nn.init.normal_(layer.weight, std=0.02 / (2 * n_layers) ** 0.5)

    @property
    def config(self) -> dict[str, int]:
        first = self.blocks[0].self_attn
        return {"vocab_size": self.tok.num_embeddings, "d_model": first.d_model,
                "n_heads": first.n_heads, "n_layers": len(self.blocks), "max_len": self.max_len}


# ----------------------------------------------------------------------------- Hugging Face


def hf_config(model: GPT):
    """The ``transformers.GPT2Config`` of the same architecture, without dropout."""
    from transformers import GPT2Config

    c = model.config
    return GPT2Config(vocab_size=c["vocab_size"], n_positions=c["max_len"], n_embd=c["d_model"],
                      n_layer=c["n_layers"], n_head=c["n_heads"], activation_function="gelu_new",
                      layer_norm_epsilon=model.ln_f.eps, resid_pdrop=0.0, embd_pdrop=0.0,
                      attn_pdrop=0.0, tie_word_embeddings=True, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """coursekit's parameters under GPT2LMHeadModel's names and layouts (Conv1D: (in, out))."""
    s = model.state_dict()
    out = {"transformer.wte.weight": s["tok.weight"], "transformer.wpe.weight": s["pos.weight"],
           "transformer.ln_f.weight": s["ln_f.weight"], "transformer.ln_f.bias": s["ln_f.bias"],
           "lm_head.weight": s["tok.weight"]}
    for i in range(len(model.blocks)):
        ours, theirs = f"blocks.{i}.", f"transformer.h.{i}."
        pairs = {"norm1": "ln_1", "norm2": "ln_2"}
        for a, b in pairs.items():
            out[theirs + b + ".weight"] = s[ours + a + ".weight"]
            out[theirs + b + ".bias"] = s[ours + a + ".bias"]
        linears = {"self_attn.in_proj": "attn.c_attn", "self_attn.out_proj": "attn.c_proj",
                   "ff.linear1": "mlp.c_fc", "ff.linear2": "mlp.c_proj"}
        for a, b in linears.items():
            out[theirs + b + ".weight"] = s[ours + a + ".weight"].t().contiguous()  # (in, out)
            out[theirs + b + ".bias"] = s[ours + a + ".bias"]
    return out


def gpt_to_hf(model: GPT):
    """A ``transformers.GPT2LMHeadModel`` holding ``model``'s weights, in eval mode."""
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel(hf_config(model))
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias") and not k.endswith("masked_bias")]
    if missing or unexpected:
        raise RuntimeError(f"weight port: missing {missing}, unexpected {unexpected}")
    return hf.eval()


# ----------------------------------------------------------------------------- size


def gpt_parameters(n_layers: int, d_model: int, vocab_size: int, n_positions: int) -> int:
    """The exact parameter count of a GPT-2-shaped model (tied output layer, d_ff = 4 d_model).

    With d = d_model, per block: attention 4d² + 4d, FFN 8d² + 5d, two LayerNorms 4d, i.e.
    12d² + 13d; then the token and position tables (|𝒱| + P)·d, P = ``n_positions``, and the
    final LayerNorm 2d (GPT-2's; GPT-1, Post-LN, has none: 2d fewer).
    """
    d = d_model
    return n_layers * (12 * d * d + 13 * d) + (vocab_size + n_positions) * d + 2 * d


def approx_parameters(n_layers: int, d_model: int, vocab_size: int = 0, n_positions: int = 0) -> int:
    """The rule of thumb ≈ 12·L·d² (+ |V|·d + P·d for the tables), the slides' formula."""
    return 12 * n_layers * d_model**2 + (vocab_size + n_positions) * d_model


@dataclass(frozen=True)
class Published:
    """A published model's shape, the size its paper states and, where it differs, the size
    given with the released weights.

    The GPT-2 paper's Table 2 states 117M, 345M, 762M and 1542M; the released checkpoints hold
    124M, 355M, 774M and 1558M (the count of :func:`gpt_parameters`). The paper's 117M for the
    small model, which it calls "equivalent to the original GPT", is GPT-1's size (116.5M
    counted); the small model's own shape holds 6.4 % more, a larger vocabulary and context.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    vocab_size: int
    n_positions: int
    stated: float  # parameters, as the paper gives them
    released: float | None = None  # as given with the later release of the weights

    @property
    def counted(self) -> int:
        return gpt_parameters(self.n_layers, self.d_model, self.vocab_size, self.n_positions)


_GPT2, _GPT3 = (50257, 1024), (50257, 2048)
PUBLISHED: tuple[Published, ...] = (
    Published("GPT-1", 12, 768, 12, 40478, 512, 117e6),
    Published("GPT-2 small", 12, 768, 12, *_GPT2, 117e6, 124e6),
    Published("GPT-2 medium", 24, 1024, 16, *_GPT2, 345e6, 355e6),
    Published("GPT-2 large", 36, 1280, 20, *_GPT2, 762e6, 774e6),
    Published("GPT-2 XL", 48, 1600, 25, *_GPT2, 1542e6, 1558e6),
    Published("GPT-3 Small", 12, 768, 12, *_GPT3, 125e6),
    Published("GPT-3 Medium", 24, 1024, 16, *_GPT3, 350e6),
    Published("GPT-3 Large", 24, 1536, 16, *_GPT3, 760e6),
    Published("GPT-3 XL", 24, 2048, 24, *_GPT3, 1.3e9),
    Published("GPT-3 2.7B", 32, 2560, 32, *_GPT3, 2.7e9),
    Published("GPT-3 6.7B", 32, 4096, 32, *_GPT3, 6.7e9),
    Published("GPT-3 13B", 40, 5140, 40, *_GPT3, 13e9),
    Published("GPT-3 175B", 96, 12288, 96, *_GPT3, 175e9),
)
