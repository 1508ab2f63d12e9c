"""LLoPS: learnable low-rank polynomial sketch (Qin et al., arXiv 2610.14219, NeurIPS 2026).

The optimal size-m sketch of the degree-p polynomial kernel ``(q . k)^p`` is a linear projection of
``vec(x^{(x)p})``; approximating each of its m columns by a rank-t CP decomposition gives

    phi(x) = sum_{r=1..t} prod_{j=1..p} (x Theta_{j,r})        Theta_{j,r} in R^{d x m}

with separate Theta for queries and keys, at cost O(n d m p t) and never a d^p tensor. Options:
``square`` (``phi <- phi * phi``, non-negative weights, degree 2p), a constant feature and a learned
linear term (as in BASED). Normalised linear attention on these features, computed in float32.

Without the constant and linear term phi is homogeneous of degree p (2p squared), so q and k are first
rescaled by powers of two (``kernel.rescale_homogeneous``: per query, and per sequence for the keys) with
the eps rescaled to match: exact, and finite at any input scale (degree-8 features of |x| ~ 100 overflow
float32 unscaled). The oracle does the same.

``init="based"`` (or ``LLoPSAttention.from_based``) sets degree 2, rank 1, m = r^2 from a BASED
projection W: Theta_1 repeats each column of W r times, Theta_2 tiles W r times, the 1/sqrt(2 r)
scale is folded into both, plus the constant and the W / r^(1/4) linear term: exactly BASED.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor, nn

from ._chunked_attention import chunked_kernel_attention
from ._sketch import ChunkSketch, naive_polynomial_sketch, polynomial_sketch
from .based import BasedAttention, based_projection
from .kernel import (
    at_least_float32,
    float32_region,
    kernel_attention,
    naive_kernel_attention,
    rescale_homogeneous,
    values_and_ones,
)
from .registry import refuse_out_of_range, register


@register("llops")
class LLoPSAttention(nn.Module):
    """Learnable low-rank polynomial sketch attention (see module docstring)."""

    supports_causal = True
    quadratic = False
    option_ranges = {"degree": ">= 1", "features": ">= 1", "rank": ">= 1", "linear_features": ">= 0", "eps": "> 0",
                     "chunk_size": ">= 1"}

    def __init__(self, *, head_dim: int, num_heads: int, degree: int = 4, features: int = 64,
                 rank: int = 1, square: bool = True, constant: bool = False, linear_features: int = 0,
                 init: str = "random", eps: float = 1e-6, causal: bool = False, chunk_size: int = 256):
        super().__init__()
        refuse_out_of_range(type(self), degree=degree, features=features, rank=rank, linear_features=linear_features,
                            eps=eps, chunk_size=chunk_size)
        if init not in ("random", "based"):
            raise ValueError(f"llops init must be 'random' or 'based', got {init!r}")
        self.degree, self.features, self.rank, self.square = degree, features, rank, square
        self.constant, self.linear_features = constant, linear_features
        self.eps, self.causal, self.chunk_size = eps, causal, chunk_size
        shape = (num_heads, rank, degree, head_dim, features)
        self.theta_q = nn.Parameter(torch.randn(shape) / math.sqrt(head_dim))  # (H, t, p, d, m)
        self.theta_k = nn.Parameter(torch.randn(shape) / math.sqrt(head_dim))
        if linear_features:
            lin = (num_heads, head_dim, linear_features)
            self.linear_q = nn.Parameter(torch.randn(lin) / math.sqrt(head_dim))  # (H, d, l)
            self.linear_k = nn.Parameter(torch.randn(lin) / math.sqrt(head_dim))
        if init == "based":
            r = math.isqrt(features)
            self._check_based_shape(r)
            self.load_based_projections(based_projection(num_heads, head_dim, r),
                                        based_projection(num_heads, head_dim, r))

    def _check_based_shape(self, r: int) -> None:
        ok = (self.degree == 2 and self.rank == 1 and self.features == r * r and not self.square
              and self.constant and self.linear_features == r)
        if not ok:
            raise ValueError(
                f"BASED initialisation needs degree=2, rank=1, features=r^2, square=false, constant=true, "
                f"linear_features=r; got degree={self.degree}, rank={self.rank}, features={self.features}, "
                f"square={self.square}, constant={self.constant}, linear_features={self.linear_features}")

    @torch.no_grad()
    def load_based_projections(self, w_q: Tensor, w_k: Tensor) -> None:
        """Set Theta (and the linear term) from BASED projections ``(H, d, r)`` so phi equals BASED's."""
        r = w_q.shape[-1]
        self._check_based_shape(r)
        scale = (2 * r) ** -0.25
        for theta, lin, w in ((self.theta_q, self.linear_q, w_q), (self.theta_k, self.linear_k, w_k)):
            theta[:, 0, 0] = w.repeat_interleave(r, dim=-1) * scale  # column (a, b) -> W_a
            theta[:, 0, 1] = w.repeat(1, 1, r) * scale  # column (a, b) -> W_b
            lin.copy_(w / r**0.25)

    @classmethod
    def from_based(cls, based: BasedAttention) -> LLoPSAttention:
        """An LLoPS module computing exactly what ``based`` computes."""
        num_heads, head_dim, r = based.w_q.shape
        llops = cls(head_dim=head_dim, num_heads=num_heads, degree=2, features=r * r, rank=1, square=False,
                    constant=True, linear_features=r, eps=based.eps, causal=based.causal,
                    chunk_size=based.chunk_size)
        llops.load_based_projections(based.w_q, based.w_k)
        return llops

    def features_of(self, x: Tensor, which: str, sketch=polynomial_sketch) -> Tensor:
        """``phi_Q`` or ``phi_K`` (``which`` in {"q", "k"}) of ``x`` ``(B, H, N, d)``, at least float32."""
        theta = self.theta_q if which == "q" else self.theta_k
        with float32_region(x):
            x = at_least_float32(x)
            parts = [sketch(x, theta.to(x.dtype), self.square).to(x.dtype)]
            if self.linear_features:
                lin = self.linear_q if which == "q" else self.linear_k
                parts.insert(0, x @ lin.to(x.dtype))
            if self.constant:
                parts.insert(0, x.new_ones(x.shape[:-1] + (1,)))
            return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def homogeneous(self) -> bool:
        """phi(c x) = c^(p or 2p) phi(x): no constant or linear term."""
        return not (self.constant or self.linear_features)

    def rescaled(self, q: Tensor, k: Tensor, key_padding_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """``q', k', eps'`` in float32 (float64 kept), scaled by powers of two (module docstring)."""
        with float32_region(q):
            degree = self.degree * (2 if self.square else 1)
            return rescale_homogeneous(at_least_float32(q), at_least_float32(k), degree, self.eps, key_padding_mask)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if not self.homogeneous():
            return kernel_attention(self.features_of(q, "q"), self.features_of(k, "k"), v, key_padding_mask,
                                    eps=self.eps, causal=self.causal, chunk_size=self.chunk_size)
        q, k, eps = self.rescaled(q, k, key_padding_mask)
        if self.causal:
            return kernel_attention(self.features_of(q, "q"), self.features_of(k, "k"), v, key_padding_mask,
                                    eps=eps, causal=True, chunk_size=self.chunk_size)
        with float32_region(v):  # fused: no (N, m) tensor at all
            v1 = values_and_ones(at_least_float32(v), key_padding_mask)
            out = chunked_kernel_attention(q, k, v1, self.theta_q.to(q.dtype), self.theta_k.to(q.dtype),
                                           partial(ChunkSketch, square=self.square), eps=eps,
                                           key_padding_mask=key_padding_mask)
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Quadratic oracle: per-factor features, the explicit n x n weight matrix, normalised."""
        eps = self.eps
        if self.homogeneous():
            q, k, eps = self.rescaled(q, k, key_padding_mask)
        phi_q = self.features_of(q, "q", naive_polynomial_sketch)
        phi_k = self.features_of(k, "k", naive_polynomial_sketch)
        return naive_kernel_attention(phi_q, phi_k, v, key_padding_mask, eps=eps, causal=self.causal)
