"""DPO's loss and the response log-probability it reads (coursekit.preference, Chapter 7a)."""

import math

import pytest
import torch

from coursekit.decoding import sequence_log_prob
from coursekit.models.gpt import GPT, gpt_to_hf
from coursekit.preference import dpo_loss, response_log_prob


def by_hand(pc, pr, rc, rr, beta):
    # Rafailov et al. (2023), Eq. 7, one pair at a time in plain floats
    terms = []
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist(), strict=True):
        z = beta * ((a - c) - (b - d))
        terms.append(-math.log(1.0 / (1.0 + math.exp(-z))))
    return sum(terms) / len(terms)


def test_dpo_loss_is_eq_7_computed_by_hand():
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-20 * torch.rand(6, generator=g, dtype=torch.float64) for _ in range(4))
    for beta in (0.1, 0.5, 2.0):
        assert dpo_loss(pc, pr, rc, rr, beta).item() == pytest.approx(by_hand(pc, pr, rc, rr, beta),
                                                                      rel=1e-12)
    # the policy equal to the reference: every margin is 0 and the loss is log 2
    assert dpo_loss(pc, pr, pc, pr).item() == pytest.approx(math.log(2), rel=1e-12)
    # only the differences to the reference count: shifting a response's two log-probs together
    assert dpo_loss(pc + 3, pr, rc + 3, rr).item() == pytest.approx(dpo_loss(pc, pr, rc, rr).item())


def test_dpo_gradient_is_the_papers():
    # Rafailov et al., section 4: the gradient of L_DPO w.r.t. log π_θ(y_w|x) is
    # -β σ(r̂_l - r̂_w) per pair (and the opposite for y_l), r̂ = β log π_θ / π_ref; mean over B
    g = torch.Generator().manual_seed(1)
    pc, pr = (-10 * torch.rand(5, generator=g, dtype=torch.float64)).requires_grad_(), \
        (-10 * torch.rand(5, generator=g, dtype=torch.float64)).requires_grad_()
    rc, rr = (-10 * torch.rand(5, generator=g, dtype=torch.float64) for _ in range(2))
    beta = 0.3
    dpo_loss(pc, pr, rc, rr, beta).backward()
    r_w, r_l = beta * (pc.detach() - rc), beta * (pr.detach() - rr)
    weight = torch.sigmoid(r_l - r_w)
    torch.testing.assert_close(pc.grad, -beta * weight / 5)
    torch.testing.assert_close(pr.grad, beta * weight / 5)


def test_dpo_loss_is_finite_for_large_margins():
    big = torch.tensor([1e4, -1e4])
    zero = torch.zeros(2)
    loss = dpo_loss(big, zero, zero, zero, beta=1.0)
    assert torch.isfinite(loss) and loss.item() == pytest.approx(1e4 / 2)


def test_response_log_prob_matches_hugging_face_and_sequence_log_prob():
    torch.manual_seed(0)
    model = GPT(vocab_size=13, d_model=16, n_heads=2, n_layers=2, max_len=16).eval()
    for p in model.parameters():                      # a large spread: nothing can hide
        torch.nn.init.normal_(p, std=0.5)
    hf = gpt_to_hf(model)
    ids = torch.randint(1, 13, (3, 9))
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[0, 3:], mask[1, 5:8], mask[2, 1:] = True, True, True   # prompts of 3, 5, 1 ids; row 1 padded
    with torch.no_grad():
        ours = response_log_prob(model(ids)[0], ids, mask)
        for b in range(3):                            # HF's loss: the mean over labels != -100
            labels = ids[b:b + 1].masked_fill(~mask[b:b + 1], -100)
            theirs = -hf(ids[b:b + 1], labels=labels).loss * mask[b].sum()
            torch.testing.assert_close(ours[b], theirs, rtol=1e-4, atol=1e-4)
    # the no-grad log-probability of decoding, for a common prompt length and no padding
    common = torch.zeros(3, 9, dtype=torch.bool)
    common[:, 4:] = True
    with torch.no_grad():
        torch.testing.assert_close(response_log_prob(model(ids)[0], ids, common),
                                   sequence_log_prob(model, ids, 4))


def test_response_log_prob_is_differentiable_and_refuses_position_0():
    logits = torch.randn(2, 5, 7, requires_grad=True)
    ids = torch.randint(7, (2, 5))
    mask = torch.tensor([[False, False, True, True, False]] * 2)
    response_log_prob(logits, ids, mask).sum().backward()
    assert logits.grad[:, [0, 3, 4]].abs().sum() == 0 and logits.grad[:, [1, 2]].abs().sum() > 0
    with pytest.raises(ValueError, match="position 0"):
        response_log_prob(logits, ids, torch.ones(2, 5, dtype=torch.bool))
