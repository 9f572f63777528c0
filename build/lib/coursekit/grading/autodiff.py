"""One graded call with its backward pass: the gradients a chapter trains with, made comparable.

``backward_call`` calls ``target(*args, **kwargs)`` with the arguments named by ``wrt`` as fresh
leaves that require gradients, then back-propagates a fixed weighted sum of the floating-point
outputs, ``L = Σ_k Σ (w_k · out_k)`` with ``w_k`` drawn from a fixed seed for ``out_k``'s shape.
Any two implementations of the same differentiable function give the same gradients; one that
leaves the graph (``.item()``, ``math.exp`` on a tensor, ``.detach()``, ``torch.no_grad``)
gives zeros where the reference has a gradient.

The grader's process and the sandboxed worker run this same file: the worker loads it by path,
so it imports nothing from coursekit.
"""

from __future__ import annotations

from typing import Any

import torch


def loss_weights(shape: torch.Size, k: int) -> torch.Tensor:
    """The fixed weights of output ``k`` in the loss (float64, the same on every machine)."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(4099 + k),
                       dtype=torch.float64)


def backward_call(target: Any, args: tuple, kwargs: dict, wrt: list[int], params: bool,
                  first: int | None = None
                  ) -> tuple[Any, list[torch.Tensor], list[tuple[str, torch.Tensor]]]:
    """``(value, argument gradients, [(parameter name, gradient), ...])``.

    ``wrt`` are positions in ``args`` (each a floating-point tensor); with ``params`` the
    gradients of ``target``'s trainable parameters (those with ``requires_grad``) come back too,
    sorted by name. A gradient that does not reach an argument or a parameter is zeros. Only
    the ``first`` outputs enter the loss when it is given (a block's attention weights, returned
    for inspection, are not trained through).
    """
    given, args = args, list(args)
    leaves = [args[i].detach().clone().requires_grad_(True) for i in wrt]
    trainable = sorted((name, p) for name, p in target.named_parameters() if p.requires_grad) \
        if params and isinstance(target, torch.nn.Module) else []
    with torch.enable_grad():
        for i, leaf in zip(wrt, leaves, strict=True):
            args[i] = leaf.clone()  # not the leaf itself: in-place code runs as without grad
        value = target(*args, **kwargs)
        modified = False
        with torch.no_grad():  # what the call did in place shows on the caller's arguments
            for i in wrt:
                try:
                    if not torch.equal(args[i], given[i]):
                        modified = True
                        given[i].copy_(args[i])
                except RuntimeError:  # resized or retyped: the caller's tensor cannot take it
                    given[i].fill_(float("nan"))
        outputs = [value] if type(value) is torch.Tensor else (
            list(value) if isinstance(value, (tuple, list)) else [])
        loss = None
        for k, out in enumerate(outputs[:first]):
            if type(out) is torch.Tensor and out.is_floating_point() and out.requires_grad:
                term = (out.double() * loss_weights(out.shape, k)).sum()
                loss = term if loss is None else loss + term
        wanted = leaves + [p for _, p in trainable]
        try:
            grads = torch.autograd.grad(loss, wanted, allow_unused=True) \
                if loss is not None and wanted else [None] * len(wanted)
        except RuntimeError:
            if not modified:
                raise
            grads = [None] * len(wanted)  # the in-place change is the verdict, not the backward
    grads = [torch.zeros_like(w) if g is None else g.detach() for w, g in zip(wanted, grads, strict=True)]
    return value, grads[:len(leaves)], [(name, g) for (name, _), g in
                                         zip(trainable, grads[len(leaves):], strict=True)]
