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

from .first_order import first_order_only

CHUNK_BYTES = 2**21  # projections per chunk: of 1-16 MiB, 2 MiB was fastest here (1 MiB L2 per core)


def token_chunks(n: int, rows: int, width: int, element_size: int, chunk_bytes: int) -> list[slice]:
    """Slices of ``range(n)`` such that ``rows x chunk x width`` projections fit ``chunk_bytes``."""
    size = max(1, chunk_bytes // (rows * width * element_size))
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


class Workspace:
    """Per-chunk-length buffers reused across chunks: fresh large allocations cost page faults on CPU."""

    def __init__(self, like: Tensor):
        self.like, self.buffers = like, {}

    def get(self, name: str, shape: tuple[int, ...], zeros: bool = False) -> Tensor:
        """The buffer ``name`` of ``shape``; ``zeros``: zero when created (entries never written stay 0)."""
        key = (name, shape)
        if key not in self.buffers:
            self.buffers[key] = self.like.new_zeros(shape) if zeros else self.like.new_empty(shape)
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
    """``others[..., j, :] = prod_{i != j} proj[..., i, :]`` and ``prods = prod_i proj[..., i, :]`` over dim -2.

    Prefix products fill ``others[1:]``; the suffix products run in ``others[0]``, which ends as its own
    leave-one-out product. No division, so zero factors are exact.
    """
    p = proj.shape[-2]
    a = [proj[..., j, :] for j in range(p)]
    o = [others[..., j, :] for j in range(p)]
    if p == 1:
        o[0].fill_(1)
        prods.copy_(a[0])
        return
    o[1].copy_(a[0])
    for j in range(2, p):
        torch.mul(o[j - 1], a[j - 1], out=o[j])
    o[0].copy_(a[p - 1])
    for j in range(p - 2, 0, -1):
        o[j].mul_(o[0])
        o[0].mul_(a[j])
    torch.mul(o[0], a[0], out=prods)


class ChunkSketch:
    """The sketch of one token chunk ``x_c`` ``(B H, C, d)`` and its backward, with reused buffers.

    ``forward`` gives ``phi`` ``(B H, C, m)``; ``recompute`` does the same while keeping the leave-one-out
    products, after which ``backprop(x_c, grad_phi)`` returns ``grad_x_c`` and adds into Theta's gradient.
    A ``ChunkMap`` of ``_chunked_attention`` (``like`` is the input, for its batch size).

    Inside, the chunk is taken head-major, ``(H, B C, d)``: one product per head against that head's Theta (the
    B sequences share it) runs ~1.6x faster than B H small products of ``C x d`` by ``d x t p m``, and Theta's
    gradient sums over the batch inside the product. Only the inputs and outputs (``d`` and ``m`` wide, not the
    ``t p m`` projections) are copied between the layouts.
    """

    def __init__(self, theta: Tensor, like: Tensor, need_grad: bool = False, *, square: bool):
        h, t, p, d, m = theta.shape
        self.batch, self.heads, self.d = like.shape[0], h, d
        self.theta = theta.permute(0, 3, 1, 2, 4).reshape(h, d, t * p * m)  # (H, d, t p m)
        self.shape = (t, p, m)
        self.features, self.square, self.work = m, square, Workspace(theta)
        self.grad_theta = torch.zeros_like(self.theta) if need_grad else None

    def width(self) -> int:
        t, p, m = self.shape
        return t * p * m

    def _heads_first(self, name: str, x_c: Tensor) -> Tensor:
        """``(B H, C, e)`` -> a buffer ``(H, B C, e)``."""
        b, h, (c, e) = self.batch, self.heads, x_c.shape[1:]
        out = self.work.get(name, (h, b, c, e))
        out.copy_(x_c.view(b, h, c, e).transpose(0, 1))
        return out.view(h, b * c, e)

    def _rows_first(self, name: str, y: Tensor, c: int, square: bool = False) -> Tensor:
        """``(H, B C, e)`` -> a buffer ``(B H, C, e)``, squared on the way if ``square`` (one pass, not two)."""
        b, h, e = self.batch, self.heads, y.shape[-1]
        out = self.work.get(name, (b, h, c, e))
        moved = y.view(h, b, c, e).transpose(0, 1)
        torch.mul(moved, moved, out=out) if square else out.copy_(moved)
        return out.view(b * h, c, e)

    def _project(self, x_c: Tensor) -> Tensor:
        """``(H, B C, t, p, m)``; keeps the head-major chunk for ``backprop``."""
        self.x_h = self._heads_first("x", x_c)  # (H, B C, d)
        proj = torch.bmm(self.x_h, self.theta, out=self.work.get("proj", (self.heads, self.x_h.shape[1], self.width())))
        return proj.view(self.heads, -1, *self.shape)

    def _finish(self, phi: Tensor, c: int) -> Tensor:
        return self._rows_first("feature", phi, c, self.square)

    def forward(self, x_c: Tensor) -> Tensor:
        proj = self._project(x_c)
        phi = product_over_factors(proj, self.work.get("phi", (*proj.shape[:2], self.features)))
        return self._finish(phi, x_c.shape[1])

    def recompute(self, x_c: Tensor) -> Tensor:
        t, p, m = self.shape
        proj = self._project(x_c)
        others = self.work.get("others", proj.shape)
        prods = self.work.get("prods", (*proj.shape[:2], t, m))
        leave_one_out(proj, others, prods)
        phi = prods[:, :, 0] if t == 1 else torch.sum(prods, dim=-2, out=self.work.get("phi", (*proj.shape[:2], m)))
        self.phi = phi  # (H, B C, m)
        return self._finish(phi, x_c.shape[1])

    def backprop(self, x_c: Tensor, grad_feature: Tensor) -> Tensor:
        """After ``recompute(x_c)``: ``grad_x_c`` ``(B H, C, d)`` (a buffer); Theta's gradient accumulates."""
        b, h, c, m = self.batch, self.heads, x_c.shape[1], self.features
        grad, scale = grad_feature.view(b, h, c, m).transpose(0, 1), 1  # (H, B, C, m), read in place
        if self.square:  # d(phi^2) = 2 phi d(phi); the 2 is applied in the matmuls
            grad, scale = self.phi.view(h, b, c, m).mul_(grad), 2
        others = self.work.get("others", (*self.phi.shape[:2], *self.shape)).view(h, b, c, *self.shape)
        grad_proj = others.mul_(grad[:, :, :, None, None, :]).view(h, -1, self.width())
        if self.grad_theta is not None:
            self.grad_theta.baddbmm_(self.x_h.transpose(1, 2), grad_proj, alpha=scale)
        grad_x = self.work.get("grad_x_h", self.x_h.shape)
        torch.baddbmm(grad_x, grad_proj, self.theta.transpose(1, 2), beta=0, alpha=scale, out=grad_x)
        return self._rows_first("grad_x", grad_x, c)

    def grad_param(self) -> Tensor:
        """Theta's gradient ``(H, t, p, d, m)``."""
        t, p, m = self.shape
        return self.grad_theta.view(self.heads, self.d, t, p, m).permute(0, 2, 3, 1, 4)


def chunk_of(x: Tensor, sl: slice) -> Tensor:
    """Tokens ``sl`` of ``x`` ``(B, H, N, e)`` as ``(B H, C, e)`` (a view when the layout allows)."""
    b, h, _, e = x.shape
    return x[:, :, sl].reshape(b * h, sl.stop - sl.start, e)


def put_chunk(target: Tensor, sl: slice, values: Tensor) -> None:
    """Write ``(B H, C, e)`` ``values`` into tokens ``sl`` of ``target`` ``(B, H, N, e)``."""
    b, h = target.shape[:2]
    target[:, :, sl] = values.view(b, h, sl.stop - sl.start, -1)


class _PolynomialSketch(torch.autograd.Function):
    """Chunked forward; backward recomputes each chunk's projections (see module docstring)."""

    @staticmethod
    def forward(ctx, x: Tensor, theta: Tensor, square: bool, chunk_bytes: int) -> Tensor:
        b, h, n, _ = x.shape
        sketch = ChunkSketch(theta, x, square=square)
        out = x.new_empty(b, h, n, theta.shape[-1])
        for sl in token_chunks(n, b * h, sketch.width(), x.element_size(), chunk_bytes):
            put_chunk(out, sl, sketch.forward(chunk_of(x, sl)))
        ctx.save_for_backward(x, theta)
        ctx.square, ctx.chunk_bytes = square, chunk_bytes
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out: Tensor):
        x, theta = ctx.saved_tensors
        b, h, n, _ = x.shape
        need_x, need_theta = ctx.needs_input_grad[:2]
        sketch = ChunkSketch(theta, x, need_theta, square=ctx.square)
        grad_x = torch.empty_like(x) if need_x else None
        for sl in token_chunks(n, b * h, sketch.width(), x.element_size(), ctx.chunk_bytes):
            x_c = chunk_of(x, sl)
            sketch.recompute(x_c)
            grad_x_c = sketch.backprop(x_c, chunk_of(grad_out, sl))
            if need_x:
                put_chunk(grad_x, sl, grad_x_c)
        return grad_x, sketch.grad_param() if need_theta else None, None, None


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
