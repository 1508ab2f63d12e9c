"""Exact spherical Yat attention (SLAY paper, arXiv 2602.04915, section 2; quadratic, no softmax).

With ``q^ = q / |q|`` and ``k^ = k / |k|`` (float32) and ``x = q^ . k^`` in [-1, 1], the spherical Yat
kernel is ``K(q, k) = x^2 / (C - 2 x)`` with ``C = 2 + eps``, i.e. ``(q^ . k^)^2 / (|q^ - k^|^2 + eps)``,
and the attention is kernel-normalised: ``out = K V / (K 1 + delta)``. ``K`` is in ``[0, 1 / eps]``.

The fast form is still O(n^2 d) but never holds the n x n matrix: it walks over blocks of query rows,
and under autograd each block is checkpointed, so the backward pass does not keep every block alive
either. Causal blocks only read the keys up to their last row. ``chunk_size=None`` sizes a block to
about ``BLOCK_ELEMENTS`` floats (B H rows n): 64 MiB on the CPU (few blocks: each elementwise pass is a
thread synchronisation, costly on a shared machine), 512 MiB on an accelerator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .kernel import expand_key_mask, float32_region, naive_normalized_attention
from .registry import register

BLOCK_ELEMENTS = {"cpu": 2**24, "other": 2**27}


def spherical_yat_kernel(x: Tensor, eps: float) -> Tensor:
    """``x^2 / (2 + eps - 2 x)`` for cosines ``x``; the denominator is clamped at ``eps`` (fp32 rounding).

    In-place steps on fresh temporaries (autograd-safe): fewer passes over a ``(rows, N)`` block.
    """
    denominator = torch.rsub(x, 2.0 + eps, alpha=2.0).clamp_min_(eps)
    return x.square().div_(denominator)


def unit(x: Tensor) -> Tensor:
    """Rows scaled to unit L2 norm, in float32 (a zero row stays zero)."""
    return F.normalize(x.float(), p=2.0, dim=-1)


def naive_yat(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
              eps: float = 1e-3, delta: float = 1e-6, causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` kernel matrix ``K``, then ``K V / (K 1 + delta)``."""
    with float32_region(q):
        weights = spherical_yat_kernel(unit(q) @ unit(k).transpose(-1, -2), eps)  # (B, H, N, N)
        return naive_normalized_attention(weights, v, key_padding_mask, eps=delta, causal=causal)


def _block_products(q_rows: Tensor, k_hat: Tensor, v1: Tensor, eps: float, first_row: int,
                    causal: bool) -> Tensor:
    """``K[rows] @ v1`` for one block of query rows ``(B, H, C, d)`` against keys ``(B, H, N_k, d)``."""
    weights = spherical_yat_kernel(q_rows @ k_hat.transpose(-1, -2), eps)  # (B, H, C, N_k)
    if causal:
        rows = torch.arange(first_row, first_row + q_rows.shape[-2], device=q_rows.device)
        cols = torch.arange(k_hat.shape[-2], device=q_rows.device)
        weights = weights.masked_fill(cols[None, :] > rows[:, None], 0.0)
    return weights @ v1  # (B, H, C, D + 1)


def block_rows(q: Tensor, n_keys: int) -> int:
    """Query rows per block so that a ``(B, H, rows, n_keys)`` block holds about ``BLOCK_ELEMENTS``."""
    budget = BLOCK_ELEMENTS["cpu" if q.device.type == "cpu" else "other"]
    return max(1, budget // (q.shape[0] * q.shape[1] * n_keys))


def chunked_yat(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                eps: float = 1e-3, delta: float = 1e-6, causal: bool = False,
                chunk_size: int | None = None) -> Tensor:
    """Exact spherical Yat attention by blocks of query rows; returns ``v``'s dtype."""
    out_dtype = v.dtype
    with float32_region(v):
        q_hat, k_hat, v = unit(q), unit(k), v.float()
        v1 = torch.cat([v, v.new_ones(v.shape[:-1] + (1,))], dim=-1)  # (B, H, N, D + 1): last gives K 1
        mask = expand_key_mask(key_padding_mask, v1)
        if mask is not None:
            v1 = v1 * mask  # padded keys add nothing to K V nor to K 1
        n = q.shape[-2]
        chunk_size = chunk_size or block_rows(q, k.shape[-2])
        track = torch.is_grad_enabled() and any(t.requires_grad for t in (q_hat, k_hat, v1))
        blocks = []
        for start in range(0, n, chunk_size):
            stop = min(start + chunk_size, n)
            keys = stop if causal else k.shape[-2]
            args = (q_hat[..., start:stop, :], k_hat[..., :keys, :], v1[..., :keys, :], eps, start, causal)
            if track:  # recompute the block in backward instead of storing its (C, N) weights
                blocks.append(checkpoint(_block_products, *args, use_reentrant=False))
            else:
                blocks.append(_block_products(*args))
        num_den = torch.cat(blocks, dim=-2)
        out = num_den[..., :-1] / (num_den[..., -1:] + delta)
    return out.to(out_dtype)


@register("yat")
class YatAttention(nn.Module):
    """Exact spherical Yat attention (quadratic); ``eps`` sharpens the kernel, ``delta`` guards ``K 1``."""

    supports_causal = True
    quadratic = True  # time (and memory) grow with the square of the sequence length

    def __init__(self, *, eps: float = 1e-3, delta: float = 1e-6, causal: bool = False,
                 chunk_size: int | None = None):
        super().__init__()
        if eps <= 0 or delta < 0 or (chunk_size is not None and chunk_size < 1):
            raise ValueError(f"yat needs eps > 0, delta >= 0, chunk_size >= 1 or None; got eps={eps}, "
                             f"delta={delta}, chunk_size={chunk_size}")
        self.eps, self.delta, self.causal, self.chunk_size = eps, delta, causal, chunk_size

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return chunked_yat(q, k, v, key_padding_mask, eps=self.eps, delta=self.delta, causal=self.causal,
                           chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_yat(q, k, v, key_padding_mask, eps=self.eps, delta=self.delta, causal=self.causal)
