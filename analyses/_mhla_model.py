"""MHLA in the paper's own parametrisation and its convex learner (Yau et al., arXiv 2410.10101).

Tokens are the columns of ``Z`` in R^{d x n} (batched ``(B, d, n)``); head ``h`` has ``V_h, Q_h`` in
R^{d x d}:

    Y(Z) = sum_h V_h Z (Z^T Q_h Z) = sum_h V_h (Z Z^T) Q_h Z        (Def. 2.1; O(n d^2 + H d^3))

and the prediction is the last column ``y_hat = sum_h V_h (Z Z^T) Q_h z_n``.

Algorithm 1: ``y_hat_a = <W, X_a>`` with ``W = sum_h vec(V_h) vec(Q_h)^T`` in R^{d^2 x d^2} (rows
``(a, j)``, columns ``(k, l)``) and the cubic feature ``X(Z)_{j,(k,l)} = (Z Z^T)_{jk} z_{l,n}`` (d x d^2,
independent of n). Ordinary least squares for ``W``, then the SVD ``W = sum_h u_h v_h^T`` folds back
into at most d^2 heads. Certificate (Lemma 2.3): ``lambda_min(mean_i H(Z_i) H(Z_i)^T) > 0`` with the
deduplicated features ``H(Z)_{(j<=k),l} = (Z Z^T)_{jk} z_{l,n}`` (psi = d^2 (d + 1) / 2 of them).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def explicit_mhla(z: Tensor, values: Tensor, queries: Tensor) -> Tensor:
    """``sum_h V_h Z (Z^T Q_h Z)`` with the ``(B, H, n, n)`` attention matrices built explicitly."""
    scores = z.transpose(-1, -2).unsqueeze(1) @ queries @ z.unsqueeze(1)  # (B, H, n, n)
    return (values @ z.unsqueeze(1) @ scores).sum(dim=1)  # (B, d, n)


class MHLA(nn.Module):
    """``Y = sum_h V_h (Z Z^T) Q_h Z`` on ``z`` ``(B, d, n)``; ``V_h, Q_h ~ N(0, init_std^2)`` (1/d)."""

    def __init__(self, dim: int, num_heads: int, init_std: float | None = None):
        super().__init__()
        std = dim**-0.5 if init_std is None else init_std
        self.values = nn.Parameter(torch.randn(num_heads, dim, dim) * std)  # (H, d, d): V_h
        self.queries = nn.Parameter(torch.randn(num_heads, dim, dim) * std)  # (H, d, d): Q_h

    def mixing(self, z: Tensor) -> Tensor:
        """``sum_h V_h (Z Z^T) Q_h`` ``(B, d, d)``: the whole layer as one matrix per sequence."""
        gram = z @ z.transpose(-1, -2)  # (B, d, d)
        return (self.values @ gram.unsqueeze(1) @ self.queries).sum(dim=1)

    def forward(self, z: Tensor) -> Tensor:
        return self.mixing(z) @ z  # (B, d, n)

    def predict_last(self, z: Tensor) -> Tensor:
        """``y_hat = sum_h V_h (Z Z^T) Q_h z_n`` ``(B, d)``."""
        return (self.mixing(z) @ z[..., -1:]).squeeze(-1)

    def coefficients(self) -> Tensor:
        """``W = sum_h vec(V_h) vec(Q_h)^T`` ``(d^2, d^2)``, rank <= H."""
        return self.values.flatten(1).t() @ self.queries.flatten(1)

    @classmethod
    def from_coefficients(cls, w: Tensor, rtol: float = 1e-8) -> MHLA:
        """Heads from the SVD of ``W``: ``V_h, Q_h`` = ``sqrt(sigma_h) u_h, sqrt(sigma_h) v_h`` folded."""
        d = round(w.shape[0] ** 0.5)
        u, sigma, vh = torch.linalg.svd(w)
        keep = max(1, int((sigma > rtol * sigma[0]).sum()))
        root = sigma[:keep].sqrt()
        model = cls(d, keep).to(w.dtype)
        with torch.no_grad():
            model.values.copy_((u[:, :keep] * root).t().reshape(keep, d, d))
            model.queries.copy_((vh[:keep] * root[:, None]).reshape(keep, d, d))
        return model


def cubic_features(z: Tensor) -> Tensor:
    """Algorithm 1's ``X(Z)_{j,(k,l)} = (Z Z^T)_{jk} z_{l,n}`` ``(B, d, d^2)`` for ``z`` ``(B, d, n)``."""
    gram = z @ z.transpose(-1, -2)  # (B, d, d)
    return (gram.unsqueeze(-1) * z[:, None, None, :, -1]).flatten(-2)


def fit_mhla(z: Tensor, y: Tensor, rtol: float = 1e-8) -> MHLA:
    """Algorithm 1: least squares of last-column targets ``y`` ``(N, d)`` on cubic features, then SVD.

    The features repeat ``(j, k)`` and ``(k, j)``, so the minimum-norm solution (pseudo-inverse) is taken.
    """
    d = z.shape[1]
    design = cubic_features(z).flatten(1)  # (N, d^3)
    solution = torch.linalg.pinv(design) @ y  # (d^3, d): column a holds W[(a, j), (k, l)]
    return MHLA.from_coefficients(solution.t().reshape(d * d, d * d), rtol=rtol)


def identifiability_certificate(z: Tensor) -> Tensor:
    """``lambda_min(Lambda_D)``, ``Lambda_D = mean_i H(Z_i) H(Z_i)^T`` on deduplicated cubic features."""
    d = z.shape[1]
    rows, cols = torch.triu_indices(d, d)
    gram = z @ z.transpose(-1, -2)  # (N, d, d)
    dedup = (gram[:, rows, cols].unsqueeze(-1) * z[:, None, :, -1]).flatten(1)  # (N, d^2 (d + 1) / 2)
    second_moment = dedup.t() @ dedup / z.shape[0]
    return torch.linalg.eigvalsh(second_moment)[0]
