"""16-bit dropout masks for CPU tensors: which elements a dropout keeps, and the factor that applies it.

A mask is cut from 16-bit words: an element is kept when its word is at least ``round(p * 2**16)``
(:func:`keep_mask`); 16 random bits an element is what a rate within ``2**-16`` of any ``p`` needs. The words come
from numpy's SFC64 (a small chaotic generator that passes BigCrush and PractRand; integer arithmetic only, so every
CPU draws the same), about twice as fast on the CPU as torch's Mersenne Twister and ~8x faster than
``bernoulli_``, seeded for each mask by one draw from torch's default generator, so a checkpointed RNG state
resumes every mask and a recomputed block draws the same masks again. The comparison is a ``clamp`` to the two
words around the threshold (a vectorised integer op; torch's comparison into a bool tensor was ~3x slower). The
drop rate is ``round(p * 2**16) / 2**16`` (0.100006 for p = 0.1: within ``2**-17`` of ``p``), exactly for every
element, and kept values are scaled by its complement (:func:`keep_scale`), so dropout stays unbiased.

Used by the model's dropout layers (``lra.dropout``) and by softmax attention's dropout on its weights.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

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


def kept_times(kept: Tensor, value: float, dtype: torch.dtype) -> Tensor:
    """``value`` where ``kept``, else 0, in ``dtype``: a bool tensor's bytes are 0/1 ``uint8``, converted and then
    scaled in place (vectorised; multiplying the bytes by a float tensor takes the slower mixed-type path)."""
    ones = kept.view(torch.uint8).to(dtype)
    return ones if value == 1.0 else ones.mul_(value)


def keep_factor(kept: Tensor, scale: float, dtype: torch.dtype) -> Tensor:
    """``scale`` where ``kept``, else 0, for tensors of ``dtype``: in ``dtype``, or float32 for a 16-bit float (whose
    rounding of ``scale``, bfloat16's 1.109 for 1 / 0.9, would bias the layer). Multiplying by it rounds as
    multiplying by ``scale`` does (in place, or cast back, for a 16-bit float)."""
    return kept_times(kept, scale, dtype if torch.finfo(dtype).bits >= 32 else torch.float32)


def apply_mask(x: Tensor, kept: Tensor, scale: float) -> Tensor:
    """``x * scale`` with the elements not ``kept`` zeroed (a new tensor of ``x``'s dtype)."""
    return (x * keep_factor(kept, scale, x.dtype)).to(x.dtype)
