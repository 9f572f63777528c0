"""Linear probes: how much of a label a frozen network's vectors offer a linear readout.

A probe (Alain & Bengio, 2016) is a linear classifier trained on vectors that stay fixed: the
network under study is never updated, so the probe measures what its representation already
holds in linearly readable form. Here it is a multinomial logistic regression with a small L2
penalty on the weights, a convex problem, fitted from zero with L-BFGS: the result depends on
the vectors alone, not on a seed or a learning rate. It is the problem
``sklearn.linear_model.LogisticRegression`` solves (``tests/test_probes.py`` holds it to it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def fit_linear_probe(x: Tensor, y: Tensor, n_classes: int | None = None, l2: float = 1e-3,
                     max_iter: int = 100) -> nn.Linear:
    """The linear probe of labels ``y`` on vectors ``x``.

    x: (n, d) float; y: (n,) long in [0, n_classes) (None: ``y.max() + 1``) -> an
    ``nn.Linear(d, n_classes)`` that minimises the mean cross-entropy plus (l2 / 2)·‖W‖² (the
    bias is not penalised), the objective of ``LogisticRegression(C=1 / (l2·n))`` with three
    classes or more, run for at most ``max_iter`` L-BFGS iterations (raise it to reach the optimum
    to more digits). ``x`` and ``y`` are not modified; the probe starts from zero weights.
    """
    x = x.detach().float()
    n_classes = int(y.max()) + 1 if n_classes is None else n_classes
    probe = nn.Linear(x.shape[1], n_classes).to(x.device)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
    optimizer = torch.optim.LBFGS(probe.parameters(), max_iter=max_iter, history_size=20,
                                  tolerance_grad=1e-9, tolerance_change=1e-12,
                                  line_search_fn="strong_wolfe")

    def objective() -> Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(probe(x), y) + 0.5 * l2 * probe.weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(objective)
    probe.requires_grad_(False)
    return probe.eval()
