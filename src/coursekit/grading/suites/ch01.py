"""Chapter 1 — RNN recap: ``rnn_cell`` and ``lstm_cell``, graded against torch.nn's cells."""

from __future__ import annotations

import torch
from torch import nn

from coursekit import rnn
from coursekit.grading.suite import Case, Mutant, Suite, derived, in_dtype
from coursekit.grading.suites.attention_readings import DTYPE_READING, dtype_observation


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


def _rnn_two_tanh(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x @ W_ih.T + b_ih) + torch.tanh(h @ W_hh.T + b_hh)


def _rnn_sigmoid(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.sigmoid(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)


def _rnn_untransposed(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x @ W_ih + b_ih + h @ W_hh + b_hh)  # runs only when D = d_h


def _rnn_W_hh_untransposed(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(x @ W_ih.T + b_ih + h @ W_hh + b_hh)


def _rnn_weights_swapped(x, h, W_ih, W_hh, b_ih, b_hh):
    return torch.tanh(h @ W_ih.T + b_ih + x @ W_hh.T + b_hh)  # runs only when D = d_h


def _lstm(order: str = "ifgo", gate_act=torch.sigmoid, carry: bool = True, cell_act=torch.tanh,
          forget_bias: float = 0.0, candidate_act=torch.tanh, h_from_old_cell: bool = False,
          interleaved: bool = False, out_gate_act=None, returns="h', c'"):
    def cell(x, state, W_ih, W_hh, b_ih, b_hh):
        h, c = state
        a = x @ W_ih.T + b_ih + h @ W_hh.T + b_hh
        chunks = a.view(a.shape[0], -1, 4).unbind(-1) if interleaved else a.chunk(4, dim=-1)
        gates = dict(zip(order, chunks, strict=True))
        i, o = gate_act(gates["i"]), (out_gate_act or gate_act)(gates["o"])
        f = gate_act(gates["f"] + forget_bias)
        c_next = (f * c if carry else 0) + i * candidate_act(gates["g"])
        h_next = o * cell_act(c if h_from_old_cell else c_next)
        return {"h', c'": (h_next, c_next), "c', h'": (c_next, h_next), "h', c": (h_next, c)}[
            returns]

    return cell


def _saturating(case: Case, what: str) -> list[Case]:
    """``case`` with x times 40 (pre-activations up to about ±100, where tanh and σ saturate),
    in float32 and in float64. float32 is not compared below 1e-5, where a clamp of the
    pre-activation hides, and its gradients there are rounding: its gradients are not compared.
    float64 is compared within 1e-10, where tanh(a) = ±(1 - 2e^(-2|a|)) is not ±1."""
    large = derived(case, f"large pre-activations ({what})",
                    lambda args: (args[0] * 40, *args[1:]), grad=False, hint=(
                        f"Here the pre-activations reach about ±100 ({what}): use "
                        "torch.tanh and torch.sigmoid on the pre-activations as they are. A "
                        "formula that calls exp itself, such as (e^(2a) - 1)/(e^(2a) + 1), "
                        "overflows to inf there and gives NaN."))
    exact = in_dtype(large, torch.float64, grad=True, atol=1e-10, rtol=1e-8, hint=(
        "In float64, compared within 1e-10, with large pre-activations, where tanh(a) = "
        "±(1 - 2e^(-2|a|)) is not exactly ±1: your values are off by more than float64's "
        "rounding. A clamp or a threshold on the pre-activation (such as a.clamp(-5, 5)) shows "
        "here, and so does a step computed in float32 (a .float(), a float32 constant). Take "
        "torch.tanh of the exact pre-activation, in the inputs' dtype."))
    return [large, exact]


# What an observation means in a cell, where it means one thing: a right output with a wrong
# gradient has the pre-activation changed where the change hardly shows in the value (a clamp,
# a threshold).
CLAMP_READING = (
    r"is right, but the gradient",
    "Your values are right but their gradient is not: the cell must be differentiable as "
    "written, tanh and σ of the exact pre-activation. A clamp or a threshold on the "
    "pre-activation (or a value computed outside autograd) barely changes the output where "
    "tanh saturates, but cuts the gradient there.")

RNN_CASES = [
    Case("one step, batch 1 (D=3, d_h=3)", _rnn_case(1, 3, 3)),
    Case("batch 4, D=5 ≠ d_h=7", _rnn_case(4, 5, 7),
         hint="With D ≠ d_h the weight shapes matter: W_ih is (d_h, D), so the input term is x @ W_ih.T."),
    Case("batch 8, D=16, d_h=32", _rnn_case(8, 16, 32)),
]
RNN_CASES += [in_dtype(RNN_CASES[1], torch.float64),
              *_saturating(RNN_CASES[1], "tanh saturates")]

LSTM_CASES = [
    Case("one step, batch 1 (D=3, d_h=2)", _lstm_case(1, 3, 2)),
    Case("batch 4, D=5 ≠ d_h=7", _lstm_case(4, 5, 7),
         hint="W_ih is (4 d_h, D): the input term is x @ W_ih.T, then split the 4 d_h columns into "
              "the gates and the candidate."),
    Case("batch 8, D=16, d_h=32", _lstm_case(8, 16, 32)),
]
LSTM_CASES += [in_dtype(LSTM_CASES[1], torch.float64),
               *_saturating(LSTM_CASES[1], "tanh and σ saturate")]

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
        observe=dtype_observation,
        readings=(DTYPE_READING, CLAMP_READING,
                  (r"is the expected one times",
                   "Your h' is a constant multiple of the right one: return tanh(...) itself, "
                   "with no factor or normalisation after it (the tanh already keeps it in "
                   "(-1, 1)).")),
        mutants=[
            Mutant("relu", _rnn_relu,
                   "Your cell matches one with ReLU as its non-linearity; the Elman cell (and "
                   "nn.RNNCell's default) uses tanh."),
            Mutant("no recurrence", _rnn_no_recurrence,
                   "Your output does not depend on the previous hidden state h: add h @ W_hh.T."),
            Mutant("one bias", _rnn_one_bias,
                   "Your cell matches one that drops b_hh: PyTorch's cell has two biases, b_ih and "
                   "b_hh, and adds both."),
            Mutant("sigmoid", _rnn_sigmoid,
                   "Your cell matches one with a sigmoid as its non-linearity: the Elman cell "
                   "(nn.RNNCell) uses tanh, so h' lies in (-1, 1), not (0, 1)."),
            Mutant("weights not transposed", _rnn_untransposed,
                   "Your cell multiplies by W_ih and W_hh untransposed: they are laid out as "
                   "nn.RNNCell's, (d_h, D) and (d_h, d_h), so the terms are x @ W_ih.T and "
                   "h @ W_hh.T (untransposed, the shapes fit only when D = d_h, and the values "
                   "are wrong even then)."),
            Mutant("W_hh not transposed", _rnn_W_hh_untransposed,
                   "Your recurrent term uses W_hh untransposed: it is laid out as nn.RNNCell's "
                   "weight_hh, so the term is h @ W_hh.T (W_hh is square, so h @ W_hh runs, but "
                   "it computes another sum)."),
            Mutant("input and recurrent weights swapped", _rnn_weights_swapped,
                   "Your cell applies W_ih to h and W_hh to x: W_ih maps the input x (D "
                   "features) and W_hh the previous state h (d_h features)."),
            Mutant("tanh of each term", _rnn_two_tanh,
                   "You apply tanh to the input term and to the recurrent term separately and add "
                   "the results: the cell takes one tanh of the whole sum, "
                   "tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)."),
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
        observe=dtype_observation,
        readings=(DTYPE_READING, CLAMP_READING),
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
            Mutant("returns (c', h')", _lstm(returns="c', h'"),
                   "Your cell returns (c', h'): return the new hidden state first, (h', c'), as "
                   "nn.LSTMCell does."),
            Mutant("returns the old cell state", _lstm(returns="h', c"),
                   "Your cell returns the cell state it was given: return the new one, "
                   "(h', c') with c' = σ(f)·c + σ(i)·tanh(g)."),
            Mutant("output gate without sigmoid", _lstm(out_gate_act=lambda a: a),
                   "Your output gate is used without its sigmoid: h' = σ(a_o)·tanh(c'), the gate "
                   "squashed to (0, 1)."),
            Mutant("forget gate bias +1", _lstm(forget_bias=1.0),
                   "Your forget gate is σ(a_f + 1): nn.LSTMCell adds no constant to it "
                   "(TensorFlow's forget_bias=1 is a choice of initial bias, made in b_ih or "
                   "b_hh, not in the cell). f = σ(a_f)."),
            Mutant("candidate without tanh", _lstm(candidate_act=lambda g: g),
                   "Your candidate is written without its tanh: c' = σ(f)·c + σ(i)·tanh(a_g), "
                   "the candidate squashed to (-1, 1) before the input gate lets it in."),
            Mutant("h' from the old cell state", _lstm(h_from_old_cell=True),
                   "Your h' reads the previous cell state c: the output shows the new one, "
                   "h' = σ(o)·tanh(c'), with c' computed first."),
            Mutant("gates interleaved", _lstm(interleaved=True),
                   "Your gates take every fourth pre-activation (a view as (B, d_h, 4)): PyTorch "
                   "stacks i, f, g, o as four contiguous blocks of d_h (chunk(4, dim=-1), or "
                   "a[:, :d_h], a[:, d_h:2 * d_h], ...)."),
        ],
    ),
]
