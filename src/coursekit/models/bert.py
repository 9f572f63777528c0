"""BERT (Devlin et al., 2019): a Post-LN encoder pre-trained to fill in masked words.

The book's blocks, nothing new inside them: the stack is
``coursekit.transformer.Encoder(norm_first=False, activation="gelu")`` (Chapter 6), whose
attention is :class:`coursekit.attention.MultiHeadAttention` (Chapter 4). What makes it BERT::

    X⁰ = LN(E_tok[ids] + E_pos[0..N-1] + E_seg[segments])     # embedding LayerNorm, ε = 1e-12
    Xˡ = LN₂(Y + FFN(Y)),  Y = LN₁(Xˡ⁻¹ + MHSA(Xˡ⁻¹))           # Post-LN, exact (erf) GELU
    MLM:  logits = LN(GELU(Xᴸ W_t + b_t)) E_tokᵀ + b          # decoder tied to the word table
    NSP:  pooled = tanh(Xᴸ[:, 0] W_p + b_p),  logits = pooled W_nsp + b_nsp   # on [CLS]

Every LayerNorm has ε = 1e-12 (``BertConfig.layer_norm_eps``). Segment ids default to 0, and the
segment-0 vector is still added, as Hugging Face does when ``token_type_ids`` is omitted.

Fine-tuning heads: :class:`ClsHead` (a sentence label from [CLS], ``BertForSequenceClassification``)
and :class:`SpanHead` (a span from start and end scores at every token, ``BertForQuestionAnswering``).

:func:`to_hf` and :func:`from_hf` port the weights to and from
``transformers.BertForPreTraining`` (whose ``bert`` and ``cls`` submodules are those of
``BertModel`` and ``BertForMaskedLM``); :func:`hf_config` builds the matching ``BertConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coursekit.transformer import Encoder, LayerNorm

EPS = 1e-12  # BERT's LayerNorm ε, everywhere


@dataclass(frozen=True)
class BertConfig:
    """Sizes in the book's notation. BERT-base: vocab_size=30522, d_model=768, n_heads=12,
    n_layers=12, d_ff=3072, max_len=512."""

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    max_len: int = 64
    n_segments: int = 2
    dropout: float = 0.0
    pad_id: int = 0
    init_std: float = 0.02  # BERT's initializer_range, 0.02 at every width (BERT-base and BERT-large);
    # the BERT notebook's d_model = 64 model uses 0.07, the book's own choice, not a rule of BERT's


class Bert(nn.Module):
    """The encoder with both pre-training heads (``BertForPreTraining``'s computation).

    ``encode`` gives the contextual vectors, ``mlm_logits`` and ``nsp_logits`` the two heads;
    ``forward`` runs all three.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = self.config = config
        self.tok = nn.Embedding(c.vocab_size, c.d_model)  # E_tok
        self.pos = nn.Embedding(c.max_len, c.d_model)  # E_pos: learned absolute positions
        self.seg = nn.Embedding(c.n_segments, c.d_model)  # E_seg: sentence A = 0, B = 1
        self.emb_norm = LayerNorm(c.d_model, EPS)
        self.emb_dropout = nn.Dropout(c.dropout)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout,
                               activation="gelu", norm_first=False, final_norm=False, eps=EPS)
        self.pooler = nn.Linear(c.d_model, c.d_model)  # W_p, b_p
        self.nsp = nn.Linear(c.d_model, 2)  # IsNext / NotNext
        self.mlm_transform = nn.Linear(c.d_model, c.d_model)  # W_t, b_t
        self.mlm_norm = LayerNorm(c.d_model, EPS)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))  # b; the matrix is E_tok
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        """BERT's initialisation: N(0, init_std²) matrices and tables, zero biases."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def embed(self, ids: Tensor, segments: Tensor | None = None) -> Tensor:
        """ids, segments: (B, N) -> X⁰ (B, N, d_model)."""
        if segments is None:
            segments = torch.zeros_like(ids)  # segment 0's vector is added all the same
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(positions) + self.seg(segments)
        return self.emb_dropout(self.emb_norm(x))

    def encode(self, ids: Tensor, segments: Tensor | None = None,
               key_mask: Tensor | None = None, need_weights: bool = False,
               ) -> tuple[Tensor, list[Tensor] | None]:
        """ids: (B, N); segments: (B, N) in {0, 1}; key_mask: (B, N) bool, True at real tokens
        (None: ``ids != pad_id``) -> Xᴸ (B, N, d_model) and, with ``need_weights``, each
        layer's attention (B, H, N, N)."""
        if key_mask is None:
            key_mask = ids != self.config.pad_id
        return self.encoder(self.embed(ids, segments), key_mask=key_mask,
                            need_weights=need_weights)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """(B, N, d_model) -> (B, N, vocab_size), through the tied word table."""
        h = self.mlm_norm(F.gelu(self.mlm_transform(hidden)))
        return h @ self.tok.weight.T + self.mlm_bias

    def pooled(self, hidden: Tensor) -> Tensor:
        """The [CLS] vector through the pooler: (B, N, d_model) -> (B, d_model)."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """(B, N, d_model) -> (B, 2): is sentence B the one that followed sentence A?"""
        return self.nsp(self.pooled(hidden))

    def forward(self, ids: Tensor, segments: Tensor | None = None,
                key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """-> MLM logits (B, N, vocab_size), NSP logits (B, 2)."""
        hidden, _ = self.encode(ids, segments, key_mask)
        return self.mlm_logits(hidden), self.nsp_logits(hidden)


class ClsHead(nn.Module):
    """``BertForSequenceClassification``'s head on its own (exercise 07.7): the pooler (a linear
    layer and tanh on the [CLS] vector, as :meth:`Bert.pooled`), dropout, a linear classifier.

    hidden: (B, N, d_model) -> logits (B, n_classes).
    """

    def __init__(self, d_model: int, n_classes: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, n_classes)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden[:, 0]))))


class BertClassifier(nn.Module):
    """A sentence classifier on top of a (pre-trained) :class:`Bert`: its encoder, then a [CLS]
    head (``BertForSequenceClassification``'s), whose pooler starts from BERT's own. ``head`` is
    the head's class: :class:`ClsHead`, or the notebook's exercise 07.7."""

    def __init__(self, bert: Bert, n_classes: int = 2, dropout: float = 0.1,
                 head: type[nn.Module] | None = None) -> None:
        super().__init__()
        self.bert = bert
        self.head = (head or ClsHead)(bert.config.d_model, n_classes, dropout=dropout)
        self.head.pooler.load_state_dict(bert.pooler.state_dict())  # pre-trained with NSP

    def forward(self, ids: Tensor, segments: Tensor | None = None,
                key_mask: Tensor | None = None) -> Tensor:
        """ids: (B, N) -> logits (B, n_classes)."""
        hidden, _ = self.bert.encode(ids, segments, key_mask)
        return self.head(hidden)



class SpanHead(nn.Module):
    """BERT's span head for extractive question answering (Devlin et al., 2019, §4.2): a start
    vector S and an end vector E, each scored against every final token vector Tᵢ (a row of Xᴸ).

    ``qa_outputs`` is ``transformers.BertForQuestionAnswering``'s: an ``nn.Linear(d_model, 2)``
    whose two rows are S and E. Its bias adds one number to every position's start (or end)
    score, which the softmax over positions cancels: the probabilities and the best span are
    those of the paper's bias-free S·Tᵢ and E·Tⱼ.

    hidden: (B, N, d_model); key_mask: (B, N) bool, True where a span may start or end (None:
    everywhere) -> start logits (B, N), end logits (B, N), -inf where ``key_mask`` is False.
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.qa_outputs = nn.Linear(d_model, 2)  # rows S, E

    def forward(self, hidden: Tensor, key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        start, end = self.qa_outputs(hidden).unbind(-1)  # (B, N) each: S·Tᵢ, E·Tᵢ (+ bias)
        if key_mask is not None:
            start = start.masked_fill(~key_mask, float("-inf"))
            end = end.masked_fill(~key_mask, float("-inf"))
        return start, end


class BertSpanExtractor(nn.Module):
    """``BertForQuestionAnswering``'s computation on a (pre-trained) :class:`Bert`: its encoder,
    then a :class:`SpanHead` initialised as BERT initialises (N(0, init_std²), zero bias).

    ids, segments, key_mask: (B, N) (key_mask None: ``ids != pad_id``) -> start logits (B, N),
    end logits (B, N), -inf at padding (Hugging Face leaves padding in the softmax)."""

    def __init__(self, bert: Bert) -> None:
        super().__init__()
        self.bert = bert
        self.head = SpanHead(bert.config.d_model)
        self.head.apply(bert._init)

    def forward(self, ids: Tensor, segments: Tensor | None = None,
                key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if key_mask is None:
            key_mask = ids != self.bert.config.pad_id
        hidden, _ = self.bert.encode(ids, segments, key_mask)
        return self.head(hidden, key_mask)


def span_loss(start_logits: Tensor, end_logits: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """The span objective: the mean over the batch of -log P(start) and of -log P(end), each a
    softmax over the positions, averaged as ``BertForQuestionAnswering`` and BERT's
    ``run_squad.py`` do, (start loss + end loss) / 2; the paper states the sum, twice this.

    start_logits, end_logits: (B, N); start, end: (B,) long -> a scalar."""
    return (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2


def best_span(start_logits: Tensor, end_logits: Tensor, max_len: int | None = None,
              ) -> tuple[Tensor, Tensor]:
    """The paper's prediction: the span (i, j) with j ≥ i that maximises S·Tᵢ + E·Tⱼ, the sum of
    its start and end logits (at most ``max_len`` tokens long if given; the paper sets no limit).

    start_logits, end_logits: (B, N) -> start (B,), end (B,) long."""
    N = start_logits.shape[-1]
    scores = start_logits[:, :, None] + end_logits[:, None, :]  # (B, N, N): [b, i, j]
    i = torch.arange(N, device=scores.device)
    allowed = i[None, :] >= i[:, None]  # (N, N): j ≥ i
    if max_len is not None:
        allowed = allowed & (i[None, :] - i[:, None] < max_len)
    best = scores.masked_fill(~allowed, float("-inf")).flatten(1).argmax(-1)
    return best // N, best % N


def mlm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy at the picked positions only: labels (B, N) hold -100 everywhere else."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


# ----------------------------------------------------------------------------- Hugging Face


def hf_config(config: BertConfig) -> Any:
    """The ``transformers.BertConfig`` of the same model (exact GELU, ε = 1e-12, no dropout)."""
    import transformers

    return transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.d_model,
        num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff, max_position_embeddings=config.max_len,
        type_vocab_size=config.n_segments, hidden_act="gelu", layer_norm_eps=EPS,
        hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout,
        pad_token_id=config.pad_id, tie_word_embeddings=True)


def _names(config: BertConfig) -> dict[str, str]:
    """coursekit name -> ``BertForPreTraining`` name, for every tensor but the packed Q, K, V."""
    names = {
        "tok.weight": "bert.embeddings.word_embeddings.weight",
        "pos.weight": "bert.embeddings.position_embeddings.weight",
        "seg.weight": "bert.embeddings.token_type_embeddings.weight",
        "emb_norm.weight": "bert.embeddings.LayerNorm.weight",
        "emb_norm.bias": "bert.embeddings.LayerNorm.bias",
        "pooler.weight": "bert.pooler.dense.weight",
        "pooler.bias": "bert.pooler.dense.bias",
        "nsp.weight": "cls.seq_relationship.weight",
        "nsp.bias": "cls.seq_relationship.bias",
        "mlm_transform.weight": "cls.predictions.transform.dense.weight",
        "mlm_transform.bias": "cls.predictions.transform.dense.bias",
        "mlm_norm.weight": "cls.predictions.transform.LayerNorm.weight",
        "mlm_norm.bias": "cls.predictions.transform.LayerNorm.bias",
        "mlm_bias": "cls.predictions.bias",
    }
    for i in range(config.n_layers):
        ours, theirs = f"encoder.layers.{i}.", f"bert.encoder.layer.{i}."
        for p in ("weight", "bias"):
            names[f"{ours}self_attn.out_proj.{p}"] = f"{theirs}attention.output.dense.{p}"
            names[f"{ours}norm1.{p}"] = f"{theirs}attention.output.LayerNorm.{p}"
            names[f"{ours}ff.linear1.{p}"] = f"{theirs}intermediate.dense.{p}"
            names[f"{ours}ff.linear2.{p}"] = f"{theirs}output.dense.{p}"
            names[f"{ours}norm2.{p}"] = f"{theirs}output.LayerNorm.{p}"
    return names


def to_hf(model: Bert) -> dict[str, Tensor]:
    """coursekit weights as a ``BertForPreTraining`` state dict (load it with ``strict=False``
    into ``BertModel``/``BertForMaskedLM`` after dropping the other's prefix)."""
    ours = model.state_dict()
    state = {theirs: ours[name] for name, theirs in _names(model.config).items()}
    state["cls.predictions.decoder.weight"] = ours["tok.weight"]  # tied
    state["cls.predictions.decoder.bias"] = ours["mlm_bias"]
    for i in range(model.config.n_layers):
        prefix = f"bert.encoder.layer.{i}.attention.self."
        for p in ("weight", "bias"):
            q, k, v = ours[f"encoder.layers.{i}.self_attn.in_proj.{p}"].chunk(3)
            state.update({f"{prefix}query.{p}": q, f"{prefix}key.{p}": k, f"{prefix}value.{p}": v})
    return {k: v.clone() for k, v in state.items()}


def from_hf(state: dict[str, Tensor], config: BertConfig) -> Bert:
    """A :class:`Bert` holding a ``BertForPreTraining`` state dict's weights."""
    model = Bert(config)
    ours = {name: state[theirs] for name, theirs in _names(config).items()}
    for i in range(config.n_layers):
        prefix = f"bert.encoder.layer.{i}.attention.self."
        for p in ("weight", "bias"):
            ours[f"encoder.layers.{i}.self_attn.in_proj.{p}"] = torch.cat(
                [state[f"{prefix}{w}.{p}"] for w in ("query", "key", "value")])
    model.load_state_dict(ours)
    return model


# ----------------------------------------------------------------------------- size


def bert_parameters(n_layers: int, d_model: int, d_ff: int, vocab_size: int, n_positions: int,
                    n_segments: int = 2) -> int:
    """The parameters of ``BertModel`` (the encoder and the pooler, no pre-training heads).

    Embeddings (|V| + P + segments)·d and their LayerNorm 2d; per block: attention 4d² + 4d, its
    LayerNorm 2d, the FFN 2·d·d_ff + d_ff + d, its LayerNorm 2d; the pooler d² + d.
    """
    d = d_model
    block = 4 * d * d + 4 * d + 2 * d + 2 * d * d_ff + d_ff + d + 2 * d
    return (vocab_size + n_positions + n_segments) * d + 2 * d + n_layers * block + d * d + d


BERT_PUBLISHED = {  # name: (n_layers, d_model, d_ff, stated size) with |V| = 30522, P = 512
    "BERT-base": (12, 768, 3072, 110e6),
    "BERT-large": (24, 1024, 4096, 340e6),
}

