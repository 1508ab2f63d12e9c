"""Inverted dropout with 16-bit CPU masks, applied by multiplication.

``torch.nn.Dropout`` on the CPU fills a float mask with ``bernoulli_`` (one Mersenne-Twister draw and a float
compare per element, ~8.5 ns) and was ~40% of everything outside attention. Here the masks are
``attention_zoo.dropout_masks``' (16-bit SFC64 words, seeded by one draw from torch's default generator, so
``seed_everything`` and the RNG state saved in checkpoints make every mask reproducible and resumable, and a
recomputed block (``torch.utils.checkpoint``) draws the same masks again; the drop rate is within ``2**-17`` of
``p``). A mask is applied by multiplying with a float copy holding 0 or ``1 / (1 - p)`` (:func:`keep_factor`;
``masked_fill_`` and ``where`` with a bool mask are 3-5x slower than a multiply), so a residual's dropout is one
``addcmul``. Backward needs only which elements were kept: a bool mask is saved (a byte an element; ``nn.Dropout``
keeps a float mask, four). Other devices (where dropout is a fused kernel already) use
``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attention_zoo.dropout_masks import (  # noqa: F401 (re-exported: the masks' public home for lra and its tests)
    apply_mask,
    drop_threshold,
    effective_p,
    keep_factor,
    keep_mask,
    keep_scale,
    kept_times,
    random_words,
)


def add_masked(x: Tensor, y: Tensor, kept: Tensor, scale: float) -> Tensor:
    """``x + apply_mask(y, kept, scale)`` in one pass over ``y``: ``addcmul`` rounds ``scale * y`` first, then
    multiplies by 0 or 1 (exact), so a fused multiply-add cannot round differently from the two steps."""
    return torch.addcmul(x, y, kept_times(kept, 1.0, y.dtype), value=scale)


class _Dropped(torch.autograd.Function):
    """``apply_mask(x, kept, scale)``; backward masks the gradient the same way (only the bool mask is saved)."""

    @staticmethod
    def forward(ctx, x: Tensor, kept: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(kept)
        ctx.scale = scale
        return apply_mask(x, kept, scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (kept,) = ctx.saved_tensors
        return apply_mask(grad, kept, ctx.scale), None, None


def uses_cheap_masks(x: Tensor, p: float) -> bool:
    """Whether :func:`dropout` draws its own masks for ``x`` (CPU, ``0 < p < 1``) rather than ``F.dropout``'s."""
    return x.device.type == "cpu" and 0.0 < p < 1.0


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout of ``x``; see the module docstring for the CPU masks."""
    if not training or p == 0.0:
        return x
    if not uses_cheap_masks(x, p):
        return F.dropout(x, p, training=True)
    return _Dropped.apply(x, keep_mask(x.shape, p, x.device), keep_scale(p))


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout(p)`` with the cheap CPU masks of :func:`dropout`."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
