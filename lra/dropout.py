"""Inverted dropout whose CPU masks cost a quarter of a random draw per element.

``torch.nn.Dropout`` on the CPU fills a float mask with ``bernoulli_`` (one Mersenne-Twister draw and a
float compare per element, ~10 ns): at the LRA width it was ~40% of everything outside attention. Here
each 64-bit draw (``random_`` over the full int64 range) is cut into four 16-bit words and an element is
dropped when its word falls below ``round(p * 2**16)``; the scaled float mask is saved for
backward, as ``nn.Dropout`` does.

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


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """Bool mask of ``shape``: False with probability ``effective_p(p)``, four elements per 64-bit draw."""
    numel = shape.numel()
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device).random_(_INT64_MIN, None)
    return words.view(torch.int16)[:numel].view(shape) >= drop_threshold(p) - _WORDS // 2


class _ScaledMask(torch.autograd.Function):
    """``x * m`` for a fixed mask ``m``; backward multiplies by ``m`` again (nothing else is saved)."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor) -> Tensor:
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout of ``x``; see the module docstring for the CPU masks."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training=True)
    scale = 1.0 / (1.0 - effective_p(p))
    mask = torch.where(keep_mask(x.shape, p, x.device), scale, 0.0).to(x.dtype)  # kept: 1 / (1 - p)
    return _ScaledMask.apply(x, mask)


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
