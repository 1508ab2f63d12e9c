"""BASED linear attention (Arora et al., arXiv 2402.18668): 2nd-order Taylor feature map.

Per head, q and k are projected to ``r = feature_dim`` by learned ``W_q, W_k`` (d x r); then
``phi(x) = [1, x / r^(1/4), vec(x x^T) / (sqrt(2) sqrt(r))]`` (m = 1 + r + r^2), so that
``phi(q) . phi(k) = 1 + s / sqrt(r) + s^2 / (2 r)`` with ``s = (q W_q) . (k W_k)``: the Taylor
expansion of ``exp(s / sqrt(r))``, always >= 1/2. Normalised linear attention, O(n m d); non-causal, it is
fused (``_chunked_attention``): features made per token chunk and recomputed in backward, never stored.

Checked against HazyResearch/based@32c1bd4 ``based/models/mixers/linear_attention.py`` (``TaylorExp``, the
``quadratic`` path of ``LinearAttention.parallel_forward``: same map, ``eps`` added to the denominator,
defaults r = 16, eps = 1e-12) in ``tests/attention_zoo/test_parity_papers.py``. The official code is causal
only; non-causal (LRA) sums over every key instead of the prefix. It projects the block input straight to
``H r`` features; here ``W_q`` acts on the head's q (the block's q projection times ``W_q``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._chunk_maps import taylor_map
from ._chunked_attention import chunked_kernel_attention
from .kernel import at_least_float32, float32_region, kernel_attention, naive_normalized_attention, values_and_ones
from .registry import register


def taylor_feature_map(x: Tensor) -> Tensor:
    """``[1, x / r^(1/4), vec(x x^T) / sqrt(2 r)]`` on the last dim ``r``; float32 (float64 kept)."""
    r = x.shape[-1]
    x = at_least_float32(x)
    quad = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2) / math.sqrt(2 * r)  # (..., r * r)
    return torch.cat([x.new_ones(x.shape[:-1] + (1,)), x / r**0.25, quad], dim=-1)


def naive_based(q: Tensor, k: Tensor, v: Tensor, w_q: Tensor, w_k: Tensor,
                key_padding_mask: Tensor | None = None, *, eps: float = 1e-12,
                causal: bool = False) -> Tensor:
    """Oracle: the explicit kernel matrix ``1 + s / sqrt(r) + s^2 / (2 r)``, row-normalised."""
    r = w_q.shape[-1]
    q, k = at_least_float32(q), at_least_float32(k)
    s = (q @ w_q.to(q.dtype)) @ (k @ w_k.to(k.dtype)).transpose(-1, -2)  # (B, H, N, N)
    weights = 1 + s / math.sqrt(r) + s**2 / (2 * r)
    return naive_normalized_attention(weights, v, key_padding_mask, eps=eps, causal=causal)


def based_projection(num_heads: int, head_dim: int, feature_dim: int, generator=None) -> Tensor:
    """A BASED per-head projection ``(H, d, r)`` with ``N(0, 1/d)`` entries."""
    w = torch.randn(num_heads, head_dim, feature_dim, generator=generator)
    return w / math.sqrt(head_dim)


@register("based")
class BasedAttention(nn.Module):
    """BASED: learned projections to ``feature_dim`` then the Taylor feature map, normalised."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, num_heads: int, feature_dim: int = 16, eps: float = 1e-12,
                 causal: bool = False, chunk_size: int = 256):
        super().__init__()
        self.feature_dim, self.eps, self.causal, self.chunk_size = feature_dim, eps, causal, chunk_size
        self.w_q = nn.Parameter(based_projection(num_heads, head_dim, feature_dim))  # (H, d, r)
        self.w_k = nn.Parameter(based_projection(num_heads, head_dim, feature_dim))

    def features(self, x: Tensor, w: Tensor) -> Tensor:
        """``phi(x W)`` for ``x`` ``(B, H, N, d)`` -> ``(B, H, N, 1 + r + r^2)`` in float32 (float64 kept)."""
        with float32_region(x):
            x = at_least_float32(x)
            return taylor_feature_map(x @ w.to(x.dtype))

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if not self.causal:  # fused: no (N, m) tensor at all
            with float32_region(v):
                q, k = at_least_float32(q), at_least_float32(k)
                v1 = values_and_ones(at_least_float32(v), key_padding_mask)
                w_q, w_k = (w.to(q.dtype)[:, None, None] for w in (self.w_q, self.w_k))  # (H, 1, 1, d, r)
                out = chunked_kernel_attention(q, k, v1, w_q, w_k, taylor_map, eps=self.eps,
                                               key_padding_mask=key_padding_mask)
            return out.to(v.dtype)
        return kernel_attention(self.features(q, self.w_q), self.features(k, self.w_k), v,
                                key_padding_mask, eps=self.eps, causal=self.causal,
                                chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's parameters."""
        return naive_based(q, k, v, self.w_q, self.w_k, key_padding_mask, eps=self.eps, causal=self.causal)
