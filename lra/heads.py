"""Moving between token rows and the attention's per-head layout, with cheap backwards.

``split_heads``: the input projection's output split into per-head q, k, v (and any extra inputs).

``parts.view(B, N, n, H, d).permute(2, 0, 3, 1, 4)`` unbound into ``n`` views is what autograd would run; its
backward stacks the ``n`` gradients into a new ``(n, B, H, N, d)`` tensor and then copies that into the
``(B, N, n, H, d)`` layout of ``parts``: two full passes. Here backward writes each gradient straight into its
slot of ``parts``' layout: one pass. Forward is the same views, so the numbers are the same.

``pack_heads``: the attention's output ``(B, H, N, d)`` back to the real tokens' rows ``(T, H d)`` of a padded
batch in one gather (autograd: a transposed copy, then a gather), and backward one scatter into zeros
(autograd: an ``index_add`` then a transposed view). The same values both ways.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attention_zoo.first_order import first_order_only

from .packing import Packing


class _SplitHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, parts: Tensor, num_inputs: int, num_heads: int) -> tuple[Tensor, ...]:
        b, n, width = parts.shape
        ctx.shape = (b, n, num_inputs, num_heads, width // (num_inputs * num_heads))
        ctx.set_materialize_grads(False)  # an unused input's gradient stays None: its slot is zeroed, no tensor made
        return parts.view(ctx.shape).permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, d)

    @staticmethod
    @first_order_only
    def backward(ctx, *grads: Tensor | None):
        given = [g for g in grads if g is not None]
        if not given:
            return None, None, None
        grad = given[0].new_empty(ctx.shape)  # (B, N, n, H, d): parts' layout
        for i, g in enumerate(grads):
            for h in range(ctx.shape[3]):  # per head: a contiguous (B, N, d) source copies ~2x faster
                slot = grad[:, :, i, h]  # (B, N, d)
                slot.zero_() if g is None else slot.copy_(g[:, h])
        return grad.view(*ctx.shape[:2], -1), None, None


def split_heads(parts: Tensor, num_inputs: int, num_heads: int) -> tuple[Tensor, ...]:
    """``parts`` ``(B, N, num_inputs * width)`` -> ``num_inputs`` views ``(B, H, N, width / H)``."""
    return _SplitHeads.apply(parts, num_inputs, num_heads)


class _PackHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: Tensor, rows: Tensor) -> Tensor:
        ctx.save_for_backward(rows)
        ctx.shape = y.shape
        d = y.shape[-1]
        return y.reshape(-1, d).index_select(0, rows.view(-1)).view(rows.shape[0], -1)  # (T, H d)

    @staticmethod
    @first_order_only
    def backward(ctx, grad: Tensor):
        (rows,) = ctx.saved_tensors
        d = ctx.shape[-1]
        grad_y = grad.new_zeros(ctx.shape)  # (B, H, N, d): pads get 0
        grad_y.view(-1, d).index_copy_(0, rows.view(-1), grad.reshape(-1, d))
        return grad_y, None


def pack_heads(y: Tensor, packing: Packing | None) -> Tensor:
    """``y`` ``(B, H, N, d)`` -> ``(B, N, H d)``, or with ``packing`` the real tokens' rows ``(T, H d)``."""
    b, h, n, d = y.shape
    if packing is None or packing.index is None:
        merged = y.transpose(1, 2).reshape(b, n, h * d)
        return merged if packing is None else merged.reshape(b * n, h * d)  # a view of y when H = 1
    return _PackHeads.apply(y, packing.head_rows(h))
