"""Generating text from a causal language model, with and without a KV cache.

Without a cache, every new token re-runs the model over the whole sequence so far: step t costs
O(t) positions of work in every layer (and attention O(t²)). With a cache, each layer keeps the
keys and values it has computed (:class:`coursekit.attention.KVCache`), and step t runs the model
on the one new token only.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from coursekit.attention import KVCache


@torch.no_grad()
def greedy(model: nn.Module, ids: Tensor, max_new_tokens: int, use_cache: bool = True) -> Tensor:
    """Append ``max_new_tokens`` argmax tokens to the prompt ids (B, N) -> (B, N + max_new_tokens).

    ``model(ids, caches=...)`` returns (logits (B, N, V), ...), as
    :class:`coursekit.models.tiny_transformer.TinyTransformer` does.
    """
    model.eval()
    caches = [KVCache() for _ in model.blocks] if use_cache else None
    new = ids
    for _ in range(max_new_tokens):
        logits, _ = model(new, caches=caches) if use_cache else model(ids)
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        ids = torch.cat([ids, next_id], dim=1)
        new = next_id
    return ids
