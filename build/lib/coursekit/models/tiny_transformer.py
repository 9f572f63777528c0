"""A tiny transformer language model whose attention can be inspected, head by head.

Pre-norm blocks (LayerNorm before each sub-layer, as in GPT-2), the book's one block,
``coursekit.transformer.EncoderBlock(norm_first=True, activation="gelu")`` (Chapter 6)::

    x = x + MHA(LN(x))        # coursekit.attention.MultiHeadAttention
    x = x + FFN(LN(x))        # Linear -> GELU -> Linear; causal self-attention makes it GPT's block

Tokens get a learned embedding; positions come from ``positional`` (Chapter 5): a learned
absolute table by default, or any scheme of :mod:`coursekit.positional` by name ("none",
"sinusoidal", "learned", "t5", "rope", "alibi"), which acts on the embeddings, on the scores or
on the queries and keys of every block. With ``causal=True`` it is a GPT-style
next-token model; with ``causal=False`` the same stack is a BERT-style encoder.
"""

from __future__ import annotations

from functools import partial

import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.attention import KVCache
from coursekit.positional import positional_encoding
from coursekit.transformer import EncoderBlock, LayerNorm


class TinyTransformer(nn.Module):
    """Token embeddings, positions, ``n_layers`` pre-norm blocks, final LayerNorm, vocabulary head.

    ``positional`` names the scheme (:data:`coursekit.positional.KINDS`); ``max_len`` sizes the
    learned table, the only scheme with a largest position. ``activation`` is the FFN's φ
    (:data:`coursekit.transformer.ACTIVATIONS`: "gelu", or GPT-2's tanh approximation "gelu_tanh").

    forward(ids) -> logits (B, N, vocab_size) and, with ``need_weights=True``, the attention
    weights of every layer: a list of ``n_layers`` tensors (B, H, N, N).
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 d_ff: int | None = None, max_len: int = 64, causal: bool = True,
                 dropout: float = 0.0, positional: str = "learned", activation: str = "gelu") -> None:
        super().__init__()
        self.causal, self.max_len = causal, max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = positional_encoding(positional, d_model, n_heads, max_len, causal)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff or 4 * d_model, dropout, activation=activation,
                         norm_first=True) for _ in range(n_layers))
        self.ln_f = LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, ids: Tensor, key_mask: Tensor | None = None, need_weights: bool = False,
                caches: list[KVCache] | None = None) -> tuple[Tensor, list[Tensor] | None]:
        """ids: (B, N) token ids; key_mask: (B, N) bool, True at real tokens (None: all real).

        A causal model with right padding needs no key_mask: real tokens never see the padding
        that follows them. ``caches`` (one :class:`KVCache` per block) holds the keys and values
        of earlier positions during generation: ``ids`` are then only the new tokens.
        """
        start = len(caches[0]) if caches else 0
        x = self.pos.embed(self.tok(ids), start)  # absolute schemes add their vectors here
        bias = self.pos.score_bias(ids.shape[1], start + ids.shape[1])  # T5, ALiBi; else None
        rotate = partial(self.pos.rotate, start=start)  # RoPE; else the identity
        attentions = []
        for i, block in enumerate(self.blocks):
            x, weights = block(x, key_mask=key_mask, is_causal=self.causal,
                               need_weights=need_weights, cache=caches[i] if caches else None,
                               attn_bias=bias, qk_transform=rotate)
            attentions.append(weights)
        return self.head(self.ln_f(x)), attentions if need_weights else None


def next_token_loss(logits: Tensor, ids: Tensor, pad_id: int = 0) -> Tensor:
    """Cross-entropy of predicting ids[:, t+1] from position t, ignoring padding targets.

    logits: (B, N, V), ids: (B, N) -> scalar.
    """
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), ignore_index=pad_id)
