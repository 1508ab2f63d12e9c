"""Shared pieces of the sparse and low-rank softmax attentions (local, longformer, bigbird, sinkhorn, ...).

Conventions: ``real`` is a ``(B, N)`` bool mask, True for real tokens; pads trail the real tokens, so
block boundaries counted from the sequence start do not move when pads are appended.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def real_tokens(key_padding_mask: Tensor | None, q: Tensor) -> Tensor:
    """``(B, N)`` bool, True for real tokens (all True without a mask)."""
    if key_padding_mask is None:
        return torch.ones(q.shape[0], q.shape[-2], dtype=torch.bool, device=q.device)
    return key_padding_mask.to(device=q.device, dtype=torch.bool)


def real_lengths(real: Tensor) -> Tensor:
    """``(B,)`` one past the last real position (0 for a sequence of pads only)."""
    positions = torch.arange(1, real.shape[-1] + 1, device=real.device)
    return (real * positions).amax(-1)


def pad_tokens(x: Tensor, length: int) -> Tensor:
    """Zero-pad ``(B, H, N, D)`` along the sequence to ``length``."""
    return F.pad(x, (0, 0, 0, length - x.shape[-2]))


def pad_real(real: Tensor, length: int) -> Tensor:
    """Extend the ``(B, N)`` mask to ``length`` with pads."""
    return F.pad(real, (0, length - real.shape[-1]), value=False)


def num_blocks(n: int, block_size: int) -> int:
    return -(-n // block_size)


def to_blocks(x: Tensor, block_size: int) -> Tensor:
    """``(B, H, N, D)`` -> ``(B, H, M, block_size, D)``, zero-padded to ``M * block_size`` tokens."""
    m = num_blocks(x.shape[-2], block_size)
    return pad_tokens(x, m * block_size).unflatten(-2, (m, block_size))


def masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """Softmax over the last dim restricted to ``allowed``; a row with nothing allowed is all zeros."""
    filled = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return filled.softmax(-1) * allowed.any(-1, keepdim=True)


def explicit_attention(scores: Tensor, allowed: Tensor, v: Tensor) -> Tensor:
    """Oracle helper: the explicit ``(B, H, N, N)`` weights ``softmax(scores | allowed)`` times ``v``."""
    return masked_softmax(scores.float(), allowed) @ v.float()


def scaled_scores(q: Tensor, k: Tensor) -> Tensor:
    """``q k^T / sqrt(d)`` in float32."""
    return (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5


def keep_in_graph(out: Tensor, *unused: Tensor) -> Tensor:
    """``out`` plus an exact zero read from ``unused`` inputs.

    Mechanisms that ignore an input (shared-QK Reformer ignores k, the Synthesizer q and k) still give it
    a zero gradient, so DDP without ``find_unused_parameters`` accepts the unused projection.
    """
    for t in unused:
        out = out + t[..., :0].sum().to(out.dtype)  # an empty slice: sums to exactly 0
    return out


def refuse_causal(name: str, causal: bool) -> None:
    if causal:
        raise ValueError(f"{name} attention is not causal: it cannot be built with causal=True")
