"""The polynomial sketch ``phi(x) = sum_r prod_j x Theta_{j,r}`` (LLoPS, arXiv 2610.14219; PolySketchFormer's
Gaussian sketch, arXiv 2310.01655, is the same map with a fixed random Theta), computed fast.

``polynomial_sketch`` is one autograd node that works through the tokens in cache-sized chunks: per chunk,
one matmul against the concatenated Theta ``(H, d, t p m)``, the product over j and sum over r. Backward
recomputes the projections instead of storing them, so autograd keeps only ``x`` and Theta (the ``t p m``
projections per token are the largest tensor of LLoPS, ``p t`` times its features), and

    d phi / d (x Theta_{j,r}) = prod_{i != j} x Theta_{i,r}

comes from one prefix and one suffix product. Chunking keeps each chunk's projections in cache and bounds
the extra memory to ``chunk_bytes`` whatever the length.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

CHUNK_BYTES = 2**21  # projections per chunk: well inside one core's L2 cache


def theta_matrix(theta: Tensor, batch: int) -> Tensor:
    """``(H, t, p, d, m)`` -> ``(B H, d, t p m)`` contiguous: every factor's projection in one bmm."""
    h, t, p, d, m = theta.shape
    flat = theta.permute(0, 3, 1, 2, 4).reshape(h, d, t * p * m)
    return flat.expand(batch, h, d, t * p * m).reshape(batch * h, d, t * p * m)


def token_chunks(n: int, rows: int, width: int, element_size: int, chunk_bytes: int) -> list[slice]:
    """Slices of ``range(n)`` such that ``rows x chunk x width`` projections fit ``chunk_bytes``."""
    size = max(1, chunk_bytes // (rows * width * element_size))
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


class Workspace:
    """Per-chunk-length buffers reused across chunks: fresh large allocations cost page faults on CPU."""

    def __init__(self, like: Tensor):
        self.like, self.buffers = like, {}

    def get(self, name: str, shape: tuple[int, ...]) -> Tensor:
        key = (name, shape)
        if key not in self.buffers:
            self.buffers[key] = self.like.new_empty(shape)
        return self.buffers[key]


def product_over_factors(proj: Tensor, out: Tensor) -> Tensor:
    """``sum_r prod_j proj[..., r, j, :]`` of ``proj`` ``(..., t, p, m)`` into ``out`` ``(..., m)``."""
    t, p = proj.shape[-3:-1]
    for r in range(t):
        target = out if r == 0 else torch.empty_like(out)
        if p == 1:
            target.copy_(proj[..., r, 0, :])
        else:
            torch.mul(proj[..., r, 0, :], proj[..., r, 1, :], out=target)
        for j in range(2, p):
            target.mul_(proj[..., r, j, :])
        if r:
            out.add_(target)
    return out


def leave_one_out(proj: Tensor, others: Tensor, prods: Tensor) -> None:
    """``others[..., j, :] = prod_{i != j} proj[..., i, :]`` and ``prods = prod_i proj[..., i, :]`` over dim -2."""
    p = proj.shape[-2]
    others[..., 0, :] = 1
    for j in range(1, p):
        torch.mul(others[..., j - 1, :], proj[..., j - 1, :], out=others[..., j, :])
    prods.copy_(proj[..., p - 1, :])
    for j in range(p - 2, -1, -1):
        others[..., j, :] *= prods
        prods *= proj[..., j, :]


class _PolynomialSketch(torch.autograd.Function):
    """Chunked forward; backward recomputes each chunk's projections (see module docstring)."""

    @staticmethod
    def forward(ctx, x: Tensor, theta: Tensor, square: bool, chunk_bytes: int) -> Tensor:
        b, h, n, d = x.shape
        t, p, m = theta.shape[1], theta.shape[2], theta.shape[4]
        flat = theta_matrix(theta, b)  # (B H, d, t p m)
        out = x.new_empty(b, h, n, m)
        work = Workspace(x)
        for sl in token_chunks(n, b * h, t * p * m, x.element_size(), chunk_bytes):
            c = sl.stop - sl.start
            proj = work.get("proj", (b * h, c, t * p * m))
            torch.bmm(x[:, :, sl].reshape(b * h, c, d), flat, out=proj)
            phi = product_over_factors(proj.view(b * h, c, t, p, m), work.get("phi", (b * h, c, m)))
            out[:, :, sl] = (phi * phi if square else phi).view(b, h, c, m)
        ctx.save_for_backward(x, theta)
        ctx.square, ctx.chunk_bytes = square, chunk_bytes
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        x, theta = ctx.saved_tensors
        b, h, n, d = x.shape
        _, t, p, _, m = theta.shape
        need_x, need_theta = ctx.needs_input_grad[:2]
        flat = theta_matrix(theta, b)  # (B H, d, t p m)
        grad_x = torch.empty_like(x) if need_x else None
        grad_flat = torch.zeros_like(flat) if need_theta else None
        work = Workspace(x)
        for sl in token_chunks(n, b * h, t * p * m, x.element_size(), ctx.chunk_bytes):
            c = sl.stop - sl.start
            x_c = x[:, :, sl].reshape(b * h, c, d)
            proj = torch.bmm(x_c, flat, out=work.get("proj", (b * h, c, t * p * m)))
            others = work.get("others", (b * h, c, t, p, m))
            prods = work.get("prods", (b * h, c, t, m))
            leave_one_out(proj.view(b * h, c, t, p, m), others, prods)
            grad = grad_out[:, :, sl].reshape(b * h, c, m)
            if ctx.square:  # d(phi^2) = 2 phi d(phi)
                grad = torch.sum(prods, dim=-2, out=work.get("phi", (b * h, c, m))).mul_(grad).mul_(2)
            grad_proj = others.mul_(grad[:, :, None, None, :]).view(b * h, c, t * p * m)
            if need_x:
                gx = torch.bmm(grad_proj, flat.transpose(1, 2), out=work.get("grad_x", (b * h, c, d)))
                grad_x[:, :, sl] = gx.view(b, h, c, d)
            if need_theta:
                grad_flat.baddbmm_(x_c.transpose(1, 2), grad_proj)
        grad_theta = None
        if need_theta:
            grad_theta = grad_flat.view(b, h, d, t, p, m).sum(0).permute(0, 2, 3, 1, 4)
        return grad_x, grad_theta, None, None


def polynomial_sketch(x: Tensor, theta: Tensor, square: bool, chunk_bytes: int = CHUNK_BYTES) -> Tensor:
    """``sum_r prod_j x Theta_{j,r}`` (then squared) for ``x`` ``(B, H, N, d)``, ``theta`` ``(H, t, p, d, m)``."""
    if x.dim() != 4 or theta.dim() != 5 or x.shape[1] != theta.shape[0] or x.shape[3] != theta.shape[3]:
        raise ValueError(f"polynomial_sketch needs x (B, H, N, d) and theta (H, t, p, d, m); "
                         f"got {tuple(x.shape)} and {tuple(theta.shape)}")
    if x.dtype != theta.dtype:
        raise TypeError(f"polynomial_sketch needs x and theta of one dtype, got {x.dtype} and {theta.dtype}")
    return _PolynomialSketch.apply(x, theta, square, chunk_bytes)


def naive_polynomial_sketch(x: Tensor, theta: Tensor, square: bool) -> Tensor:
    """Oracle of ``polynomial_sketch``: one einsum per (r, j) factor, multiplied out term by term."""
    h, t, p, d, m = theta.shape
    phi = torch.zeros(x.shape[:-1] + (m,), dtype=torch.float64)
    for r in range(t):
        term = torch.ones_like(phi)
        for j in range(p):
            term = term * torch.einsum("bhnd,hdm->bhnm", x.double(), theta[:, r, j].double())
        phi = phi + term
    return phi * phi if square else phi
