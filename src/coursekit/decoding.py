"""Generating text from a causal language model: greedy, sampling (temperature, top-k, top-p,
min-p), beam search.

Every function takes a model called as ``model(ids, caches=caches) -> (logits (B, N, V), ...)``
with one :class:`coursekit.attention.KVCache` per entry of ``model.blocks``, as
:class:`coursekit.models.tiny_transformer.TinyTransformer` and :class:`coursekit.models.gpt.GPT`
are.

Without a cache, every new token re-runs the model over the whole sequence so far: step t costs
O(t) positions of work in every layer (and attention O(t²)). With a cache, each layer keeps the
keys and values it has computed, and step t runs the model on the one new token only.

The filters act on the logits z (..., V) of the next token and return logits, with -inf where a
token may not be drawn, so that they compose (temperature, then top-k, then top-p, then min-p,
as Hugging Face's ``generate`` applies them):

- temperature τ: softmax(z / τ); τ → 0 is greedy, τ = 1 the model's distribution, τ > 1 flatter;
- top-k: keep the k most probable tokens;
- top-p (nucleus, Holtzman et al. 2020): keep the smallest set of most probable tokens whose
  probabilities sum to at least p;
- min-p (Nguyen et al. 2025): keep the tokens whose probability is at least p_min times the most
  probable token's, a cut that follows the model's confidence.

Beam search ranks whole sequences by their log-probability, a sum of negative terms: every
token a beam still has to write lowers its score, so a beam that ends early (``<eos>``) beats a
longer one that is better token by token. Length normalisation (Wu et al. 2016, GNMT) divides
the score by lp(n) = ((5 + n) / 6)^α for a sequence of n generated tokens; α = 0 is plain beam
search, larger α favours longer sequences.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from coursekit.attention import KVCache


def _new_caches(model: nn.Module) -> list[KVCache]:
    return [KVCache() for _ in model.blocks]


def _generate(model: nn.Module, ids: Tensor, max_new_tokens: int, use_cache: bool,
              choose: Callable[[Tensor], Tensor], eos_id: int | None) -> Tensor:
    """The loop every decoding rule shares: choose(last logits (B, V)) -> next ids (B,)."""
    model.eval()
    caches = _new_caches(model) if use_cache else None
    new = ids
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    for _ in range(max_new_tokens):
        logits, *_ = model(new, caches=caches) if use_cache else model(ids)
        next_id = choose(logits[:, -1])  # (B,)
        if eos_id is not None:  # a finished row keeps emitting <eos>
            next_id = next_id.masked_fill(done, eos_id)
            done |= next_id == eos_id
        ids = torch.cat([ids, next_id[:, None]], dim=1)
        new = next_id[:, None]
        if eos_id is not None and bool(done.all()):
            break
    return ids


@torch.no_grad()
def greedy(model: nn.Module, ids: Tensor, max_new_tokens: int, use_cache: bool = True,
           eos_id: int | None = None) -> Tensor:
    """Append up to ``max_new_tokens`` argmax tokens to the prompt ids (B, N) -> (B, N + new).

    With ``eos_id``, rows that have produced it keep producing it, and generation stops early
    once every row has.
    """
    return _generate(model, ids, max_new_tokens, use_cache, lambda z: z.argmax(dim=-1), eos_id)


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row (..., V), set the rest to -inf (ties at the k-th kept)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filtering: keep the smallest set of most probable tokens whose probability sums to ≥ p.

    logits: (..., V) -> (..., V), -inf outside the nucleus. The most probable token is always
    kept; p = 1 keeps every token. Sort the probabilities in descending order, accumulate them,
    and drop a token when the tokens *before* it already reach p.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # the mass of the more probable tokens
    drop_sorted = before >= p
    drop_sorted[..., 0] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def min_p_filter(logits: Tensor, min_p: float) -> Tensor:
    """Keep the tokens whose probability is at least ``min_p`` times the largest of its row.

    logits: (..., V) -> (..., V), -inf for the rest. The most probable token always passes;
    min_p = 0 keeps every token. A confident row (one token near 1) keeps little; a flat row
    keeps many.
    """
    if not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p={min_p}: must be in [0, 1]")
    probs = logits.softmax(dim=-1)
    return logits.masked_fill(probs < min_p * probs.amax(dim=-1, keepdim=True), float("-inf"))


def filter_logits(logits: Tensor, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0, min_p: float = 0.0) -> Tensor:
    """Temperature, then top-k, then top-p, then min-p: the logits (..., V) the next token is
    drawn from."""
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: must be > 0 (use greedy for τ → 0)")
    logits = logits / temperature
    if top_k:
        logits = top_k_filter(logits, top_k)
    if top_p < 1.0:
        logits = top_p_filter(logits, top_p)
    if min_p > 0.0:
        logits = min_p_filter(logits, min_p)
    return logits


@torch.no_grad()
def sample(model: nn.Module, ids: Tensor, max_new_tokens: int, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, generator: torch.Generator | None = None,
           use_cache: bool = True, eos_id: int | None = None, min_p: float = 0.0) -> Tensor:
    """Draw up to ``max_new_tokens`` tokens after the prompt ids (B, N) -> (B, N + new).

    Each step draws from softmax(filter_logits(z, temperature, top_k, top_p, min_p)); ``generator``
    makes the draws reproducible (the same generator state gives the same text).
    """

    def choose(z: Tensor) -> Tensor:
        probs = filter_logits(z.float(), temperature, top_k, top_p, min_p).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    return _generate(model, ids, max_new_tokens, use_cache, choose, eos_id)


@torch.no_grad()
def sequence_log_prob(model: nn.Module, ids: Tensor, prompt_len: int) -> Tensor:
    """log P(ids[:, prompt_len:] | ids[:, :prompt_len]) under the model -> (B,)."""
    model.eval()
    logits, *_ = model(ids)
    log_probs = logits[:, :-1].float().log_softmax(dim=-1)
    token = log_probs.gather(-1, ids[:, 1:, None])[..., 0]  # (B, N - 1)
    return token[:, prompt_len - 1:].sum(dim=-1)


def length_penalty(n: Tensor, alpha: float) -> Tensor:
    """GNMT's length normalisation lp(n) = ((5 + n) / 6)^α (Wu et al. 2016, section 7), for n
    generated tokens; α = 0 gives 1 (plain log-probabilities)."""
    return ((5.0 + n) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model: nn.Module, ids: Tensor, max_new_tokens: int, beam_width: int = 4,
                eos_id: int | None = None, use_cache: bool = True,
                length_norm: float = 0.0) -> tuple[Tensor, Tensor]:
    """Keep the ``beam_width`` best continuations at every step; return the best.

    ids: (1, N) one prompt -> (the best sequence (1, N + new), its log-probability ()).
    Beams are a batch of B = beam_width rows; after each step the caches are re-ordered with the
    rows that survive. A beam that emits ``eos_id`` is finished: it keeps its log-probability and
    its length, and is extended by ``<eos>`` at no cost. Beams are ranked by log P / lp(n), with
    n the tokens generated up to and including ``<eos>`` and lp of :func:`length_penalty`:
    ``length_norm`` = α = 0 ranks by log P alone, which favours finished beams, since an
    unfinished one keeps paying a log-probability for every further token.
    """
    if ids.shape[0] != 1:
        raise ValueError("beam_search takes one prompt: ids of shape (1, N)")
    model.eval()
    caches = _new_caches(model) if use_cache else None
    beams, scores = ids, ids.new_zeros(1, dtype=torch.float)  # (b, N), (b,) log-probabilities
    lengths = ids.new_zeros(1)  # (b,) tokens generated, <eos> included
    new = ids
    for _ in range(max_new_tokens):
        logits, *_ = model(new, caches=caches) if use_cache else model(beams)
        log_probs = logits[:, -1].float().log_softmax(dim=-1)  # (b, V)
        finished = beams[:, -1] == eos_id if eos_id is not None else torch.zeros_like(lengths).bool()
        if eos_id is not None:
            log_probs[finished] = float("-inf")
            log_probs[finished, eos_id] = 0.0
        V = log_probs.shape[-1]
        total = (scores[:, None] + log_probs).flatten()  # (b·V,)
        grown = (lengths + (~finished).long())[:, None].expand(-1, V).flatten()  # (b·V,)
        ranked = total / length_penalty(grown.float(), length_norm) if length_norm else total
        flat = ranked.topk(min(beam_width, total.numel())).indices
        scores, lengths = total[flat], grown[flat]
        row, token = flat // V, flat % V
        beams = torch.cat([beams[row], token[:, None]], dim=1)
        if use_cache:
            for cache in caches:  # the surviving beams' keys and values
                cache.k, cache.v = cache.k[row], cache.v[row]
        new = token[:, None]
        if eos_id is not None and bool((beams[:, -1] == eos_id).all()):
            break
    return beams[:1], scores[0]
