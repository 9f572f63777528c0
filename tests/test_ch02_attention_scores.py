"""Chapter 2's references in coursekit.attention against their authorities (torch.nn.Linear,
nn.Bilinear, torch.softmax, F.scaled_dot_product_attention), and the two attention models built
on them (coursekit.rnn.AttentionSeq2Seq, coursekit.models.captioner.AttentionCaptioner)."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from coursekit.attention import (
    AdditiveAttention,
    additive_score,
    context_vector,
    dot_score,
    general_score,
    masked_softmax,
    padding_mask,
)
from coursekit.data.dates import Dates
from coursekit.data.scenes import DigitScenes
from coursekit.models.captioner import AttentionCaptioner
from coursekit.rnn import AttentionSeq2Seq, ContextSeq2Seq

TOL = dict(atol=1e-6, rtol=1e-5)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def linear_additive_attention(layer: AdditiveAttention, s, h, mask=None):
    """Bahdanau attention from torch.nn parts: the layer's Linear modules, torch.softmax over the
    allowed positions, and an einsum for the context."""
    e = layer.v(torch.tanh(layer.W(s)[:, None, :] + layer.U(h))).squeeze(-1)  # (B, T)
    if mask is not None:
        e = e.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(e, dim=-1)
    return torch.einsum("bt,btd->bd", weights, h), weights, e


# ----------------------------------------------------------------------------- additive score


def test_additive_score_matches_nn_linear():
    B, T, d_s, d_h, d_a = 4, 7, 5, 6, 3
    W, U, v = nn.Linear(d_s, d_a, bias=False), nn.Linear(d_h, d_a, bias=False), nn.Linear(d_a, 1, bias=False)
    s, h = torch.randn(B, d_s), torch.randn(B, T, d_h)
    expected = v(torch.tanh(W(s).unsqueeze(1) + U(h))).squeeze(-1)
    got = additive_score(s, h, W.weight, U.weight, v.weight[0])
    assert got.shape == (B, T)
    torch.testing.assert_close(got, expected, **TOL)


def test_additive_score_by_hand():
    # W = U = I, v = (1, 1): e_j = tanh(s1 + h_j1) + tanh(s2 + h_j2)
    s = torch.tensor([[0.5, -1.0]])
    h = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [-0.5, 1.0]]])
    eye = torch.eye(2)
    got = additive_score(s, h, eye, eye, torch.ones(2))
    expected = torch.tensor([[torch.tanh(torch.tensor(1.5)) + torch.tanh(torch.tensor(-1.0)),
                              torch.tanh(torch.tensor(0.5)) + torch.tanh(torch.tensor(1.0)),
                              torch.tanh(torch.tensor(0.0)) + torch.tanh(torch.tensor(0.0))]])
    torch.testing.assert_close(got, expected, **TOL)


def test_additive_attention_layer_matches_torch_parts_with_gradients():
    layer = AdditiveAttention(d_query=5, d_key=6, d_attn=4)
    s = torch.randn(3, 5, requires_grad=True)
    h = torch.randn(3, 8, 6, requires_grad=True)
    mask = padding_mask(torch.tensor([8, 5, 2]), 8)
    context, weights = layer(s, h, mask)
    ref_context, ref_weights, _ = linear_additive_attention(layer, s, h, mask)
    assert context.shape == (3, 6) and weights.shape == (3, 8)
    torch.testing.assert_close(context, ref_context, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    assert weights[~mask].eq(0).all()
    g = torch.randn(3, 6)
    grads = torch.autograd.grad((context * g).sum(), (s, h, *layer.parameters()))
    ref_grads = torch.autograd.grad((ref_context * g).sum(), (s, h, *layer.parameters()))
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert grads[1][~mask].eq(0).all(), "padding must receive no gradient"


# ----------------------------------------------------------------------------- masked softmax


def test_masked_softmax_equals_torch_softmax_when_nothing_is_masked():
    scores = torch.randn(4, 3, 9)
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1), **TOL)
    everything = torch.ones(4, 1, 9, dtype=torch.bool)
    torch.testing.assert_close(masked_softmax(scores, everything), torch.softmax(scores, dim=-1), **TOL)
    torch.testing.assert_close(masked_softmax(scores, dim=1), torch.softmax(scores, dim=1), **TOL)


def test_masked_softmax_is_softmax_over_the_allowed_positions():
    scores = torch.randn(5, 7) * 3
    mask = torch.rand(5, 7) > 0.4
    mask[:, 0] = True
    got = masked_softmax(scores, mask)
    for r in range(5):
        torch.testing.assert_close(got[r, mask[r]], torch.softmax(scores[r, mask[r]], dim=0), **TOL)
        assert got[r, ~mask[r]].eq(0).all()
    torch.testing.assert_close(got.sum(-1), torch.ones(5), **TOL)


def test_masked_softmax_fully_masked_row_is_zero_with_finite_gradients():
    scores = torch.randn(3, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    weights = masked_softmax(scores, mask)
    assert torch.isfinite(weights).all()
    assert weights[1].eq(0).all(), "a row with nothing allowed gives zeros, not NaN or uniform"
    (grad,) = torch.autograd.grad((weights * torch.randn(3, 5)).sum(), scores)
    assert torch.isfinite(grad).all()
    assert grad[~mask].eq(0).all(), "masked scores must receive no gradient"
    # the allowed rows' gradients are those of torch.softmax over the allowed entries
    sub = scores.detach()[0, :2].requires_grad_()
    upstream = torch.randn(2)
    (g_ref,) = torch.autograd.grad((torch.softmax(sub, 0) * upstream).sum(), sub)
    (g_ours,) = torch.autograd.grad((masked_softmax(scores, mask)[0, :2] * upstream).sum(), scores)
    torch.testing.assert_close(g_ours[0, :2], g_ref, **TOL)


def test_masked_softmax_uses_minus_infinity_not_a_large_negative_number():
    scores = torch.tensor([[-3e6, -4e6, 0.0]])       # real scores far below -1e6
    mask = torch.tensor([[True, True, False]])
    weights = masked_softmax(scores, mask)
    assert weights[0, 2] == 0, "a finite fill such as -1e6 would put the weight on the padding"
    torch.testing.assert_close(weights[0, :2], torch.tensor([1.0, 0.0]), **TOL)


def test_masked_softmax_large_scores_are_stable():
    scores = torch.tensor([[500.0, 499.0, 1000.0]])
    weights = masked_softmax(scores, torch.tensor([[True, True, False]]))
    torch.testing.assert_close(weights, torch.softmax(torch.tensor([[1.0, 0.0, float("-inf")]]), -1),
                               **TOL)


def test_masked_softmax_and_context_match_scaled_dot_product_attention():
    B, N_q, N_k, d = 2, 4, 6, 8
    q, k, v = torch.randn(B, N_q, d), torch.randn(B, N_k, d), torch.randn(B, N_k, d)
    mask = padding_mask(torch.tensor([6, 3]), N_k)[:, None, :]   # (B, 1, N_k)
    weights = masked_softmax(q @ k.transpose(1, 2) / d**0.5, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(weights @ v, expected, atol=1e-5, rtol=1e-4)


def test_padding_mask():
    mask = padding_mask(torch.tensor([3, 1, 0]), max_len=4)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, True, True, False], [True, False, False, False], [False] * 4]
    assert padding_mask(torch.tensor([2, 5])).shape == (2, 5)


# ----------------------------------------------------------------------------- dot / general


def test_dot_score_matches_einsum_and_sdpa():
    s, h = torch.randn(3, 5), torch.randn(3, 7, 5)
    e = dot_score(s, h)
    torch.testing.assert_close(e, torch.einsum("bd,btd->bt", s, h), **TOL)
    # Luong's dot attention is scaled-dot-product attention with one query and no scaling
    expected = F.scaled_dot_product_attention(s[:, None, :], h, h, scale=1.0)[:, 0]
    torch.testing.assert_close(context_vector(masked_softmax(e), h), expected, atol=1e-5, rtol=1e-4)


def test_general_score_matches_nn_bilinear():
    d_s, d_h = 4, 6
    bilinear = nn.Bilinear(d_h, d_s, 1, bias=False)  # h_jᵀ A s with A: (1, d_h, d_s)
    s, h = torch.randn(3, d_s), torch.randn(3, 5, d_h)
    expected = bilinear(h, s[:, None, :].expand(3, 5, d_s)).squeeze(-1)
    torch.testing.assert_close(general_score(s, h, bilinear.weight[0]), expected, **TOL)
    # with W = I the general score is the dot score
    torch.testing.assert_close(general_score(s, h[..., :4], torch.eye(4)), dot_score(s, h[..., :4]),
                               **TOL)


# ----------------------------------------------------------------------------- context vector


def test_context_vector_is_the_weighted_sum():
    weights = torch.softmax(torch.randn(4, 6), dim=-1)
    weights[-1] = 0.0
    h = torch.randn(4, 6, 3)
    c = context_vector(weights, h)
    torch.testing.assert_close(c, torch.einsum("bt,btd->bd", weights, h), **TOL)
    for b in range(4):
        torch.testing.assert_close(c[b], sum(weights[b, j] * h[b, j] for j in range(6)), **TOL)
    assert c[-1].eq(0).all()
    one_hot = F.one_hot(torch.tensor([2, 0, 5, 1]), 6).float()
    torch.testing.assert_close(context_vector(one_hot, h), h[torch.arange(4), [2, 0, 5, 1]])


# ----------------------------------------------------------------------------- the models


def _step_by_step(model: AttentionSeq2Seq, src, src_len, tgt_in):
    """The decoder of AttentionSeq2Seq unrolled from torch.nn parts (Bahdanau's equations)."""
    h, mask, (s, c) = model.encode(src, src_len)
    att, logits, alphas = model.attention, [], []
    for y_prev in tgt_in.unbind(1):
        y = model.tgt_emb(y_prev)
        context, alpha, _ = linear_additive_attention(att, s, h, mask)   # e_ij = a(s_{i-1}, h_j)
        s, c = model.decoder(torch.cat([y, context], -1), (s, c))
        logits.append(model.out(torch.cat([s, context, y], -1)))
        alphas.append(alpha)
    return torch.stack(logits, 1), torch.stack(alphas, 1)


def test_attention_seq2seq_matches_step_by_step_and_ignores_padding():
    data = Dates()
    model = AttentionSeq2Seq(len(data.src_vocab), len(data.tgt_vocab), d_emb=8, d_hidden=12, d_attn=10)
    model.eval()
    batch = data.sample(6, random.Random(0))
    logits = model(batch.src, batch.src_len, batch.tgt_in)
    ref_logits, _ = _step_by_step(model, batch.src, batch.src_len, batch.tgt_in)
    assert logits.shape == (6, 11, len(data.tgt_vocab))
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-4)

    # the encoder's annotations of the real tokens do not depend on how much padding follows
    padded = torch.cat([batch.src, torch.zeros(6, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, batch.src_len, batch.tgt_in), logits, atol=1e-5, rtol=1e-4)
    h, mask, _ = model.encode(batch.src, batch.src_len)
    h_solo, _, _ = model.encode(batch.src[:1, : batch.src_len[0]], batch.src_len[:1])
    torch.testing.assert_close(h[:1, : batch.src_len[0]], h_solo, atol=1e-5, rtol=1e-4)

    tokens, weights = model.generate(batch.src, batch.src_len, max_len=11, bos_id=data.tgt_vocab.bos_id)
    assert tokens.shape == (6, 11) and weights.shape == (6, 11, batch.src.shape[1])
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 11), **TOL)
    assert weights.masked_select(~mask[:, None, :]).eq(0).all(), "attention on padding"
    # greedy decoding is teacher forcing on its own output
    forced_in = torch.cat([batch.tgt_in[:, :1], tokens[:, :-1]], dim=1)
    forced_logits, forced_weights = _step_by_step(model, batch.src, batch.src_len, forced_in)
    assert forced_logits.argmax(-1).equal(tokens)
    torch.testing.assert_close(forced_weights, weights, atol=1e-5, rtol=1e-4)


def test_attention_seq2seq_unidirectional_and_gradients_reach_the_attention():
    data = Dates()
    model = AttentionSeq2Seq(len(data.src_vocab), len(data.tgt_vocab), d_emb=8, d_hidden=12,
                             bidirectional=False)
    batch = data.sample(4, random.Random(1))
    logits = model(batch.src, batch.src_len, batch.tgt_in)
    F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten()).backward()
    for name, p in model.named_parameters():
        if name != "tgt_emb.weight":
            assert p.grad is not None and p.grad.abs().sum() > 0, name



class _LastState(nn.Module):
    """An 'attention' that always reads the last real encoder state h_N (no search)."""

    def keys(self, h):                                                # nothing to precompute
        return None

    def forward(self, s, h, mask, keys=None):
        last = mask.sum(-1) - 1                                       # (B,) index of h_N
        weights = F.one_hot(last, h.shape[1]).to(h.dtype)
        return h[torch.arange(h.shape[0]), last], weights


def test_context_seq2seq_is_the_attention_model_with_a_fixed_context():
    """ContextSeq2Seq (fused nn.LSTM decoder) == AttentionSeq2Seq(bidirectional=False) whose
    attention is replaced by c_i = h_N, with the same weights: the two differ only in the search."""
    data = Dates()
    V_src, V_tgt = len(data.src_vocab), len(data.tgt_vocab)
    ctx = ContextSeq2Seq(V_src, V_tgt, d_emb=8, d_hidden=12).eval()
    att = AttentionSeq2Seq(V_src, V_tgt, d_emb=8, d_hidden=12, d_attn=10, bidirectional=False).eval()
    shared = {k: v for k, v in ctx.state_dict().items() if not k.startswith("decoder.")}
    att.load_state_dict({**att.state_dict(), **shared})
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(att.decoder, name).copy_(getattr(ctx.decoder, name + "_l0"))
    att.attention = _LastState()
    n_alignment = sum(p.numel() for p in AdditiveAttention(12, 12, 10).parameters())
    assert sum(p.numel() for p in ctx.parameters()) == sum(
        p.numel() for p in AttentionSeq2Seq(V_src, V_tgt, d_emb=8, d_hidden=12, d_attn=10,
                                            bidirectional=False).parameters()) - n_alignment

    batch = data.sample(6, random.Random(0))
    padded = torch.cat([batch.src, torch.zeros(6, 3, dtype=torch.long)], dim=1)
    logits = ctx(batch.src, batch.src_len, batch.tgt_in)
    torch.testing.assert_close(logits, att(batch.src, batch.src_len, batch.tgt_in), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ctx(padded, batch.src_len, batch.tgt_in), logits, atol=1e-5, rtol=1e-4)
    tokens = ctx.generate(batch.src, batch.src_len, max_len=11, bos_id=data.tgt_vocab.bos_id)
    ref_tokens, _ = att.generate(batch.src, batch.src_len, max_len=11, bos_id=data.tgt_vocab.bos_id)
    assert tokens.shape == (6, 11) and tokens.equal(ref_tokens)


def test_captioner_shapes_weights_and_teacher_forcing():
    scenes = DigitScenes()
    model = AttentionCaptioner(len(scenes.vocab), d_feat=16, d_emb=8, d_hidden=16, d_attn=8).eval()
    batch = scenes.sample(5, random.Random(0))
    features, _ = model.encode(batch.images)
    assert features.shape == (5, 9, 16)
    logits = model(batch.images, batch.tgt_in)
    assert logits.shape == (*batch.tgt_in.shape, len(scenes.vocab))
    tokens, weights = model.generate(batch.images, max_len=6, bos_id=scenes.vocab.bos_id)
    assert tokens.shape == (5, 6) and weights.shape == (5, 6, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, 6), **TOL)
    forced_in = torch.cat([batch.tgt_in[:, :1], tokens[:, :-1]], dim=1)
    assert model(batch.images, forced_in).argmax(-1).equal(tokens)
    # grid features are laid out row-major: cell k is pooled from row k // 3, column k % 3
    cnn_out = model.encoder.cnn(batch.images)                       # (B, C, 3, 3)
    expected = model.encoder.norm(model.encoder.proj(cnn_out[:, :, 1, 2]) + model.encoder.position[5])
    torch.testing.assert_close(features[:, 5], expected, **TOL)


def test_keys_computed_once_give_the_same_scores_as_computed_at_every_step():
    """The decoders compute U h_j once per sentence (AdditiveAttention.keys) and pass it to
    every step: the same context and weights, to the bit, as computing it inside the step."""
    torch.manual_seed(0)
    layer = AdditiveAttention(d_query=6, d_key=10, d_attn=8)
    for p in layer.parameters():
        nn.init.normal_(p, std=0.5)
    s, h = torch.randn(3, 6), torch.randn(3, 5, 10)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4])
    keys = layer.keys(h)
    assert keys.shape == (3, 5, 8)
    for got, want in zip(layer(s, h, mask, keys), layer(s, h, mask), strict=True):
        assert torch.equal(got, want)
    W, U, v = layer.W.weight, layer.U.weight, layer.v.weight[0]
    by_hand = (torch.tanh((s @ W.T)[:, None] + h @ U.T) * v).sum(-1)   # vᵀ tanh(W s + U h_j)
    torch.testing.assert_close(additive_score(s, h, W, U, v), by_hand)


def test_one_way_encoders_read_the_padded_batch_as_packing_would():
    """A one-way encoder runs unpacked (rnn.last_real): at every real position, and for the final
    state h_N that starts the decoder, it must give what pack_padded_sequence gives, whatever
    each source's length and however much padding follows it."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    data = Dates()
    batch = data.sample(8, random.Random(3))
    src = torch.cat([batch.src, torch.zeros(8, 4, dtype=torch.long)], dim=1)  # extra padding
    assert len(set(batch.src_len.tolist())) > 1, "the batch should mix source lengths"
    model = AttentionSeq2Seq(len(data.src_vocab), len(data.tgt_vocab), d_emb=8, d_hidden=12,
                             bidirectional=False)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
        h, mask, (s0, cell) = model.encode(src, batch.src_len)
        packed = pack_padded_sequence(model.src_emb(src), batch.src_len, batch_first=True,
                                      enforce_sorted=False)
        h_ref, (h_n, _) = model.encoder(packed)
        h_ref, _ = pad_packed_sequence(h_ref, batch_first=True, total_length=src.shape[1])
    torch.testing.assert_close(h[mask], h_ref[mask], **TOL)
    torch.testing.assert_close(s0, torch.tanh(model.init_state(h_n[-1])), **TOL)
    assert not cell.any()
    assert not torch.allclose(h[~mask], h_ref[~mask]), "padding positions differ (never attended)"

    ctx = ContextSeq2Seq(len(data.src_vocab), len(data.tgt_vocab), d_emb=8, d_hidden=12)
    with torch.no_grad():
        for p in ctx.parameters():
            p.normal_(0, 0.5)
        c, _ = ctx.encode(src, batch.src_len)
        packed = pack_padded_sequence(ctx.src_emb(src), batch.src_len, batch_first=True,
                                      enforce_sorted=False)
        _, (h_n, _) = ctx.encoder(packed)
    torch.testing.assert_close(c, h_n[-1], **TOL)
