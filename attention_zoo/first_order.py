"""Hand-written backward passes are first order, and refuse a second derivative by name.

``torch.autograd.function.once_differentiable`` guards only the case where the incoming gradient itself requires
grad; for ``torch.autograd.grad(loss, q, create_graph=True)`` followed by a derivative of that gradient (gradient
penalties, Hessian-vector products) the backward's dependence on its saved inputs is silently dropped, and the second
derivative is wrong. The autograd engine runs a backward in grad mode exactly when ``create_graph=True``, so
:func:`first_order_only` refuses there and otherwise runs the backward as ``once_differentiable`` does (no graph).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


def first_order_only(backward: Callable) -> Callable:
    """Decorate a ``torch.autograd.Function.backward`` (below ``@staticmethod``)."""

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                f"{backward.__qualname__} is a hand-written first-order backward: create_graph=True would make its "
                "second derivative silently wrong, so it is refused. For higher-order gradients use the mechanism's "
                "quadratic oracle (attn.naive, naive_*), which is plain autograd.")
        return backward(ctx, *grads)

    return wrapper
