"""The end of a residual branch, ``x + dropout(linear(y))``, as one autograd function.

Autograd runs it as a Linear, a dropout (a scaling and a masking pass) and an add, and in backward masks
the gradient, multiplies through the Linear and passes the add's gradient on. Here forward is the Linear and
one ``addcmul`` (:func:`lra.dropout.add_masked`), backward one masking pass before the Linear's two products;
``y``, the weight and the bool mask are kept, as autograd keeps them. The output has the modules' roundings;
the gradients theirs up to the matrix products' summation order (tests compare both with the plain composition
within its rounding bound). The attention block's output projection runs through it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_zoo.first_order import first_order_only

from .dropout import Dropout, add_masked, apply_mask, keep_mask, keep_scale, uses_cheap_masks


class _LinearDropoutAdd(torch.autograd.Function):
    """``x + dropout(linear(y, w, b), p)``; ``p = 0`` draws no mask."""

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, w: Tensor, b: Tensor | None, p: float) -> Tensor:
        z = F.linear(y, w, b)  # (..., out)
        kept = keep_mask(z.shape, p, z.device) if p > 0 else None
        ctx.scale = keep_scale(p) if p > 0 else 1.0
        ctx.has_bias = b is not None
        ctx.save_for_backward(y, w, kept)
        return x + z if kept is None else add_masked(x, z, kept, ctx.scale)

    @staticmethod
    @first_order_only
    def backward(ctx, grad: Tensor):
        y, w, kept = ctx.saved_tensors
        grad_z = grad if kept is None else apply_mask(grad, kept, ctx.scale)
        flat = grad_z.reshape(-1, w.shape[0])  # (T, out)
        grad_y = (flat @ w).view(y.shape)
        grad_w = flat.t() @ y.reshape(-1, w.shape[1])
        grad_b = flat.sum(0) if ctx.has_bias else None
        return grad, grad_y, grad_w, grad_b, None


def linear_dropout_add(x: Tensor, y: Tensor, linear: nn.Linear, dropout: Dropout) -> Tensor:
    """``x + dropout(linear(y))``: the fused function when training on the CPU with gradients, else the modules
    (evaluation, other devices' fused dropout, autocast's casts)."""
    p = dropout.p if dropout.training else 0.0
    fused = torch.is_grad_enabled() and not torch.is_autocast_enabled(x.device.type)
    if fused and (p == 0.0 or uses_cheap_masks(x, p)):
        return _LinearDropoutAdd.apply(x, y, linear.weight, linear.bias, p)
    return x + dropout(linear(y))
