'''Corpus of plausible student code for DPO's loss, exercise 07.4 ``dpo_loss`` of 07c_assistant
(see grading_corpus.py). Written from the exercise text before the suite's mutants were read:
one bug per way a reader of Eq. 7 can go wrong, bugs the mutants did not foresee, and correct
alternatives. Each bug's ``expect`` holds the words a hint must use to name it.
'''

from __future__ import annotations

from grading_corpus import INPLACE, alt, bug

D = "def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta=0.1):\n"
BRACKET = "    m = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)\n"

DPO = [
    bug("dpo_loss", "no reference", D +
        "    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()\n",
        mutant="no reference"),
    bug("dpo_loss", "chosen and rejected swapped", D +
        "    m = (policy_rejected - reference_rejected) - (policy_chosen - reference_chosen)\n"
        "    return -F.logsigmoid(beta * m).mean()\n", mutant="chosen and rejected swapped"),
    bug("dpo_loss", "beta multiplies the loss", D + BRACKET +
        "    return (beta * -F.logsigmoid(m)).mean()\n", mutant="β outside the sigmoid"),
    bug("dpo_loss", "sum over the batch", D + BRACKET +
        "    return -F.logsigmoid(beta * m).sum()\n", mutant="sum over the pairs"),
    bug("dpo_loss", "log of the sigmoid", D + BRACKET +
        "    return -torch.log(torch.sigmoid(beta * m)).mean()\n", mutant="log of the sigmoid"),
    # unforeseen
    bug("dpo_loss", "beta forgotten", D + BRACKET +
        "    return -F.logsigmoid(m).mean()\n", expect=("β", "beta")),
    bug("dpo_loss", "beta hard-coded to 0.1", D + BRACKET +
        "    return -F.logsigmoid(0.1 * m).mean()\n", expect=("β", "beta")),
    bug("dpo_loss", "the mean of the brackets inside the sigmoid", D + BRACKET +
        "    return -F.logsigmoid(beta * m.mean())\n", expect=("mean",)),
    bug("dpo_loss", "sigmoid without the log", D + BRACKET +
        "    return (1 - torch.sigmoid(beta * m)).mean()\n", expect=("log",)),
    bug("dpo_loss", "reference ratios added, not subtracted", D +
        "    m = (policy_chosen + reference_chosen) - (policy_rejected + reference_rejected)\n"
        "    return -F.logsigmoid(beta * m).mean()\n", expect=("reference", "log-ratio")),
    bug("dpo_loss", "the loss detached with .item()", D + BRACKET +
        "    return torch.tensor(-F.logsigmoid(beta * m).mean().item())\n",
        expect=("gradient",), kind="gradient"),
    bug("dpo_loss", "softplus of the bracket with the wrong sign", D + BRACKET +
        "    return F.softplus(beta * m).mean()\n", expect=("sign",)),
    bug("dpo_loss", "subtracts the reference in place", D +
        "    policy_chosen -= reference_chosen\n"
        "    policy_rejected -= reference_rejected\n"
        "    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()\n",
        expect=INPLACE, kind="in-place"),
    alt("dpo_loss", "softplus of minus the bracket", D + BRACKET +
        "    return F.softplus(-beta * m).mean()\n"),
    alt("dpo_loss", "log-ratios first, then the difference", D +
        "    chosen = policy_chosen - reference_chosen\n"
        "    rejected = policy_rejected - reference_rejected\n"
        "    return torch.mean(-F.logsigmoid(beta * (chosen - rejected)))\n"),
    alt("dpo_loss", "the policy's difference minus the reference's", D +
        "    pi = policy_chosen - policy_rejected\n"
        "    ref = reference_chosen - reference_rejected\n"
        "    return -F.logsigmoid(beta * (pi - ref)).mean()\n"),
]

VARIANTS = [*DPO]
