"""``Linear(LayerNorm(x))`` that keeps only ``x`` (and two statistics per row) for backward.

Autograd keeps both the LayerNorm's input and its output (the Linear's input): two activations of width
``d`` per token. Here the output is recomputed in backward (one LayerNorm pass), the same ops as the
forward, so the numbers are those of ``linear(norm(x))`` (tests compare outputs and gradients).
The pre-norm blocks' first projections (attention's q/k/v, the MLP's first layer) run through it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_zoo.first_order import first_order_only


def forward(x: Tensor, ln_w: Tensor, ln_b: Tensor, w: Tensor, b: Tensor, eps: float):
    """``(linear(layer_norm(x)), mean, rstd)``: the statistics are what :func:`backward` needs with ``x``."""
    normed, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], ln_w, ln_b, eps)
    return F.linear(normed, w, b), mean, rstd


def backward(grad: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, ln_w: Tensor, ln_b: Tensor, w: Tensor,
             eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients for ``x``, the LayerNorm's weight and bias, the Linear's weight and bias, from ``grad`` of the
    output; the LayerNorm output is recomputed."""
    normed = torch.native_layer_norm(x, x.shape[-1:], ln_w, ln_b, eps)[0]  # the forward's, bit for bit
    flat = grad.reshape(-1, grad.shape[-1])  # (T, out)
    grad_w, grad_b = flat.t() @ normed.reshape(-1, x.shape[-1]), flat.sum(0)
    grad_normed = (flat @ w).view(x.shape)
    grad_x, grad_ln_w, grad_ln_b = torch.ops.aten.native_layer_norm_backward(
        grad_normed, x, x.shape[-1:], mean, rstd, ln_w, ln_b, [True, True, True])
    return grad_x, grad_ln_w, grad_ln_b, grad_w, grad_b


class _NormLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, ln_w: Tensor, ln_b: Tensor, w: Tensor, b: Tensor, eps: float) -> Tensor:
        out, mean, rstd = forward(x, ln_w, ln_b, w, b, eps)
        ctx.save_for_backward(x, mean, rstd, ln_w, ln_b, w)
        ctx.eps = eps
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad: Tensor):
        x, mean, rstd, ln_w, ln_b, w = ctx.saved_tensors
        return (*backward(grad, x, mean, rstd, ln_w, ln_b, w, ctx.eps), None)


def norm_linear(x: Tensor, norm: nn.LayerNorm, linear: nn.Linear) -> Tensor:
    """``linear(norm(x))``, keeping only ``x`` for backward (the modules' own path under autocast, whose
    casts a hand-written backward would have to repeat)."""
    if torch.is_autocast_enabled(x.device.type) or not torch.is_grad_enabled():
        return linear(norm(x))
    return _NormLinear.apply(x, norm.weight, norm.bias, linear.weight, linear.bias, norm.eps)
