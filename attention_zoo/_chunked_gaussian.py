"""Skyformer's product ``kappa(Q, S) M^T kappa(K, S)^T V`` in token chunks: no ``(N, m)`` tensor is kept.

``kappa(x, s) = exp(-|x - s|^2 / 2)`` (Chen et al., arXiv 2111.00035), ``S`` the ``m`` landmarks and ``M``
the ``(m, m)`` middle matrix ``D^(-1/2) pinv(D^(-1/2) W D^(-1/2)) D^(-1/2)``; both come from autograd (they
are small). Keys go through in chunks into ``A = kappa(K, S)^T V`` ``(m, D)``, then queries read
``B = M^T A``. Backward recomputes each chunk's kernel block ``G`` and uses
``d kappa / d x = kappa (s - x)``: with ``E = dL/dG * G``, ``dx = E S - rowsum(E) x`` and
``dS += E^T x - colsum(E) S``. Autograd keeps q, k, v (already scaled and masked), S, M, A and B: O(N d).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._sketch import CHUNK_BYTES, token_chunks
from .first_order import first_order_only


def kernel_block(x_c: Tensor, s: Tensor, s_half_sq: Tensor) -> Tensor:
    """``kappa(x_c, s)`` ``(R, C, m)`` for ``x_c`` ``(R, C, d)``, ``s`` ``(R, m, d)``, ``s_half_sq`` ``(R, 1, m)``."""
    block = torch.bmm(x_c, s.transpose(1, 2))
    block.sub_(x_c.square().sum(-1, keepdim=True).mul_(0.5)).sub_(s_half_sq)
    return block.clamp_max_(0.0).exp_()  # -|x - s|^2 / 2 <= 0; rounding may push it above


def kernel_backprop(grad_block: Tensor, block: Tensor, x_c: Tensor, s: Tensor, grad_s: Tensor) -> Tensor:
    """``dL/dx_c`` from ``dL/dkappa`` (overwritten); adds ``dL/ds`` into ``grad_s``."""
    e = grad_block.mul_(block)  # (R, C, m)
    grad_s.baddbmm_(e.transpose(1, 2), x_c).sub_(e.sum(1).unsqueeze(-1) * s)
    return torch.bmm(e, s).sub_(e.sum(-1, keepdim=True) * x_c)


class _ChunkedGaussianNystrom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, s: Tensor, middle: Tensor, chunk_bytes: int) -> Tensor:
        rows, n, _ = q.shape
        chunks = token_chunks(n, rows, s.shape[1], q.element_size(), chunk_bytes)
        s_half_sq = s.square().sum(-1).mul_(0.5).unsqueeze(1)  # (R, 1, m)
        a = q.new_zeros(rows, s.shape[1], v.shape[-1])  # (R, m, D)
        for sl in chunks:
            a.baddbmm_(kernel_block(k[:, sl], s, s_half_sq).transpose(1, 2), v[:, sl])
        b = torch.bmm(middle.transpose(1, 2), a)  # (R, m, D)
        out = q.new_empty(rows, n, v.shape[-1])
        for sl in chunks:
            out[:, sl] = torch.bmm(kernel_block(q[:, sl], s, s_half_sq), b)
        ctx.save_for_backward(q, k, v, s, middle, a, b)
        ctx.chunks = chunks
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out: Tensor):
        q, k, v, s, middle, a, b = ctx.saved_tensors
        s_half_sq = s.square().sum(-1).mul_(0.5).unsqueeze(1)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        grad_s, grad_b = torch.zeros_like(s), torch.zeros_like(b)
        for sl in ctx.chunks:
            block = kernel_block(q[:, sl], s, s_half_sq)  # (R, C, m)
            grad_b.baddbmm_(block.transpose(1, 2), grad_out[:, sl])
            grad_q[:, sl] = kernel_backprop(torch.bmm(grad_out[:, sl], b.transpose(1, 2)), block, q[:, sl], s, grad_s)
        grad_middle = torch.bmm(a, grad_b.transpose(1, 2))  # b = M^T a
        grad_a = torch.bmm(middle, grad_b)
        for sl in ctx.chunks:
            block = kernel_block(k[:, sl], s, s_half_sq)
            grad_v[:, sl] = torch.bmm(block, grad_a)
            grad_k[:, sl] = kernel_backprop(torch.bmm(v[:, sl], grad_a.transpose(1, 2)), block, k[:, sl], s, grad_s)
        return grad_q, grad_k, grad_v, grad_s, grad_middle, None


def chunked_gaussian_nystrom(q: Tensor, k: Tensor, v: Tensor, landmarks: Tensor, middle: Tensor,
                             chunk_bytes: int = CHUNK_BYTES) -> Tensor:
    """``kappa(q, S) M^T kappa(k, S)^T v`` for ``q, k`` ``(..., N, d)``, ``v`` ``(..., N, D)``, ``S``
    ``(..., m, d)``, ``M`` ``(..., m, m)``; returns ``(..., N, D)``. Padded keys need ``v``'s rows zero."""
    lead = q.shape[:-2]

    def flat(x: Tensor) -> Tensor:
        return x.reshape(-1, *x.shape[-2:]).contiguous()

    out = _ChunkedGaussianNystrom.apply(flat(q), flat(k), flat(v), flat(landmarks), flat(middle), chunk_bytes)
    return out.reshape(*lead, *out.shape[-2:])


def naive_gaussian_nystrom(q: Tensor, k: Tensor, v: Tensor, landmarks: Tensor, middle: Tensor) -> Tensor:
    """Oracle: the full ``(N, N)`` weights ``kappa(q, S) M^T kappa(k, S)^T`` times ``v``, by autograd."""
    def kappa(x: Tensor) -> Tensor:
        return torch.exp(-torch.cdist(x, landmarks).square() / 2)

    weights = kappa(q) @ middle.transpose(-1, -2) @ kappa(k).transpose(-1, -2)
    return weights @ v
