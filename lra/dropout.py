"""Inverted dropout with 16-bit CPU masks, applied by multiplication.

``torch.nn.Dropout`` on the CPU fills a float mask with ``bernoulli_`` (one Mersenne-Twister draw and a float
compare per element, ~8.5 ns) and was ~40% of everything outside attention. Here a mask is cut from 16-bit words:
an element is kept when its word is at least ``round(p * 2**16)`` (:func:`keep_mask`); 16 random bits an element is
what a rate within ``2**-16`` of any ``p`` needs. The words come from numpy's SFC64 (a small chaotic generator that
passes BigCrush and PractRand; integer arithmetic only, so every CPU draws the same), about twice as fast on the
CPU as torch's Mersenne Twister, seeded for each mask by one draw from torch's default generator:
``seed_everything`` and the RNG state saved in checkpoints make every mask reproducible and resumable, and a
recomputed block (``torch.utils.checkpoint``) draws the same masks again. The comparison is a ``clamp`` to the two
words around the threshold (a vectorised integer op; torch's comparison into a bool tensor was ~3x slower). The
mask is applied by multiplying with a float copy holding 0 or ``1 / (1 - p)`` (:func:`keep_factor`;
``masked_fill_`` and ``where`` with a bool mask are 3-5x slower than a multiply), so a residual's dropout is one
``addcmul``. Backward needs only which elements were kept: a bool mask is saved (a byte an element; ``nn.Dropout``
keeps a float mask, four).

The drop rate is ``round(p * 2**16) / 2**16`` (0.100006 for p = 0.1: within ``2**-17`` of ``p``), exactly for
every element (the words are uniform), and the kept values are scaled by its complement, so the layer stays
unbiased. Other devices (where dropout is a fused kernel already) use ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

_WORDS = 1 << 16  # values of one 16-bit word
_SEEDS = 1 << 62  # a mask's generator is seeded with one of these, drawn from torch's default generator


def drop_threshold(p: float) -> int:
    """Number of the 2**16 words that drop an element."""
    return round(p * _WORDS)


def effective_p(p: float) -> float:
    """The drop rate the 16-bit masks realise for a nominal ``p``."""
    return drop_threshold(p) / _WORDS


def keep_scale(p: float) -> float:
    """``1 / (1 - p)`` for the realised drop rate: kept elements are scaled by it."""
    return 1.0 / (1.0 - effective_p(p))


def random_words(count: int) -> Tensor:
    """``count`` uniform int16 words (CPU): SFC64 seeded by one draw from torch's default generator."""
    seed = int(torch.randint(_SEEDS, (), dtype=torch.int64))
    draws = np.random.SFC64(seed).random_raw((count + 3) // 4)  # four words a 64-bit draw
    return torch.from_numpy(draws.view(np.int16)[:count])


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """Bool mask of ``shape``: True (kept) with probability ``1 - effective_p(p)``."""
    cut = drop_threshold(p) - _WORDS // 2  # int16 words at or above it keep their element
    if cut <= -_WORDS // 2 or cut >= _WORDS // 2:  # nothing dropped, or everything: no draw
        return torch.full(shape, cut < 0, dtype=torch.bool, device=device)
    kept = random_words(shape.numel()).clamp_(cut - 1, cut).sub_(cut - 1)  # 1 where kept, else 0
    return kept.to(device=device, dtype=torch.bool).view(shape)


def _kept_times(kept: Tensor, value: float, dtype: torch.dtype) -> Tensor:
    """``value`` where ``kept``, else 0, in ``dtype``: a bool tensor's bytes are 0/1 ``uint8``, converted and then
    scaled in place (vectorised; multiplying the bytes by a float tensor takes the slower mixed-type path)."""
    ones = kept.view(torch.uint8).to(dtype)
    return ones if value == 1.0 else ones.mul_(value)


def keep_factor(kept: Tensor, scale: float, dtype: torch.dtype) -> Tensor:
    """``scale`` where ``kept``, else 0, for tensors of ``dtype``: in ``dtype``, or float32 for a 16-bit float (whose
    rounding of ``scale``, bfloat16's 1.109 for 1 / 0.9, would bias the layer). Multiplying by it rounds as
    multiplying by ``scale`` does (in place, or cast back, for a 16-bit float)."""
    return _kept_times(kept, scale, dtype if torch.finfo(dtype).bits >= 32 else torch.float32)


def apply_mask(x: Tensor, kept: Tensor, scale: float) -> Tensor:
    """``x * scale`` with the elements not ``kept`` zeroed (a new tensor of ``x``'s dtype)."""
    return (x * keep_factor(kept, scale, x.dtype)).to(x.dtype)


def add_masked(x: Tensor, y: Tensor, kept: Tensor, scale: float) -> Tensor:
    """``x + apply_mask(y, kept, scale)`` in one pass over ``y``: ``addcmul`` rounds ``scale * y`` first, then
    multiplies by 0 or 1 (exact), so a fused multiply-add cannot round differently from the two steps."""
    return torch.addcmul(x, y, _kept_times(kept, 1.0, y.dtype), value=scale)


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
