"""Feature maps for the polynomial factor ``(u . v)^2`` of the spherical Yat kernel, and SLAY's alternatives.

SLAY paper (arXiv 2602.04915), section 2.3.2, Table 1 and the appendix "Preliminaries: polynomial kernel
approximations". On unit rows ``u`` with ``x = u . v``, each map ``phi`` gives ``phi(u) . phi(v) ~ x^2``:

    exact             vec(u u^T)                                       d^2 features, exact
    anchor            P^-1/2 [(a_p . u)^2]_p, a_p random unit           >= 0, biased: E = (1 + 2 x^2) / (d (d + 2))
    random_maclaurin  P^-1/2 [(r_p . u)(s_p . u)]_p, Rademacher r, s    unbiased, signed (Kar & Karnick 2012)
    tensorsketch      irfft(rfft(CS_1 u) * rfft(CS_2 u)), CountSketch   unbiased, signed (Pham & Pagh 2013)
    nystrom           [(a_p . u)^2]_p (K_AA + lambda I)^-1/2            low-rank projection, signed

and the two reference estimators that drop the separate polynomial factor (the paper's appendix):

    laplace_only      PRFs with weights (C^2 / 4) w_r: ``sum_r (C^2/4) w_r exp(2 s_r x)``, i.e. the identity
                      ``x^2 / (C - 2x) = (C^2/4) int exp(-Cs) exp(2sx) ds - C/4 - x/2`` without its affine part
                      (as the reference ``yat_performer_laplace.py``): a kernel ~ 1 / (C - 2x), no ``x^2``.
    hadamard_shared   ``sqrt(w_r) (omega_i . u)^2 exp(sqrt(2 s_r) omega_i . u - s_r) / M``: one omega for both
                      factors, elementwise fusion; a positive map of a different kernel.

Polynomial maps are fused with SLAY's PRFs by the tensor product (``tensor_product_features``), m = R P M.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attention_zoo.slay import anchor_features, exact_poly_features, laguerre_nodes, positive_random_features
from attention_zoo.yat import unit

POLY_MAPS = ("exact", "anchor", "random_maclaurin", "tensorsketch", "nystrom")


def rademacher(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Independent +-1 entries."""
    return torch.randint(0, 2, shape, generator=generator).float() * 2 - 1


def random_maclaurin_features(u: Tensor, r: Tensor, s: Tensor) -> Tensor:
    """``P^-1/2 (u r^T) * (u s^T)`` ``(..., P)`` for projections ``r, s`` ``(..., P, d)``; unbiased for ``x^2``."""
    return (u @ r.mT) * (u @ s.mT) / math.sqrt(r.shape[-2])


def count_sketch_matrix(hashes: Tensor, signs: Tensor, size: int) -> Tensor:
    """The ``(d, size)`` CountSketch matrix: row ``i`` holds ``signs[i]`` in column ``hashes[i]``."""
    matrix = torch.zeros(hashes.shape[0], size)
    matrix[torch.arange(hashes.shape[0]), hashes] = signs
    return matrix


def tensor_sketch_features(u: Tensor, sketch_1: Tensor, sketch_2: Tensor) -> Tensor:
    """Degree-2 TensorSketch: circular convolution of two CountSketches ``(..., d, P)``; unbiased for ``x^2``."""
    size = sketch_1.shape[-1]
    spectrum = torch.fft.rfft(u @ sketch_1, dim=-1) * torch.fft.rfft(u @ sketch_2, dim=-1)
    return torch.fft.irfft(spectrum, n=size, dim=-1)


def nystrom_whitening(anchors: Tensor, reg: float) -> Tensor:
    """``(K_AA + reg I)^-1/2`` for ``K_AA = (A A^T)^2`` (float64 eigendecomposition, eigenvalues >= 1e-6)."""
    a = anchors.double()
    gram = (a @ a.t()).square() + reg * torch.eye(a.shape[0], dtype=torch.float64)
    values, vectors = torch.linalg.eigh(gram)
    return (vectors * values.clamp_min(1e-6).rsqrt()) @ vectors.t()


def nystrom_features(u: Tensor, anchors: Tensor, whitening: Tensor) -> Tensor:
    """``K(u, A) (K_AA + reg I)^-1/2`` ``(..., P)`` with ``K(u, a) = (u . a)^2``."""
    return (u @ anchors.t()).square() @ whitening.to(u.dtype)


def make_poly_map(name: str, dim: int, num_features: int, generator: torch.Generator, *,
                  nystrom_reg: float = 1e-3) -> Callable[[Tensor], Tensor]:
    """A polynomial map of unit rows ``(..., d) -> (..., P)`` with its random buffers drawn from ``generator``.

    ``exact`` ignores ``num_features`` (it has ``d^2``); anchors are random unit vectors (as ``slay.py``).
    """
    p = num_features
    if name == "exact":
        return exact_poly_features
    if name == "anchor":
        anchors = unit(torch.randn(p, dim, generator=generator))
        return lambda u: anchor_features(u, anchors)
    if name == "random_maclaurin":
        r, s = rademacher((p, dim), generator), rademacher((p, dim), generator)
        return lambda u: random_maclaurin_features(u, r, s)
    if name == "tensorsketch":
        sketches = [count_sketch_matrix(torch.randint(0, p, (dim,), generator=generator),
                                        rademacher((dim,), generator), p) for _ in range(2)]
        return lambda u: tensor_sketch_features(u, *sketches)
    if name == "nystrom":
        anchors = unit(torch.randn(p, dim, generator=generator))
        whitening = nystrom_whitening(anchors, nystrom_reg)
        return lambda u: nystrom_features(u, anchors, whitening)
    raise ValueError(f"poly map must be one of {', '.join(POLY_MAPS)}; got {name!r}")


def tensor_product_features(poly: Tensor, prf: Tensor) -> Tensor:
    """``concat_r vec(poly (x) prf_r)``: poly ``(B, H, N, P)``, weighted PRFs ``(B, H, N, R, M)`` -> ``(.., R P M)``."""
    return (poly[..., None, :, None] * prf[..., :, None, :]).flatten(-3)


def laplace_only_nodes(num_nodes: int, eps: float) -> tuple[Tensor, Tensor]:
    """Gauss-Laguerre ``(s_r, (C^2 / 4) w_r)``: the Laplace-only weights of the reference implementation."""
    nodes, weights = laguerre_nodes(num_nodes, eps)
    return nodes, weights * (2.0 + eps) ** 2 / 4


def hadamard_shared_features(u: Tensor, omega: Tensor, nodes: Tensor, weights: Tensor) -> Tensor:
    """``sqrt(w_r) (omega_i . u)^2 exp(sqrt(2 s_r) omega_i . u - s_r) / M`` ``(B, H, N, R M)``; omega (R, H, d, M)."""
    prf = positive_random_features(u, omega, nodes, weights)  # (B, H, N, R, M), includes sqrt(w_r) / sqrt(M)
    proj = torch.einsum("bhnd,rhdm->bhnrm", u, omega.float())  # (B, H, N, R, M)
    return (prf * proj.square() / math.sqrt(omega.shape[-1])).flatten(-2)
