"""Quadratic feature maps on token chunks, for the fused attention of ``_chunked_attention``.

Both are made of the outer product of a short vector ``y`` (r numbers) given by an inner map: a
``ChunkSketch`` (of degree 1 it is the projection ``x W``) or the identity.

    BASED (Arora et al., arXiv 2402.18668), y = x W:
        phi(x) = [1, y / r^(1/4), vec(y y^T) / sqrt(2 r)]     phi(a) . phi(b) = 1 + s / sqrt(r) + s^2 / (2 r)
    PolySketchFormer (Kacham et al., arXiv 2310.01655), y = the sketch x':
        phi(x) = vec(y y^T)                                   phi(a) . phi(b) = s^2

with ``s = y(a) . y(b)``; m = 1 + r + r^2 and r^2, as in both reference implementations. Backward: with
``G = d loss / d vec(y y^T)`` as an r x r matrix, ``d loss / d y = (G + G^T) y = 2 G y``: G is symmetric,
being a combination of the state's (or its gradient's) rows, which are sums of symmetric ``y y^T``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._sketch import ChunkSketch, Workspace


class Identity:
    """The identity as inner map: the input already is ``y`` (a learned sketch, computed by autograd)."""

    def __init__(self, like: Tensor):
        self.features = like.shape[-1]

    def width(self) -> int:
        return self.features

    def forward(self, x_c: Tensor) -> Tensor:
        return x_c

    recompute = forward

    def backprop(self, x_c: Tensor, grad_y: Tensor) -> Tensor:
        return grad_y

    def grad_param(self) -> None:
        return None


class OuterFeatures:
    """``phi = [1, lin y, vec(z z^T)]``, ``z = quad y``, with the constant and the linear part optional."""

    def __init__(self, inner, like: Tensor, *, constant: bool, lin: float, quad: float):
        self.inner, self.r = inner, inner.features
        self.constant, self.lin, self.quad = constant, lin, quad
        self.start = int(constant) + (self.r if lin else 0)  # where vec(z z^T) begins
        self.features, self.work = self.start + self.r**2, Workspace(like)

    def width(self) -> int:
        return max(self.inner.width(), self.features)

    def features_of(self, y: Tensor) -> Tensor:
        rows, c, r = y.shape
        phi = self.work.get("phi", (rows, c, self.features))
        if self.constant:
            phi[..., 0] = 1
        if self.lin:
            torch.mul(y, self.lin, out=phi[..., int(self.constant) : self.start])
        self.z = y if self.quad == 1 else torch.mul(y, self.quad, out=self.work.get("z", y.shape))
        torch.mul(self.z[..., :, None], self.z[..., None, :], out=phi[..., self.start :].unflatten(-1, (r, r)))
        return phi

    def forward(self, x_c: Tensor) -> Tensor:
        return self.features_of(self.inner.forward(x_c))

    def recompute(self, x_c: Tensor) -> Tensor:
        return self.features_of(self.inner.recompute(x_c))

    def backprop(self, x_c: Tensor, grad_phi: Tensor) -> Tensor:
        grad_outer = grad_phi[..., self.start :].unflatten(-1, (self.r, self.r))  # G, symmetric
        grad_y = torch.linalg.vecdot(grad_outer, self.z.unsqueeze(-2), out=self.work.get("grad_y", self.z.shape))
        grad_y.mul_(2 * self.quad)
        if self.lin:
            grad_y.add_(grad_phi[..., int(self.constant) : self.start], alpha=self.lin)
        return self.inner.backprop(x_c, grad_y)

    def grad_param(self) -> Tensor | None:
        return self.inner.grad_param()


def taylor_map(w: Tensor, like: Tensor, need_grad: bool) -> OuterFeatures:
    """BASED's map for ``chunked_kernel_attention``; ``w`` ``(H, 1, 1, d, r)``: ``x W`` as a degree-1 sketch."""
    r = w.shape[-1]
    inner = ChunkSketch(w, like, need_grad, square=False)
    return OuterFeatures(inner, like, constant=True, lin=r**-0.25, quad=(2 * r) ** -0.25)


def square_map(theta: Tensor | None, like: Tensor, need_grad: bool) -> OuterFeatures:
    """PolySketchFormer's map: Theta ``(H, 1, p/2, d, r)`` sketches the input; None: it is the sketch."""
    inner = Identity(like) if theta is None else ChunkSketch(theta, like, need_grad, square=False)
    return OuterFeatures(inner, like, constant=False, lin=0.0, quad=1.0)
