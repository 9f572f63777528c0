"""Chapter 7b, BERT's span head (Devlin et al., 2019, §4.2): coursekit against Hugging Face.

``transformers.BertForQuestionAnswering``, built from a small random config (nothing
downloaded), holds the weights of a :class:`coursekit.models.bert.BertSpanExtractor` redrawn with
a large spread, so that a swapped start and end, a transposed ``qa_outputs`` or a missing bias
moves the logits far past the tolerance. The loss is also computed by hand from its definition,
and :func:`best_span` is checked against a search over every span.
"""

from __future__ import annotations

import itertools
import os

import pytest
import torch
import transformers

from coursekit.models.bert import (
    Bert,
    BertSpanExtractor,
    SpanHead,
    best_span,
    hf_config,
    span_loss,
    to_hf,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from test_ch07b_bert import CONFIG, TOL, spread_  # noqa: E402  (the same model and weight spread)


def to_hf_qa(model: BertSpanExtractor) -> dict[str, torch.Tensor]:
    """The extractor's weights as a ``BertForQuestionAnswering`` state dict (no pooler)."""
    state = {k: v for k, v in to_hf(model.bert).items()
             if k.startswith("bert.") and not k.startswith("bert.pooler.")}
    state["qa_outputs.weight"] = model.head.qa_outputs.weight.detach().clone()
    state["qa_outputs.bias"] = model.head.qa_outputs.bias.detach().clone()
    return state


@pytest.fixture(scope="module")
def pair():
    ours = spread_(BertSpanExtractor(Bert(CONFIG)))
    theirs = transformers.BertForQuestionAnswering(hf_config(CONFIG)).eval()
    theirs.load_state_dict(to_hf_qa(ours), strict=True)
    return ours, theirs


def batch(seed: int = 0, padded: bool = True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, CONFIG.vocab_size, (3, 11), generator=g)
    if padded:
        ids[1, 7:] = 0
        ids[2, 4:] = 0
    segments = torch.zeros_like(ids)
    segments[:, 5:] = 1
    return ids, segments, ids != 0


def test_shapes_and_padding():
    ids, segments, key_mask = batch()
    start, end = BertSpanExtractor(Bert(CONFIG)).eval()(ids, segments)
    assert start.shape == end.shape == ids.shape
    assert torch.isneginf(start[~key_mask]).all() and torch.isneginf(end[~key_mask]).all()
    assert torch.isfinite(start[key_mask]).all() and torch.isfinite(end[key_mask]).all()
    hidden = torch.randn(2, 5, 8)
    s, e = SpanHead(8)(hidden)  # no mask: every position is scored
    assert s.shape == e.shape == (2, 5) and torch.isfinite(s).all() and torch.isfinite(e).all()


def test_logits_and_loss_match_hugging_face(pair):
    ours, theirs = pair
    ids, segments, key_mask = batch()
    with torch.no_grad():
        start, end = ours(ids, segments, key_mask)
        out = theirs(input_ids=ids, token_type_ids=segments, attention_mask=key_mask.long())
    assert start[key_mask].abs().max() > 1.0  # large logits: errors cannot hide
    torch.testing.assert_close(start[key_mask], out.start_logits[key_mask], **TOL)
    torch.testing.assert_close(end[key_mask], out.end_logits[key_mask], **TOL)
    # the loss, on a batch without padding (Hugging Face keeps padding in its softmax)
    ids, segments, key_mask = batch(1, padded=False)
    first, last = torch.tensor([1, 4, 0]), torch.tensor([3, 4, 10])
    with torch.no_grad():
        start, end = ours(ids, segments, key_mask)
        out = theirs(input_ids=ids, token_type_ids=segments, start_positions=first,
                     end_positions=last)
    torch.testing.assert_close(span_loss(start, end, first, last), out.loss, **TOL)


def test_loss_is_the_mean_of_start_and_end_cross_entropies():
    g = torch.Generator().manual_seed(3)
    start, end = 4 * torch.randn(5, 9, generator=g), 4 * torch.randn(5, 9, generator=g)
    start[0, 7:] = end[0, 7:] = float("-inf")  # padding of row 0: out of the softmax
    first, last = torch.tensor([0, 2, 8, 3, 5]), torch.tensor([6, 2, 8, 7, 5])
    by_hand = 0.0
    for b in range(5):  # -log(exp(S·T_i*) / Σ_j exp(S·T_j)), the same for the end
        log_p_start = start[b, first[b]] - torch.log(torch.exp(start[b]).sum())
        log_p_end = end[b, last[b]] - torch.log(torch.exp(end[b]).sum())
        by_hand = by_hand - (log_p_start + log_p_end) / 2
    torch.testing.assert_close(span_loss(start, end, first, last), by_hand / 5)


def test_best_span_is_the_best_span_with_end_after_start():
    g = torch.Generator().manual_seed(4)
    start, end = torch.randn(64, 7, generator=g), torch.randn(64, 7, generator=g)
    for max_len in (None, 1, 3):
        i, j = best_span(start, end, max_len)
        for b in range(64):
            spans = [(s, e) for s, e in itertools.product(range(7), repeat=2)
                     if e >= s and (max_len is None or e - s < max_len)]
            expected = max(spans, key=lambda span: (start[b, span[0]] + end[b, span[1]]).item())
            assert (i[b].item(), j[b].item()) == expected
    # where the best end lies before the best start, the two argmaxes are not a span
    start = torch.tensor([[0.0, 0.0, 5.0, 0.0]])
    end = torch.tensor([[0.0, 4.0, 0.0, 1.0]])
    assert (start.argmax().item(), end.argmax().item()) == (2, 1)
    assert [t.item() for t in best_span(start, end)] == [2, 3]
