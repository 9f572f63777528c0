"""Chapter 7's small GPT on the book's generated language: its tokenizer, its data, its training.

Notebook ``07a_gpt`` builds this model and trains it with the student's ``next_token_loss``;
``07b_decoding`` and ``07c_assistant`` start from the same model. Each notebook runs on its own,
so each rebuilds it here, with the same recipe and the same seeds, and gets the same weights::

    lang, corpus, bpe = tokenizer()           # 150 BPE merges learned on 2,000 sentences
    train_ids, val_ids = datasets(lang, bpe)  # 20,000 training sentences (quick), 1,000 held out
    gpt, history = pretrain(bpe, train_ids)   # L = 2, d_model = 64, H = 4; 700 steps of 64

About 35 s on one CPU thread in the quick profile (2,000 steps in the full one).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from coursekit import by_profile, seed, seed_everything
from coursekit.data.acceptor import accepts
from coursekit.data.bpe import BPE
from coursekit.data.language import SyntheticLanguage
from coursekit.models.gpt import GPT
from coursekit.models.tiny_transformer import next_token_loss
from coursekit.train import History, fit

N_MERGES = 150
MAX_LEN = 320  # the position table's rows, N_ctx: far more than a sentence's ~25 tokens


def tokenizer() -> tuple[SyntheticLanguage, list[str], BPE]:
    """The chapter's language, the 2,000 sentences (seed 0) its BPE learns from, and the BPE."""
    lang = SyntheticLanguage()
    corpus = lang.corpus(2000, seed=0)
    return lang, corpus, BPE.train(corpus, n_merges=N_MERGES)


def encode(bpe: BPE, lines: list[str]) -> Tensor:
    """-> ids (B, N): ``<bos>`` tokens ``<eos>``, right-padded with ``<pad>`` (id 0)."""
    rows = [bpe.encode(s, bos=True, eos=True) for s in lines]
    n = max(map(len, rows))
    return torch.tensor([r + [bpe.pad_id] * (n - len(r)) for r in rows])


def trim(ids: Tensor, pad_id: int = 0) -> Tensor:
    """Drop the columns that are padding in every row of the batch."""
    return ids[:, : int((ids != pad_id).sum(1).max())]


def datasets(lang: SyntheticLanguage, bpe: BPE) -> tuple[Tensor, Tensor]:
    """Training ids (20,000 sentences in the quick profile, 50,000 in the full one; seed 1) and
    validation ids (1,000 sentences; seed 2)."""
    train = encode(bpe, lang.corpus(by_profile(quick=20000, full=50000), seed=1))
    return train, encode(bpe, lang.corpus(1000, seed=2))


def pretrain(bpe: BPE, train_ids: Tensor,
             loss: Callable[[Tensor, Tensor], Tensor] = next_token_loss,
             steps: int | None = None) -> tuple[GPT, History]:
    """The chapter's GPT (L = 2, d_model = 64, H = 4, N_ctx = 320), trained with AdamW at 3e-3
    after 30 warm-up steps on batches of 64 random training sentences; ``loss(logits, ids)`` is
    the next-token loss (07a passes the student's); ``steps`` defaults to the profile's (700 quick,
    2,000 full). ``COURSEKIT_SEED`` moves both seeds."""
    seed_everything(0)
    gpt = GPT(len(bpe), d_model=64, n_heads=4, n_layers=2, max_len=MAX_LEN)
    g = torch.Generator().manual_seed(seed(0))
    if steps is None:
        steps = by_profile(quick=700, full=2000)  # at 400 steps some seeds sampled ungrammatical text
    history = fit(gpt, lambda m, ids: loss(m(ids)[0], ids),
                  lambda step: trim(train_ids[torch.randint(len(train_ids), (64,), generator=g)], bpe.pad_id),
                  steps=steps, lr=3e-3, lr_schedule=lambda step: min(1.0, step / 30), desc="GPT")
    return gpt, history


def acceptance(model: torch.nn.Module, bpe: BPE, n: int = 200, seed: int = 0,
               **rule) -> tuple[float, int]:
    """Sample n sentences from ``<bos>`` (at most 40 tokens) with a decoding rule of
    :func:`coursekit.decoding.sample` (``temperature``, ``top_k``, ``top_p``, ``min_p``) -> (the
    share the grammar accepts, the number of different sentences among the accepted ones)."""
    from coursekit.decoding import sample

    start = torch.full((n, 1), bpe.bos_id)
    out = sample(model, start, 40, generator=torch.Generator().manual_seed(seed), eos_id=bpe.eos_id, **rule)
    accepted = [text for text in (bpe.decode(row[1:]) for row in out) if accepts(text.split())]
    return len(accepted) / n, len(set(accepted))
