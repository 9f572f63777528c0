"""coursekit.probes: the linear probe is scikit-learn's logistic regression, solved to its optimum."""

from __future__ import annotations

import pytest
import torch
from sklearn.linear_model import LogisticRegression

from coursekit.probes import fit_linear_probe


def data(n_classes: int, n: int = 300, d: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centres = 1.5 * torch.randn(n_classes, d, generator=g)
    y = torch.randint(n_classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, d, generator=g)  # overlapping classes: a finite optimum
    return x, y


@pytest.mark.parametrize("l2", [1e-3, 1e-1])
def test_multinomial_probe_is_sklearns_logistic_regression(l2):
    x, y = data(3)
    probe = fit_linear_probe(x, y, l2=l2, max_iter=1000)
    theirs = LogisticRegression(C=1 / (l2 * len(y)), tol=1e-10, max_iter=10_000)
    theirs.fit(x.double().numpy(), y.numpy())
    with torch.no_grad():
        ours = probe(x).softmax(-1)
    expected = torch.from_numpy(theirs.predict_proba(x.double().numpy())).float()
    torch.testing.assert_close(ours, expected, atol=5e-4, rtol=0)  # half the penalty: 0.1 off
    torch.testing.assert_close(probe.weight, torch.from_numpy(theirs.coef_).float(), atol=5e-3, rtol=0)


def test_binary_probe_matches_sklearns_binary_logistic_regression():
    # two softmax rows w₀ = -w₁ = -v/2 make the penalty (l2/4)·‖v‖²: scikit-learn's C = 2 / (l2·n)
    x, y = data(2)
    l2 = 1e-2
    probe = fit_linear_probe(x, y, l2=l2, max_iter=1000)
    theirs = LogisticRegression(C=2 / (l2 * len(y)), tol=1e-10, max_iter=10_000)
    theirs.fit(x.double().numpy(), y.numpy())
    with torch.no_grad():
        ours = probe(x).softmax(-1)[:, 1]
    expected = torch.from_numpy(theirs.predict_proba(x.double().numpy())[:, 1]).float()
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=0)  # C = 1 / (l2·n): 0.05 off


def test_probe_leaves_inputs_alone_and_is_frozen():
    x, y = data(2, n=50)
    x0, y0 = x.clone(), y.clone()
    probe = fit_linear_probe(x, y, n_classes=4)
    assert torch.equal(x, x0) and torch.equal(y, y0)
    assert probe.out_features == 4 and not any(p.requires_grad for p in probe.parameters())
