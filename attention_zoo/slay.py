"""SLAY: spherical linearised attention with the Yat kernel (arXiv 2602.04915, Algorithm 1).

Target (see ``yat.py``): ``K = x^2 / (C - 2 x)``, ``x = q^ . k^`` (unit rows, float32), ``C = 2 + eps``.
Bernstein/Laplace: ``1 / (C - 2 x) = int_0^inf exp(-s C) exp(2 s x) ds``; R-node Gauss-Laguerre
(nodes ``t_r``, weights ``a_r``) gives ``K ~ sum_r w_r x^2 exp(2 s_r x)`` with ``s_r = t_r / C``,
``w_r = a_r / C``. Per node, the product kernel gets the tensor product of two non-negative maps:

    phi_poly(u) = [(a_p . u)^2]_p / sqrt(P)                       anchors a_p: random unit vectors
    phi_prf(u; s) = [exp(sqrt(2 s) w_i . u - s)]_i / sqrt(M)       w_i ~ N(0, I): E = exp(2 s u . v)
    Psi(u) = concat_r sqrt(w_r) vec(phi_poly(u) (x) phi_prf(u; s_r))      m = R P M features

and ``out = Psi(Q) (Psi(K)^T V) / (Psi(Q) Psi(K)^T 1 + delta)``, O(n m d), causal by chunked prefix sums;
non-causal on token chunks whose features are recomputed in backward (``SlayChunkMap``): O(n d) memory.
PRF exponents are clamped to [-20, 20] as in the reference (mlnomadpy/slay). Anchor features are biased
(the paper's Table 1 says so): ``E[phi_poly(u) . phi_poly(v)] = (1 + 2 x^2) / (d (d + 2))``, not ``x^2``;
``poly="exact"`` uses ``vec(u u^T)`` (d^2 features, unbiased) for ablations.

Defaults are the paper's training configuration (its Table of attention parameters and the reference
``src/config.py``): M = 16 PRF features, P = 8 anchors, R = 2 nodes, eps = 1e-3, so m = 256 features
per head at head_dim 32 -- the budget of the PyTorch LRA Performer runs (256 random features).
The random buffers (omega per node and head, anchors shared by heads) are drawn once from ``seed``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from ._chunked_attention import chunked_kernel_attention
from .kernel import at_least_float32, float32_region, kernel_attention, naive_normalized_attention, values_and_ones
from .registry import register
from .yat import naive_yat, unit

POLY_MAPS = ("anchor", "exact")
EXP_CLAMP = 20.0


def laguerre_nodes(num_nodes: int, eps: float) -> tuple[Tensor, Tensor]:
    """Gauss-Laguerre nodes and weights rescaled to ``int_0^inf exp(-s C) h(s) ds``: ``(s_r, w_r)``."""
    t, a = np.polynomial.laguerre.laggauss(num_nodes)
    c = 2.0 + eps
    return torch.tensor(t / c, dtype=torch.float32), torch.tensor(a / c, dtype=torch.float32)


def anchor_features(u: Tensor, anchors: Tensor) -> Tensor:
    """``[(a_p . u)^2]_p / sqrt(P)`` for unit rows ``u`` ``(B, H, N, d)`` and anchors ``(P, d)``."""
    return (u @ anchors.float().t()).square() / math.sqrt(anchors.shape[0])


def exact_poly_features(u: Tensor) -> Tensor:
    """``vec(u u^T)`` ``(B, H, N, d^2)``: ``phi(u) . phi(v) = (u . v)^2`` exactly."""
    return (u.unsqueeze(-1) * u.unsqueeze(-2)).flatten(-2)


def poly_features(u: Tensor, anchors: Tensor | None) -> Tensor:
    """Anchor features, or ``vec(u u^T)`` when there are no anchors (``poly="exact"``)."""
    return exact_poly_features(u) if anchors is None else anchor_features(u, anchors)


def positive_random_features(u: Tensor, omega: Tensor, nodes: Tensor, weights: Tensor) -> Tensor:
    """``sqrt(w_r) exp(sqrt(2 s_r) omega_r . u - s_r) / sqrt(M)`` ``(B, H, N, R, M)``; omega ``(R, H, d, M)``."""
    nodes, weights = nodes.float(), weights.float()  # float32 even if the module was cast to bf16
    proj = torch.einsum("bhnd,rhdm->bhnrm", u, omega.float())  # (B, H, N, R, M)
    arg = proj * (2 * nodes).sqrt()[:, None] - nodes[:, None]
    return arg.clamp(-EXP_CLAMP, EXP_CLAMP).exp() * (weights.sqrt()[:, None] / math.sqrt(omega.shape[-1]))


def quadrature_yat_kernel(x: Tensor, eps: float, num_nodes: int) -> Tensor:
    """The discretised kernel ``sum_r w_r x^2 exp(2 s_r x)`` that exact poly features estimate unbiasedly."""
    nodes, weights = laguerre_nodes(num_nodes, eps)
    return sum(float(w) * x * x * torch.exp(2 * float(s) * x) for s, w in zip(nodes, weights))


def exact_spherical_yat(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                        eps: float = 1e-3, delta: float = 1e-6, causal: bool = False) -> Tensor:
    """The kernel SLAY approximates: exact spherical Yat attention (``yat.naive_yat``)."""
    return naive_yat(q, k, v, key_padding_mask, eps=eps, delta=delta, causal=causal)


def naive_slay(q: Tensor, k: Tensor, v: Tensor, omega: Tensor, anchors: Tensor | None, nodes: Tensor,
               weights: Tensor, key_padding_mask: Tensor | None = None, *, delta: float = 1e-6,
               causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weights ``sum_r <poly_q, poly_k> <prf_q,r, prf_k,r>``.

    Uses ``<a (x) b, c (x) d> = <a, c> <b, d>`` instead of the fused features (``anchors=None``: exact poly).
    """
    with float32_region(q):
        q_hat, k_hat = unit(q), unit(k)
        poly_weights = poly_features(q_hat, anchors) @ poly_features(k_hat, anchors).transpose(-1, -2)
        prf_q = positive_random_features(q_hat, omega, nodes, weights).transpose(-2, -3)  # (B, H, R, N, M)
        prf_k = positive_random_features(k_hat, omega, nodes, weights).transpose(-2, -3)
        exp_weights = (prf_q @ prf_k.transpose(-1, -2)).sum(dim=-3)  # (B, H, N, N): sum over nodes
        return naive_normalized_attention(poly_weights * exp_weights, v, key_padding_mask, eps=delta,
                                          causal=causal)


class SlayChunkMap:
    """``SlayAttention.features`` as a chunk map of ``chunked_kernel_attention`` (``ChunkMap`` there): the
    ``(N, R P M)`` features exist one token chunk at a time, forward and backward. Backward runs autograd
    through one chunk's features (the same operations as ``features``); the random buffers take no gradient.
    """

    def __init__(self, module: SlayAttention, like: Tensor):
        self.module, self.batch, self.heads = module, like.shape[0], like.shape[1]
        self.features = module.num_features

    def width(self) -> int:
        return self.features

    def _features(self, x_c: Tensor) -> Tensor:
        c, d = x_c.shape[1:]
        phi = self.module.features(x_c.view(self.batch, self.heads, c, d))  # (B, H, C, m)
        return phi.reshape(self.batch * self.heads, c, self.features).to(x_c.dtype)

    def forward(self, x_c: Tensor) -> Tensor:
        return self._features(x_c)

    def recompute(self, x_c: Tensor) -> Tensor:
        with torch.enable_grad():
            self.x = x_c.detach().requires_grad_()
            self.phi = self._features(self.x)
        return self.phi.detach()

    def backprop(self, x_c: Tensor, grad_phi: Tensor) -> Tensor:
        (grad,) = torch.autograd.grad(self.phi, self.x, grad_phi)
        self.x = self.phi = None
        return grad

    def grad_param(self) -> Tensor:
        raise RuntimeError("SLAY's feature map has no trainable parameter")


@register("slay")
class SlayAttention(nn.Module):
    """SLAY: anchor x positive-random-feature tensor products per Gauss-Laguerre node, normalised."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, num_heads: int, num_prf_features: int = 16,
                 num_poly_features: int = 8, num_quadrature_nodes: int = 2, poly: str = "anchor",
                 eps: float = 1e-3, delta: float = 1e-6, seed: int = 0, causal: bool = False,
                 chunk_size: int = 256):
        super().__init__()
        if poly not in POLY_MAPS:
            raise ValueError(f"slay poly must be one of {', '.join(POLY_MAPS)}; got {poly!r}")
        if min(num_prf_features, num_poly_features, num_quadrature_nodes) < 1 or eps <= 0:
            raise ValueError("slay needs num_prf_features, num_poly_features, num_quadrature_nodes >= 1 "
                             f"and eps > 0; got {num_prf_features}, {num_poly_features}, "
                             f"{num_quadrature_nodes}, eps={eps}")
        self.poly, self.eps, self.delta = poly, eps, delta
        self.causal, self.chunk_size = causal, chunk_size
        generator = torch.Generator().manual_seed(seed)
        omega = torch.randn(num_quadrature_nodes, num_heads, head_dim, num_prf_features, generator=generator)
        anchors = unit(torch.randn(num_poly_features, head_dim, generator=generator))
        self.register_buffer("omega", omega)  # (R, H, d, M)
        self.register_buffer("anchors", anchors if poly == "anchor" else None)  # (P, d)
        nodes, weights = laguerre_nodes(num_quadrature_nodes, eps)
        self.register_buffer("nodes", nodes, persistent=False)  # (R,) s_r
        self.register_buffer("weights", weights, persistent=False)  # (R,) w_r

    @property
    def num_features(self) -> int:
        """m = R P M (P = d^2 for exact poly features)."""
        r, _, d, m = self.omega.shape
        return r * m * (self.anchors.shape[0] if self.anchors is not None else d * d)

    def features(self, x: Tensor) -> Tensor:
        """``Psi(x)`` ``(B, H, N, R P M)`` in float32 (non-negative)."""
        with float32_region(x):
            u = unit(x)
            poly = poly_features(u, self.anchors)  # (B, H, N, P)
            prf = positive_random_features(u, self.omega, self.nodes, self.weights)  # (B, H, N, R, M)
            return (poly[..., None, :, None] * prf[..., :, None, :]).flatten(-3)  # (B, H, N, R * P * M)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if not self.causal:  # fused: the (N, m) features per token chunk only (SlayChunkMap)
            with float32_region(v):
                q, k = at_least_float32(q), at_least_float32(k)
                v1 = values_and_ones(at_least_float32(v), key_padding_mask)
                out = chunked_kernel_attention(q, k, v1, None, None, lambda _, like, __: SlayChunkMap(self, like),
                                               eps=self.delta, key_padding_mask=key_padding_mask)
            return out.to(v.dtype)
        return kernel_attention(self.features(q), self.features(k), v, key_padding_mask, eps=self.delta,
                                causal=self.causal, chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's random buffers."""
        return naive_slay(q, k, v, self.omega, self.anchors, self.nodes, self.weights, key_padding_mask,
                          delta=self.delta, causal=self.causal)
