"""The blocks' pre-norm GELU MLP, with a training path that keeps about half of autograd's activations.

``x + dropout(W2 dropout(gelu(W1 LayerNorm(x) + b1)) + b2)``. Autograd keeps, per token, the LayerNorm
input and output, the GELU input and its output after dropout, and the two dropout masks: ``2 d + 2 h``
floats and ``d + h`` mask bytes for width ``d`` and hidden ``h`` (``nn.Dropout``'s float masks would add
``3 (d + h)`` bytes more). The training path below keeps the block input, the GELU input and the masks
(``d + h`` floats and ``d + h`` bytes: 0.56 of it at h = 2d) and recomputes the LayerNorm output
(:mod:`lra.norm_linear`) and ``dropout(gelu(.))`` in backward, two elementwise passes; the output dropout
and the residual add are one ``addcmul`` (:func:`lra.dropout.add_masked`). It computes the same numbers as
the module path (the same roundings; tests compare outputs and gradients).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_zoo.first_order import first_order_only

from . import norm_linear
from .dropout import Dropout, add_masked, apply_mask, keep_factor, keep_mask, keep_scale, uses_cheap_masks


def _factor(kept: Tensor | None, scale: float, dtype: torch.dtype) -> Tensor | None:
    """0 or ``scale`` where ``kept`` (None: no dropout)."""
    return None if kept is None else keep_factor(kept, scale, dtype)


def _times_(x: Tensor, factor: Tensor | None) -> Tensor:
    """``x`` (a tensor of this function's own) multiplied in place by the dropout ``factor``."""
    return x if factor is None else x.mul_(factor)


class _FeedForward(torch.autograd.Function):
    """The MLP with its residual for one dropout rate ``p``; saves ``x``, the LayerNorm statistics, the GELU
    input and the bool masks."""

    @staticmethod
    def forward(ctx, x: Tensor, ln_w: Tensor, ln_b: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor,
                p: float, eps: float) -> Tensor:
        pre, mean, rstd = norm_linear.forward(x, ln_w, ln_b, w1, b1, eps)  # (..., hidden)
        keep_hidden = keep_mask(pre.shape, p, x.device) if p > 0 else None
        scale = keep_scale(p) if p > 0 else 1.0
        hidden = _times_(F.gelu(pre), _factor(keep_hidden, scale, pre.dtype))
        out = F.linear(hidden, w2, b2)  # (..., dim)
        keep_out = keep_mask(out.shape, p, x.device) if p > 0 else None
        ctx.save_for_backward(x, mean, rstd, pre, keep_hidden, keep_out, ln_w, ln_b, w1, w2)
        ctx.scale, ctx.eps = scale, eps
        return x + out if keep_out is None else add_masked(x, out, keep_out, scale)

    @staticmethod
    @first_order_only
    def backward(ctx, grad: Tensor):
        x, mean, rstd, pre, keep_hidden, keep_out, ln_w, ln_b, w1, w2 = ctx.saved_tensors
        factor = _factor(keep_hidden, ctx.scale, pre.dtype)
        hidden = _times_(F.gelu(pre), factor).reshape(-1, pre.shape[-1])  # (T, hidden)
        grad_out = (grad if keep_out is None else apply_mask(grad, keep_out, ctx.scale)).reshape(-1, x.shape[-1])
        grad_w2, grad_b2 = grad_out.t() @ hidden, grad_out.sum(0)  # grad_out: (T, dim)
        grad_hidden = _times_((grad_out @ w2).view(pre.shape), factor)
        grad_pre = torch.ops.aten.gelu_backward(grad_hidden, pre)
        grad_x, grad_ln_w, grad_ln_b, grad_w1, grad_b1 = norm_linear.backward(grad_pre, x, mean, rstd, ln_w, ln_b,
                                                                              w1, ctx.eps)
        return grad_x.add_(grad), grad_ln_w, grad_ln_b, grad_w1, grad_b1, grad_w2, grad_b2, None, None


class FeedForward(nn.Module):
    """Pre-norm GELU MLP with a residual connection.

    Training on the CPU (where :mod:`lra.dropout` draws the masks) with gradients takes the memory-lean path
    above; everything else runs the modules of ``net`` (the same parameters, the same state-dict keys).
    """

    def __init__(self, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), Dropout(dropout),
            nn.Linear(hidden, dim), Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        norm, inner, _, drop, outer, _ = self.net
        p = drop.p if self.training else 0.0
        lean = torch.is_grad_enabled() and not torch.is_autocast_enabled(x.device.type)
        if lean and (p == 0.0 or uses_cheap_masks(x, p)):
            return _FeedForward.apply(x, norm.weight, norm.bias, inner.weight, inner.bias, outer.weight, outer.bias,
                                      p, norm.eps)
        return x + self.net(x)
