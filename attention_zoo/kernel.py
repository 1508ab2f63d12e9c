"""Shared pieces of kernelized (linear) attention.

Generic normalised form (Katharopoulos et al., arXiv 2006.16236, eq. 2-4)::

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

computed in O(n m d) by associativity, with ``sum_j`` over real keys only (padded ``phi(k_j)`` and
``v_j`` are zeroed) and, when causal, over ``j <= i`` via chunked prefix sums.
"""

from __future__ import annotations

import torch
from torch import Tensor


def float32_region(x: Tensor):
    """Context where autocast is off, so feature maps are computed in float32."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def expand_key_mask(key_padding_mask: Tensor | None, x: Tensor) -> Tensor | None:
    """``(B, N)`` bool mask to ``(B, 1, N, 1)`` in ``x``'s dtype, or None."""
    if key_padding_mask is None:
        return None
    return key_padding_mask[:, None, :, None].to(x.dtype)


def kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    eps: float = 1e-6,
    causal: bool = False,
    chunk_size: int = 256,
) -> Tensor:
    """Normalised linear attention from features ``phi_q, phi_k`` ``(B, H, N, M)`` and ``v`` ``(B, H, N, D)``.

    Computed in float32; returns ``v``'s dtype.
    """
    out_dtype = v.dtype
    with float32_region(v):
        phi_q, phi_k, v = phi_q.float(), phi_k.float(), v.float()
        mask = expand_key_mask(key_padding_mask, v)
        if mask is not None:
            phi_k = phi_k * mask
            v = v * mask
        ones = v.new_ones(v.shape[:-1] + (1,))
        v1 = torch.cat([v, ones], dim=-1)  # (B, H, N, D + 1): last column gives the denominator
        if causal:
            num_den = causal_products(phi_q, phi_k, v1, chunk_size)
        else:
            state = phi_k.transpose(-1, -2) @ v1  # (B, H, M, D + 1)
            num_den = phi_q @ state
        out = num_den[..., :-1] / (num_den[..., -1:] + eps)
    return out.to(out_dtype)


def causal_products(phi_q: Tensor, phi_k: Tensor, v1: Tensor, chunk_size: int) -> Tensor:
    """``sum_{j<=i} (phi_q_i . phi_k_j) v1_j`` by chunks: exact inside a chunk, a running state across."""
    n = phi_q.shape[-2]
    state = phi_q.new_zeros(phi_q.shape[:-2] + (phi_q.shape[-1], v1.shape[-1]))  # (B, H, M, D + 1)
    outs = []
    for start in range(0, n, chunk_size):
        sl = slice(start, start + chunk_size)
        q_c, k_c, v_c = phi_q[..., sl, :], phi_k[..., sl, :], v1[..., sl, :]
        scores = torch.tril(q_c @ k_c.transpose(-1, -2))  # (B, H, C, C)
        outs.append(scores @ v_c + q_c @ state)
        state = state + k_c.transpose(-1, -2) @ v_c
    return torch.cat(outs, dim=-2)


def naive_normalized_attention(
    weights: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    eps: float = 1e-6,
    causal: bool = False,
) -> Tensor:
    """Oracle: apply an explicit ``(B, H, N, N)`` weight matrix, row-normalised by its own sum + eps."""
    weights = weights.float()
    n = weights.shape[-1]
    if key_padding_mask is not None:
        weights = weights * key_padding_mask[:, None, None, :].float()
    if causal:
        weights = weights * torch.ones(n, n, dtype=torch.bool, device=weights.device).tril()
    out = (weights @ v.float()) / (weights.sum(-1, keepdim=True) + eps)
    return out.to(v.dtype)


def naive_kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    eps: float = 1e-6,
    causal: bool = False,
) -> Tensor:
    """Oracle for ``kernel_attention``: build the full weight matrix ``phi_q phi_k^T``, then normalise."""
    weights = phi_q.float() @ phi_k.float().transpose(-1, -2)  # (B, H, N, N)
    return naive_normalized_attention(weights, v, key_padding_mask, eps=eps, causal=causal)
