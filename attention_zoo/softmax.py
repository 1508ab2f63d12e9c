"""Softmax attention (Vaswani et al., arXiv 1706.03762): ``softmax(Q K^T / sqrt(d) + mask) V``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .registry import register


def _allowed(key_padding_mask: Tensor | None, n: int, causal: bool, device) -> Tensor | None:
    """Boolean ``(B|1, 1, N|1, N)`` mask, True where a query may attend to a key."""
    allowed = None
    if key_padding_mask is not None:
        allowed = key_padding_mask[:, None, None, :]
    if causal:
        tri = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]
        allowed = tri if allowed is None else allowed & tri
    return allowed


def naive_softmax(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                  *, causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` softmax weight matrix times ``v``."""
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    allowed = _allowed(key_padding_mask, q.shape[-2], causal, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(v.dtype)


@register("softmax")
class SoftmaxAttention(nn.Module):
    """Exact softmax attention on ``F.scaled_dot_product_attention`` with the key padding mask.

    Options: ``dropout`` on the attention weights (off by default: on the CPU it leaves SDPA's
    fused path and costs ~7x time and memory), ``causal``.
    """

    supports_causal = True

    def __init__(self, *, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        self.dropout = dropout
        self.causal = causal

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        allowed = _allowed(key_padding_mask, q.shape[-2], self.causal, q.device)
        p = self.dropout if self.training else 0.0
        if allowed is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle (without dropout)."""
        return naive_softmax(q, k, v, key_padding_mask, causal=self.causal)
