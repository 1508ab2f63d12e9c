"""Attention dropout on explicit attention weights, LRA's ``attention_dropout_rate``.

The LRA JAX code drops the normalised weights of local, longformer, linformer, sinkhorn and synthesizer
attention in training (a mask per sequence and head: ``broadcast_dropout=False``). Here the draw is a hash
of one seed (one draw from torch's CPU generator per call, so a checkpointed CPU RNG state resumes it
exactly) and the positions of each weight's query and key, so pads appended to a batch change no real
token's output; integer arithmetic only, so every device drops the same weights.
"""

from __future__ import annotations

import torch
from torch import Tensor

_HASH_MUL = 0x45D9F3B  # xor-shift-multiply rounds with this odd multiplier: a bijection of 32-bit words
_SALTS = (0x165667B1, 0x61C88647, 0x1B873593, 0x27D4EB2F)  # odd, below 2**31: batch, head, query, key


def check_dropout(name: str, p: float) -> float:
    """``p`` as a float; a rate outside ``[0, 1)`` is a ``ValueError`` naming the mechanism."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} dropout must be in [0, 1), got {p}")
    return float(p)


def dropout_seed() -> int:
    """One draw from torch's default (CPU) generator: the seed of one call's dropout masks."""
    return int(torch.randint(0, 2**31 - 1, ()))


def _mix_(x: Tensor) -> Tensor:
    """Two xor-shift-multiply rounds on int32 words, in place (wrapping; ``& 0xFFFF`` makes the shift logical).

    A bijection whose high bits depend on every input bit; the dropout threshold reads the high bits, so the
    usual closing ``x ^= x >> 16`` (it changes only the low half) is left out. One scratch buffer: a fresh
    full-size tensor per operation would cost as much as the arithmetic.
    """
    shifted = torch.empty_like(x)
    for _ in range(2):
        torch.bitwise_right_shift(x, 16, out=shifted)
        x ^= shifted.bitwise_and_(0xFFFF)
        x *= _HASH_MUL
    return x


def attention_dropout(weights: Tensor, p: float, seed: int, query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """Inverted dropout of normalised weights ``(B, H, ..., R, C)``: zero with probability ``p``, else ``/ (1 - p)``.

    Whether the weight of query ``i`` on key ``j`` in sequence ``b``, head ``h`` is kept is a hash of
    ``(seed, b, h, i, j)``: ``query_pos`` and ``key_pos`` are integer tensors broadcasting to
    ``weights.shape[2:]`` (``(..., R, 1)`` and ``(..., 1, C)`` keep the hashing cheap) that name each
    weight's query and key (any integers that identify them, fixed by the real tokens only).
    """
    b, h = weights.shape[:2]
    device, i32 = weights.device, torch.int32
    lane = torch.arange(b, device=device, dtype=i32)[:, None] * _SALTS[0] + seed
    lane = _mix_(lane + torch.arange(h, device=device, dtype=i32) * _SALTS[1])
    lane = lane.view(b, h, *[1] * (weights.ndim - 2))
    rows = _mix_(lane + query_pos.to(device, i32) * _SALTS[2])
    bits = _mix_(rows + key_pos.to(device, i32) * _SALTS[3])
    drop = bits < min(round(p * 2**32), 2**32 - 1) - 2**31  # the words are uniform over [-2**31, 2**31)
    return weights.masked_fill(drop, 0.0).mul_(1.0 / (1.0 - p))
