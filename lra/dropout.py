"""Inverted dropout whose CPU masks cost a quarter of a random draw per element.

``torch.nn.Dropout`` on the CPU fills a float mask with ``bernoulli_`` (one Mersenne-Twister draw and a
float compare per element, ~10 ns): at the LRA width it was ~40% of everything outside attention. Here
each 64-bit draw (``random_`` over the full int64 range) is cut into four 16-bit words and an element is
dropped when its word falls below ``round(p * 2**16)``. Backward needs only which elements were dropped:
a bool mask is saved (a byte per element; ``nn.Dropout`` keeps a float mask, four).

The drop rate is ``round(p * 2**16) / 2**16`` (0.100006 for p = 0.1) and the kept values are scaled by its
complement, so the layer stays unbiased. Draws come from torch's default generator: ``seed_everything``
and the RNG state saved in checkpoints make them reproducible and resumable. Other devices (where
dropout is a fused kernel already) use ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_WORDS = 1 << 16  # values of one 16-bit word
_INT64_MIN = -(1 << 63)


def drop_threshold(p: float) -> int:
    """Number of the 2**16 words that drop an element."""
    return round(p * _WORDS)


def effective_p(p: float) -> float:
    """The drop rate the 16-bit masks realise for a nominal ``p``."""
    return drop_threshold(p) / _WORDS


def drop_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """Bool mask of ``shape``: True (dropped) with probability ``effective_p(p)``, four elements per 64-bit draw."""
    numel = shape.numel()
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device).random_(_INT64_MIN, None)
    return words.view(torch.int16)[:numel].view(shape) < drop_threshold(p) - _WORDS // 2


def apply_mask(x: Tensor, dropped: Tensor, scale: float) -> Tensor:
    """``x / (1 - p)`` with the ``dropped`` elements zeroed (a new tensor)."""
    return (x * scale).masked_fill_(dropped, 0.0)


class _Dropped(torch.autograd.Function):
    """``apply_mask(x, dropped, scale)``; backward masks the gradient the same way (only the bool mask is saved)."""

    @staticmethod
    def forward(ctx, x: Tensor, dropped: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(dropped)
        ctx.scale = scale
        return apply_mask(x, dropped, scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (dropped,) = ctx.saved_tensors
        return apply_mask(grad, dropped, ctx.scale), None, None


def keep_scale(p: float) -> float:
    """``1 / (1 - p)`` for the realised drop rate: kept elements are scaled by it."""
    return 1.0 / (1.0 - effective_p(p))


def uses_cheap_masks(x: Tensor, p: float) -> bool:
    """Whether :func:`dropout` draws its own masks for ``x`` (CPU, ``0 < p < 1``) rather than ``F.dropout``'s."""
    return x.device.type == "cpu" and 0.0 < p < 1.0


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout of ``x``; see the module docstring for the CPU masks."""
    if not training or p == 0.0:
        return x
    if not uses_cheap_masks(x, p):
        return F.dropout(x, p, training=True)
    return _Dropped.apply(x, drop_mask(x.shape, p, x.device), keep_scale(p))


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
