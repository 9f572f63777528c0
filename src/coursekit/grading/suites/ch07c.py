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
from coursekit.grading.suite import Case, Mutant, Suite, in_dtype
from coursekit.grading.suites.ch07_readings import DTYPE_READING, capitalised, dtype_observation


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
# log-probabilities come in the model's dtype: the loss is returned in it
CASES.append(in_dtype(CASES[1], torch.float64))

READINGS = (
    DTYPE_READING,
    # right where the margin is 0, with the rejected response's gradient negated: the rejected
    # log-ratio enters the margin with a + (the chosen one's gradient is right)
    (r"gradient with respect to `policy_rejected` is not \(it is the expected one negated\)",
     "The rejected response's log-ratio enters your margin with the wrong sign: the margin is "
     "the chosen response's log-ratio minus the rejected one's, (π_w − ref_w) − (π_l − ref_l)."),
    # right where the margin is 0 (the loss is log 2 whatever multiplies the margin), with a
    # gradient a constant times the expected one: −β/2 per pair there, so the margin is not
    # multiplied by β (the mutants catch a sum over the pairs and β outside the sigmoid)
    (r"gradient with respect to `policy_chosen` is not \(it is the expected one times",
     "Your loss is right where the margin is 0, but not its slope there: the gradient of "
     "−log σ(β·m) at m = 0 is −β/2 per pair, so your margin is multiplied by something other "
     "than β. Multiply the margin by the `beta` argument, once, inside the sigmoid (not by 1, "
     "not divided by β)."),
    (r"gradient with respect to `policy_chosen` is not \(it is the expected one negated\)",
     "The chosen response's log-ratio enters your margin with the wrong sign: the margin is "
     "the chosen response's log-ratio minus the rejected one's, (π_w − ref_w) − (π_l − ref_l)."),
)


def _dpo_variant(*, reference=True, sign=1.0, beta_inside=True, reduction="mean", naive=False,
                 fixed_beta=None, added=False, margin_mean=False, no_log=False):
    """A wrong ``dpo_loss``, one bug switched on by the arguments."""

    def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1):
        beta = beta if fixed_beta is None else fixed_beta
        if added:
            m = (policy_chosen + reference_chosen) - (policy_rejected + reference_rejected)
        elif reference:
            m = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
        else:
            m = policy_chosen - policy_rejected
        if margin_mean:
            m = m.mean()
        x = sign * (beta * m if beta_inside else m)
        if no_log:
            return (1 - torch.sigmoid(x)).mean()
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
            Mutant("β fixed at 0.1", _dpo_variant(fixed_beta=0.1),
                   "Your loss passes exactly the cases where β is 0.1: use the `beta` argument, "
                   "not a fixed 0.1 (β is what the caller tunes)."),
            Mutant("the reference added", _dpo_variant(added=True),
                   "You add the reference's log-probabilities: a log-ratio is "
                   "log π_θ(y|x) − log π_ref(y|x), the policy's minus the reference's."),
            Mutant("margins averaged before the sigmoid", _dpo_variant(margin_mean=True),
                   "You average the margins first and take −log σ of the average: the loss is "
                   "the mean over the pairs of −log σ(β·m), each pair's own margin inside its "
                   "own sigmoid."),
            Mutant("1 − σ instead of −log σ", _dpo_variant(no_log=True),
                   "Your loss is 1 − σ(β·m), the probability of the wrong preference; DPO's is "
                   "its negative log-likelihood, −log σ(β·m) = −F.logsigmoid(β·m)."),
        ],
        observe=capitalised(dtype_observation),
        readings=READINGS,
    ),
]
