"""Chapter 1 — RNN recap: ``rnn_cell`` and ``lstm_cell``, graded against torch.nn's cells."""

from __future__ import annotations

import torch
from torch import nn

from coursekit import rnn
from coursekit.grading.suite import Case, Mutant, Suite


def _weights(g: torch.Generator, gates: int, B: int, D: int, d_h: int, state: bool):
    x = torch.randn(B, D, generator=g)
    h = torch.randn(B, d_h, generator=g) * 0.5
    c = torch.randn(B, d_h, generator=g) * 0.5
    params = [torch.randn(*shape, generator=g) * 0.5
              for shape in [(gates * d_h, D), (gates * d_h, d_h), (gates * d_h,), (gates * d_h,)]]
    return (x, (h, c), *params) if state else (x, h, *params)


def _rnn_case(B, D, d_h):
    return lambda g: _weights(g, 1, B, D, d_h, state=False)


def _lstm_case(B, D, d_h):
    return lambda g: _weights(g, 4, B, D, d_h, state=True)


# The references are torch.nn's own cells loaded with the case's weights: the authority decides.
# ``functional_call`` runs the module's own forward with the given tensors as its weights, so
# that the gradients with respect to the weights are the authority's too.
def _weights_of(W_ih, W_hh, b_ih, b_hh) -> dict:
    return {"weight_ih": W_ih, "weight_hh": W_hh, "bias_ih": b_ih, "bias_hh": b_hh}


def torch_rnn_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    cell = nn.RNNCell(W_ih.shape[1], W_ih.shape[0])
    return torch.func.functional_call(cell, _weights_of(W_ih, W_hh, b_ih, b_hh), (x, h))


def torch_lstm_cell(x, state, W_ih, W_hh, b_ih, b_hh):
    cell = nn.LSTMCell(W_ih.shape[1], W_ih.shape[0] // 4)
    return torch.func.functional_call(cell, _weights_of(W_ih, W_hh, b_ih, b_hh), (x, state))


# ---- plausible wrong implementations (each must lose points and get its own hint)
def _rnn_relu(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.relu(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)


def _rnn_no_recurrence(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x @ W_ih.T + b_ih + b_hh)


def _rnn_one_bias(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x @ W_ih.T + h @ W_hh.T + b_ih)


def _lstm(order: str = "ifgo", gate_act=torch.sigmoid, carry: bool = True, cell_act=torch.tanh):
    def cell(x, state, W_ih, W_hh, b_ih, b_hh):
        h, c = state
        gates = dict(zip(order, (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, dim=-1),
                         strict=True))
        i, f, o = gate_act(gates["i"]), gate_act(gates["f"]), gate_act(gates["o"])
        c_next = (f * c if carry else 0) + i * torch.tanh(gates["g"])
        return o * cell_act(c_next), c_next

    return cell


RNN_CASES = [
    Case("one step, batch 1 (D=3, d_h=3)", _rnn_case(1, 3, 3)),
    Case("batch 4, D=5 ≠ d_h=7", _rnn_case(4, 5, 7),
         hint="With D ≠ d_h the weight shapes matter: W_ih is (d_h, D), so the input term is x @ W_ih.T."),
    Case("batch 8, D=16, d_h=32", _rnn_case(8, 16, 32)),
]

LSTM_CASES = [
    Case("one step, batch 1 (D=3, d_h=2)", _lstm_case(1, 3, 2)),
    Case("batch 4, D=5 ≠ d_h=7", _lstm_case(4, 5, 7),
         hint="W_ih is (4 d_h, D): the input term is x @ W_ih.T, then split the 4 d_h columns into "
              "the gates and the candidate."),
    Case("batch 8, D=16, d_h=32", _lstm_case(8, 16, 32)),
]

SUITES = [
    Suite(
        exercise="01.1",
        name="rnn_cell",
        grad=("x", "h", "W_ih", "W_hh", "b_ih", "b_hh"),
        points=2,
        reference=torch_rnn_cell,
        solution=rnn.rnn_cell,
        cases=RNN_CASES,
        hint="h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh): check each term is there once.",
        mutants=[
            Mutant("relu", _rnn_relu,
                   "Your cell matches one with ReLU as its non-linearity; the Elman cell (and "
                   "nn.RNNCell's default) uses tanh."),
            Mutant("no recurrence", _rnn_no_recurrence,
                   "Your output does not depend on the previous hidden state h: add h @ W_hh.T."),
            Mutant("one bias", _rnn_one_bias,
                   "Your cell matches one that drops b_hh: PyTorch's cell has two biases, b_ih and "
                   "b_hh, and adds both."),
        ],
    ),
    Suite(
        exercise="01.2",
        name="lstm_cell",
        grad=("x", "W_ih", "W_hh", "b_ih", "b_hh"),
        points=3,
        reference=torch_lstm_cell,
        solution=rnn.lstm_cell,
        cases=LSTM_CASES,
        hint="Split the 4 d_h pre-activations into i, f, g, o (in that order), then "
             "c' = σ(f)·c + σ(i)·tanh(g) and h' = σ(o)·tanh(c').",
        mutants=[
            Mutant("gate order i,f,o,g", _lstm(order="ifog"),
                   "Your gates are in the wrong order: you read the chunks as i, f, o, g. PyTorch "
                   "stacks them as input, forget, cell (g), output — i, f, g, o."),
            Mutant("gate order f,i,g,o", _lstm(order="figo"),
                   "Your gates are in the wrong order: you swapped the input and forget gates. "
                   "PyTorch stacks them as i, f, g, o."),
            Mutant("tanh gates", _lstm(gate_act=torch.tanh),
                   "Your gates use tanh where a sigmoid belongs: i, f and o are σ(·), squashed to "
                   "(0, 1) so they act as soft switches; only the candidate g uses tanh."),
            Mutant("cell state not carried", _lstm(carry=False),
                   "Your new cell state forgets the old one: c' must be f·c + i·g. Without the "
                   "f·c term the cell state is not carried from step to step."),
            Mutant("no tanh on c'", _lstm(cell_act=lambda c: c),
                   "Your h' uses c' directly: the output is h' = σ(o)·tanh(c')."),
        ],
    ),
]
