"""Preference tuning of a language model: Direct Preference Optimization (Chapter 7a).

DPO (Rafailov et al., 2023) tunes a policy π_θ on preference triples (x, y_w, y_l), a prompt, a
preferred (chosen) and a dispreferred (rejected) response, against a frozen reference π_ref
(usually the model after supervised fine-tuning), with their Eq. 7::

    L_DPO = -E[ log σ( β [ (log π_θ(y_w|x) - log π_ref(y_w|x)) - (log π_θ(y_l|x) - log π_ref(y_l|x)) ] ) ]

No reward model is trained and nothing is sampled during training: the loss needs only the four
log-probabilities of each pair's responses, computed by :func:`response_log_prob`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def response_log_prob(logits: Tensor, ids: Tensor, response_mask: Tensor) -> Tensor:
    """log π(y | x) of each row: the summed log-probabilities of the ids where ``response_mask``
    is True, each given the ids before it.

    logits: (B, N, |V|), the model's output on ids (B, N); response_mask: (B, N) bool, True at
    the response's ids (never at position 0, which no logits predict; padding and the prompt
    False) -> (B,). Differentiable, unlike :func:`coursekit.decoding.sequence_log_prob`.
    """
    if response_mask[:, 0].any():
        raise ValueError("response_mask is True at position 0: the first id is never predicted")
    token = logits[:, :-1].float().log_softmax(dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.where(response_mask[:, 1:], token, torch.zeros_like(token)).sum(dim=-1)


def dpo_loss(policy_chosen: Tensor, policy_rejected: Tensor, reference_chosen: Tensor,
             reference_rejected: Tensor, beta: float = 0.1) -> Tensor:
    """DPO's loss (Rafailov et al. 2023, Eq. 7), the mean over a batch of preference pairs.

    Each argument is (B,): log π_θ(y_w|x), log π_θ(y_l|x), log π_ref(y_w|x), log π_ref(y_l|x).
    With the margin m = (log π_θ(y_w|x) - log π_ref(y_w|x)) - (log π_θ(y_l|x) - log π_ref(y_l|x)),
    the loss is mean(-log σ(β m)) (computed as ``-F.logsigmoid``, finite for any m); β sets how
    far the policy may move from the reference. With π_θ = π_ref, m = 0 and the loss is log 2.
    """
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -F.logsigmoid(beta * margin).mean()
