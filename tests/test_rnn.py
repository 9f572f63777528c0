"""coursekit.rnn against its authority, torch.nn, with the same weights."""

import random

import pytest
import torch
from torch import nn

from coursekit.data.sequences import SequenceTask
from coursekit.rnn import LSTM, RNN, Seq2Seq, lstm_cell, rnn_cell


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_rnn_cell_matches_torch():
    cell = nn.RNNCell(5, 7)
    x, h = torch.randn(4, 5), torch.randn(4, 7)
    ours = rnn_cell(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(ours, cell(x, h), atol=1e-6, rtol=1e-5)


def test_lstm_cell_matches_torch():
    cell = nn.LSTMCell(5, 7)
    x, h, c = torch.randn(4, 5), torch.randn(4, 7), torch.randn(4, 7)
    ours = lstm_cell(x, (h, c), cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    for a, b in zip(ours, cell(x, (h, c)), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _port(ours: nn.Module, theirs: nn.Module) -> None:
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(ours.cell, name).copy_(getattr(theirs, f"{name}_l0"))


def test_rnn_layer_matches_nn_rnn():
    ours, theirs = RNN(3, 6), nn.RNN(3, 6, batch_first=True)
    _port(ours, theirs)
    x = torch.randn(2, 9, 3)
    out, h = ours(x)
    ref_out, ref_h = theirs(x)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(h, ref_h[0], atol=1e-6, rtol=1e-5)


def test_lstm_layer_matches_nn_lstm_including_gradients():
    ours, theirs = LSTM(3, 6), nn.LSTM(3, 6, batch_first=True)
    _port(ours, theirs)
    x = torch.randn(2, 9, 3, requires_grad=True)
    out, (h, c) = ours(x)
    ref_out, (ref_h, ref_c) = theirs(x)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(c, ref_c[0], atol=1e-6, rtol=1e-5)
    (g_ours,) = torch.autograd.grad(out.sum(), x)
    (g_ref,) = torch.autograd.grad(ref_out.sum(), x)
    torch.testing.assert_close(g_ours, g_ref, atol=1e-5, rtol=1e-4)


def test_seq2seq_ignores_padding_and_decodes():
    task = SequenceTask("copy", 2, 6)
    model = Seq2Seq(len(task.vocab), len(task.vocab), d_emb=8, d_hidden=16).eval()
    batch = task.sample(5, random.Random(0))
    logits = model(batch.src, batch.src_len, batch.tgt_in)
    assert logits.shape == (5, batch.tgt_in.shape[1], len(task.vocab))
    # the encoder state of a sequence does not depend on how much padding follows it
    padded = torch.cat([batch.src, torch.zeros(5, 3, dtype=torch.long)], dim=1)
    for a, b in zip(model.encode(batch.src, batch.src_len), model.encode(padded, batch.src_len),
                    strict=True):
        torch.testing.assert_close(a, b)
    out = model.generate(batch.src, batch.src_len, max_len=4, bos_id=task.vocab.bos_id)
    assert out.shape == (5, 4) and out.dtype == torch.long


def test_sequence_tasks_and_vocab():
    rng = random.Random(0)
    for name, fn in [("copy", list), ("reverse", lambda s: s[::-1]), ("sort", sorted)]:
        batch = SequenceTask(name, 3, 5).sample(20, rng)
        for s, t in zip(batch.sources, batch.targets, strict=True):
            assert t == fn(s) and 3 <= len(s) <= 5
    task = SequenceTask("reverse", 2, 4)
    batch = task.sample(4, rng, length=3)
    assert batch.tgt_in[:, 0].eq(task.vocab.bos_id).all()
    assert batch.tgt_out[:, -1].eq(task.vocab.eos_id).all()
    assert task.vocab.decode(batch.tgt_out[0]) == "".join(batch.targets[0])
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_out, batch.tgt_out) and moved.sources == batch.sources
    with pytest.raises(ValueError, match="unknown task"):
        SequenceTask("shuffle")
    with pytest.raises(KeyError, match="not in the vocabulary"):
        task.vocab.encode(["x"])
