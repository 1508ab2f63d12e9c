"""Learned positional offsets on keys (PolaFormer, FLatten add them to k), 1-D for sequences."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LearnedKeyPositions(nn.Module):
    """``k + P[:, :n]`` with a zero-initialised table ``P`` ``(H, max_len, d)``."""

    def __init__(self, owner: str, num_heads: int, max_len: int | None, head_dim: int):
        super().__init__()
        if max_len is None:
            raise ValueError(f"{owner} key_positions=true needs max_len")
        self.owner = owner
        self.table = nn.Parameter(torch.zeros(num_heads, max_len, head_dim))  # (H, max_len, d)

    def forward(self, k: Tensor) -> Tensor:
        n, limit = k.shape[-2], self.table.shape[1]
        if n > limit:
            raise ValueError(f"{self.owner} key_positions cover {limit} positions, got length {n}")
        return k.float() + self.table[:, :n].float()
