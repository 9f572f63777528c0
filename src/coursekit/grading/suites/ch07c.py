"""Chapter 7, notebook 07c (from a language model to an assistant) — ``dpo_loss``.

The authority is DPO's loss as the paper writes it (Rafailov et al. 2023, Eq. 7), evaluated in
float64 with the logistic function itself, ``-log(1 / (1 + exp(-β m)))``, where float64 has
room for every case's margin; ``tests/test_ch07a_dpo.py`` checks coursekit's
:func:`coursekit.preference.dpo_loss` (the ``solution``) against a hand computation and against
the paper's gradient. The cases draw the four log-probabilities as a language model gives them
(sums of token log-probabilities: negative, tens of nats), at several β, and with margins of
hundreds of nats, where ``-log(sigmoid(x))`` in float32 gives infinity and ``F.logsigmoid``
stays finite. The gradient with respect to the policy's two log-probabilities is compared too:
it is what trains the policy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from coursekit import preference
from coursekit.grading.suite import Case, Mutant, Suite


def paper_dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1):
    """The authority: Eq. 7, the mean over the batch of -log σ(β m), in float64."""
    m = ((policy_chosen.double() - reference_chosen.double())
         - (policy_rejected.double() - reference_rejected.double()))
    return (-torch.log(1 / (1 + torch.exp(-beta * m)))).mean().to(policy_chosen.dtype)


def _dpo_case(B, *, beta=0.1, spread=3.0, margin=None, equal=False):
    """Four (B,) log-probabilities of responses of 5-30 tokens; ``margin`` sets the policy's
    log-ratio gap outright (hundreds of nats for the stability case); ``equal``: π_θ = π_ref."""
    def make(g):
        reference = -torch.empty(2, B).uniform_(5.0, 60.0, generator=g)
        if equal:
            policy = reference.clone()
        else:
            policy = reference + spread * torch.randn(2, B, generator=g)
        if margin is not None:
            policy[0] = reference[0] + margin / 2
            policy[1] = reference[1] - margin / 2
        return policy[0], policy[1], reference[0], reference[1], beta

    return make


CASES = [
    Case("by hand: π_θ = π_ref, so the loss is log 2", _dpo_case(4, equal=True),
         hint="At the start the policy is the reference: both log-ratios are 0, the margin is 0, "
              "and the loss is −log σ(0) = log 2 ≈ 0.693."),
    Case("B = 8 pairs, β = 0.1", _dpo_case(8)),
    Case("β = 0.5", _dpo_case(8, beta=0.5),
         hint="β multiplies the margin inside the sigmoid: −log σ(β·m)."),
    Case("one pair, β = 1", _dpo_case(1, beta=1.0)),
    Case("the policy far behind the reference on y_w: margins near −300", _dpo_case(6, beta=1.0,
                                                                                   margin=-300.0),
         hint="For a large negative margin σ(β m) underflows to 0 in float32 and its log is −∞. "
              "Compute −log σ(x) as −F.logsigmoid(x), which is finite for every x."),
    Case("margins near +300: the loss is almost 0", _dpo_case(6, beta=1.0, margin=300.0)),
    Case("the policy moved away from the reference on both responses", _dpo_case(16, spread=10.0),
         hint="Each response's log-ratio is log π_θ(y|x) − log π_ref(y|x); the margin is the "
              "chosen one's minus the rejected one's."),
]


def _dpo_variant(*, reference=True, sign=1.0, beta_inside=True, reduction="mean", naive=False):
    """A wrong ``dpo_loss``, one bug switched on by the arguments."""

    def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1):
        if reference:
            m = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
        else:
            m = policy_chosen - policy_rejected
        x = sign * (beta * m if beta_inside else m)
        per_pair = -torch.log(torch.sigmoid(x)) if naive else -F.logsigmoid(x)
        if not beta_inside:
            per_pair = beta * per_pair
        return per_pair.sum() if reduction == "sum" else per_pair.mean()

    return dpo_loss


SUITES = [
    Suite(
        exercise="07.4",
        name="dpo_loss",
        points=2,
        reference=paper_dpo_loss,
        solution=preference.dpo_loss,
        arg_names=("policy_chosen", "policy_rejected", "reference_chosen", "reference_rejected",
                   "beta"),
        grad=("policy_chosen", "policy_rejected"),
        cases=CASES,
        hint="Form each response's log-ratio to the reference, subtract the rejected one's from "
             "the chosen one's, multiply by beta, and return the mean of −F.logsigmoid of it.",
        mutants=[
            Mutant("no reference", _dpo_variant(reference=False),
                   "Your margin leaves out the reference: subtract log π_ref from each response's "
                   "log-probability before taking the difference (log-ratios, not log-probabilities)."),
            Mutant("chosen and rejected swapped", _dpo_variant(sign=-1.0),
                   "Your margin has the wrong sign: it is the chosen response's log-ratio minus the "
                   "rejected one's, so that lowering the loss raises y_w against y_l."),
            Mutant("β outside the sigmoid", _dpo_variant(beta_inside=False),
                   "β multiplies the margin inside the sigmoid, −log σ(β·m), not the loss."),
            Mutant("sum over the pairs", _dpo_variant(reduction="sum"),
                   "Return the mean over the pairs of the batch, not their sum."),
            Mutant("log of the sigmoid", _dpo_variant(naive=True),
                   "−torch.log(torch.sigmoid(x)) overflows to infinity when σ(x) underflows to 0 "
                   "(x below about −104 in float32): use −F.logsigmoid(x)."),
        ],
    ),
]
