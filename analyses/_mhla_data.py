"""Teachers, sequences and function coefficients for the MHLA learning analysis (Yau et al., arXiv 2410.10101).

Sec. 4.1 (Fig. 1): a random MHLA teacher on Gaussian sequences. Sec. 4.2 (Fig. 2): the associative memory
``Z = [[k_1 .. k_d, q], [v_1 .. v_d, zeta]]`` (tokens are the ``2d``-dim columns) whose single head
``V = [[0, 0], [0, I]]``, ``Q = [[I, 0], [0, 0]]`` writes ``sum_j <q, k_j> v_j + |q|^2 zeta`` into the lower half
of the last column (the paper's readout ``sum_j <q, k_j> v_j`` plus the query token's own term).

Function coefficients (Eq. 13-15): ``y_hat_a = <p_a(Theta), H(Z)>`` with the deduplicated cubic features
``H(Z)_{(j<=k),l} = (Z Z^T)_{jk} z_{l,n}``, so ``p_a = W[(a,j),(k,l)] + W[(a,k),(j,l)]`` for ``j < k`` and
``W[(a,j),(j,l)]`` on the diagonal: two parametrisations compute the same function iff their ``p`` agree.
"""

from __future__ import annotations

import torch
from torch import Tensor

from analyses._mhla_model import MHLA

DTYPE = torch.float64


def random_mhla(dim: int, heads: int, generator: torch.Generator, std: float | None = None) -> MHLA:
    """An ``MHLA`` with ``V_h, Q_h ~ N(0, std^2)`` (default ``1/d``) drawn from ``generator``, in float64."""
    std = dim**-0.5 if std is None else std
    model = MHLA(dim, heads).to(DTYPE)
    with torch.no_grad():
        for weight in (model.values, model.queries):
            weight.copy_(torch.randn(weight.shape, generator=generator, dtype=DTYPE) * std)
    return model


def gaussian_sequences(count: int, dim: int, length: int, generator: torch.Generator) -> Tensor:
    """``(count, d, T)`` tokens ``z_t ~ N(0, I / T)`` so that ``Z Z^T ~ I`` (the model is 3-homogeneous in Z)."""
    return torch.randn(count, dim, length, generator=generator, dtype=DTYPE) / length**0.5


def memory_teacher(dim: int) -> MHLA:
    """The associative-memory head on ``2d``-dim tokens: ``V = [[0, 0], [0, I]]``, ``Q = [[I, 0], [0, 0]]``."""
    model = MHLA(2 * dim, 1).to(DTYPE)
    with torch.no_grad():
        model.values.zero_()
        model.queries.zero_()
        model.values[0, dim:, dim:] = torch.eye(dim, dtype=DTYPE)
        model.queries[0, :dim, :dim] = torch.eye(dim, dtype=DTYPE)
    return model


def random_orthogonal(count: int, dim: int, generator: torch.Generator) -> Tensor:
    """``(count, d, d)`` Haar-random orthogonal matrices (QR of a Gaussian, signs fixed by ``R``'s diagonal)."""
    q, r = torch.linalg.qr(torch.randn(count, dim, dim, generator=generator, dtype=DTYPE))
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def memory_sequences(count: int, dim: int, orthogonal_fraction: float, generator: torch.Generator) -> Tensor:
    """``(count, 2d, d + 1)`` memories; the first ``round(fraction * count)`` have orthonormal keys and values.

    The others have i.i.d. ``N(0, 1/d)`` keys and values (unit expected norm, like the orthonormal ones);
    ``q, zeta ~ N(0, I/d)`` everywhere. Orthonormal keys make ``sum_j k_j k_j^T = I``, which removes feature
    directions: all-orthogonal data is rank deficient (``lambda_min = 0``), a few Gaussian memories restore rank.
    """
    keys = torch.randn(count, dim, dim, generator=generator, dtype=DTYPE) * dim**-0.5  # (B, d, d): k_j columns
    values = torch.randn(count, dim, dim, generator=generator, dtype=DTYPE) * dim**-0.5
    orthogonal = int(round(orthogonal_fraction * count))
    keys[:orthogonal] = random_orthogonal(orthogonal, dim, generator)
    values[:orthogonal] = random_orthogonal(orthogonal, dim, generator)
    query, zeta = (torch.randn(count, dim, 1, generator=generator, dtype=DTYPE) * dim**-0.5 for _ in range(2))
    order = torch.randperm(count, generator=generator)
    z = torch.cat([torch.cat([keys, query], dim=-1), torch.cat([values, zeta], dim=-1)], dim=1)
    return z[order]  # (B, 2d, d + 1)


def function_coefficients(w: Tensor) -> Tensor:
    """``p(Theta)`` ``(d, psi, d)`` from ``W`` ``(d^2, d^2)``: coefficients of the deduplicated features."""
    d = round(w.shape[0] ** 0.5)
    blocks = w.reshape(d, d, d, d)  # (a, j, k, l)
    symmetric = blocks + blocks.transpose(1, 2)
    rows, cols = torch.triu_indices(d, d)
    p = symmetric[:, rows, cols, :].clone()  # (a, psi, l)
    p[:, rows == cols, :] /= 2
    return p


def coefficient_distance(w: Tensor, w_true: Tensor) -> float:
    """``||p(Theta_hat) - p(Theta)||_F``: distance between the functions two coefficient matrices compute."""
    w, w_true = (m.detach().to(DTYPE) for m in (w, w_true))
    return float((function_coefficients(w) - function_coefficients(w_true)).norm())
