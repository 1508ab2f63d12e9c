"""Feature maps that approximate the polynomial kernel ``(q . k)^p`` and their errors (LLoPS, arXiv 2610.14219).

All maps act per head on ``q`` ``(H, Nq, d)`` and ``k`` ``(H, Nk, d)`` and return ``K_hat = phi_q(q) phi_k(k)^T``
``(H, Nq, Nk)``, a matrix of rank at most m:

- random sketch (PolySketchFormer-style, data independent): ``phi(x) = prod_j x G_j / m^(1/2)``, one Gaussian
  ``G_j`` shared by queries and keys, so ``E[phi(q) . phi(k)] = prod_j E[(q . g_j)(k . g_j)] = (q . k)^p``;
- LLoPS (rank t = 1, no squaring): ``phi(x) = prod_j x Theta_j``, separate learned Theta for queries and keys;
- 2-layer MLP: ``phi(x) = GELU(x W_1 + b_1) W_2 + b_2``, one per side, same output size m;
- the optimal rank-m approximation (Eckart-Young; the paper's Theorem 3.1): the truncated SVD of the exact
  kernel matrix, whose Frobenius error ``sum_{i > m} sigma_i^2`` no rank-m feature map can beat.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attention_zoo.llops import polynomial_sketch


def exact_kernel(q: Tensor, k: Tensor, p: int) -> Tensor:
    """``(q k^T)^p`` ``(H, Nq, Nk)``."""
    return (q @ k.transpose(-1, -2)).pow(p)


def sketch_features(x: Tensor, theta: Tensor) -> Tensor:
    """LLoPS's ``sum_r prod_j x Theta_{j,r}`` for ``x`` ``(H, N, d)`` and ``theta`` ``(H, t, p, d, m)``."""
    return polynomial_sketch(x.unsqueeze(0), theta, square=False).squeeze(0)  # (H, N, m)


def random_theta(heads: int, p: int, d: int, m: int, generator: torch.Generator) -> Tensor:
    """Gaussian ``(H, 1, p, d, m)`` scaled by ``m^(-1/(2p))``: the m products then average to ``(q . k)^p``."""
    return torch.randn(heads, 1, p, d, m, generator=generator, dtype=torch.float64) * m ** (-0.5 / p)


def random_sketch(q: Tensor, k: Tensor, p: int, m: int, generator: torch.Generator) -> Tensor:
    """One draw of the data-independent sketch's ``K_hat`` (same Theta for both sides, not trained)."""
    theta = random_theta(q.shape[0], p, q.shape[-1], m, generator)
    return sketch_features(q.double(), theta) @ sketch_features(k.double(), theta).transpose(-1, -2)


class LLoPSMap(nn.Module):
    """Learned ``Theta_q, Theta_k`` ``(H, 1, p, d, m)``, initialised at one random sketch (so fitting starts there)."""

    def __init__(self, heads: int, p: int, d: int, m: int, generator: torch.Generator):
        super().__init__()
        theta = random_theta(heads, p, d, m, generator).float()
        self.theta_q = nn.Parameter(theta.clone())
        self.theta_k = nn.Parameter(theta.clone())

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return sketch_features(q, self.theta_q) @ sketch_features(k, self.theta_k).transpose(-1, -2)


class HeadMLP(nn.Module):
    """Per-head 2-layer MLP ``d -> hidden -> m`` with GELU, inputs of unit norm."""

    def __init__(self, heads: int, d: int, hidden: int, m: int, generator: torch.Generator):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(heads, d, hidden, generator=generator))  # (H, d, hidden)
        self.b1 = nn.Parameter(torch.zeros(heads, 1, hidden))
        out_scale = (hidden * math.sqrt(m)) ** -0.5  # K_hat starts O(1)
        self.w2 = nn.Parameter(torch.randn(heads, hidden, m, generator=generator) * out_scale)  # (H, hidden, m)
        self.b2 = nn.Parameter(torch.zeros(heads, 1, m))

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.gelu(x @ self.w1 + self.b1) @ self.w2 + self.b2  # (H, N, m)


class MLPMap(nn.Module):
    """Separate query and key MLPs, same output size m."""

    def __init__(self, heads: int, d: int, hidden: int, m: int, generator: torch.Generator):
        super().__init__()
        self.mlp_q = HeadMLP(heads, d, hidden, m, generator)
        self.mlp_k = HeadMLP(heads, d, hidden, m, generator)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return self.mlp_q(q) @ self.mlp_k(k).transpose(-1, -2)


def fit_map(model: nn.Module, q: Tensor, k: Tensor, p: int, *, steps: int, batch: int, lr: float,
            generator: torch.Generator) -> list[float]:
    """Adam on the MSE between ``K_hat`` and ``(q . k)^p`` over ``batch`` random queries x ``batch`` random keys.

    The learning rate follows a cosine from ``lr`` to 0. Returns the loss every step.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    losses = []
    for _ in range(steps):
        rows = torch.randint(q.shape[1], (min(batch, q.shape[1]),), generator=generator)
        cols = torch.randint(k.shape[1], (min(batch, k.shape[1]),), generator=generator)
        q_b, k_b = q[:, rows], k[:, cols]  # (H, batch, d)
        loss = (model(q_b, k_b) - exact_kernel(q_b, k_b, p)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def predict(model: nn.Module, q: Tensor, k: Tensor) -> Tensor:
    """``K_hat`` in float64."""
    return model(q, k).double()


def truncated_svd(kernel: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """Best rank-m approximation per head (Eckart-Young) and the squared singular values it drops ``(H,)``."""
    u, s, vh = torch.linalg.svd(kernel.double(), full_matrices=False)
    approx = (u[..., :m] * s[..., None, :m]) @ vh[..., :m, :]
    return approx, s[..., m:].pow(2).sum(-1)


def rmae(approx: Tensor, exact: Tensor) -> float:
    """Relative mean absolute error ``sum |K_hat - K| / sum |K|`` over every head and pair."""
    return float((approx.double() - exact.double()).abs().sum() / exact.double().abs().sum())


def relative_frobenius(approx: Tensor, exact: Tensor) -> float:
    """``||K_hat - K||_F / ||K||_F`` over every head and pair."""
    return float((approx.double() - exact.double()).norm() / exact.double().norm())


def _update_factor(x: Tensor, theta: Tensor, j: int, partner: Tensor, target: Tensor, ridge: float) -> None:
    """Exact least squares for factor ``j`` of one side's ``theta`` ``(H, 1, p, d, m)``, the rest held fixed.

    ``K_hat = phi(x) partner^T`` is linear in ``theta_j``: with ``beta = prod_{j' != j} x theta_j'`` ``(H, N, m)``
    the normal equations are ``((X^T X) o (1 kron G)) vec(theta_j) = vec(x^T (beta o (T partner)))`` where
    ``X = x (row-wise Kronecker) beta`` ``(H, N, d m)`` and ``G = partner^T partner`` ``(H, m, m)``.
    """
    heads, _, p, d, m = theta.shape
    feats = torch.einsum("hnd,hjdm->hjnm", x, theta[:, 0])  # (H, p, N, m)
    others = [feats[:, i] for i in range(p) if i != j]
    beta = torch.stack(others).prod(0) if others else torch.ones_like(feats[:, 0])  # (H, N, m)
    design = (x.unsqueeze(-1) * beta.unsqueeze(-2)).flatten(2)  # (H, N, d m), index a * m + i
    normal = (design.transpose(-1, -2) @ design) * (partner.transpose(-1, -2) @ partner).repeat(1, d, d)
    rhs = torch.einsum("hna,hni->hai", x, beta * (target @ partner)).reshape(heads, d * m, 1)
    diag = normal.diagonal(dim1=-2, dim2=-1)
    normal = normal + ridge * diag.mean(-1, keepdim=True)[..., None] * torch.eye(d * m, dtype=normal.dtype)
    theta[:, 0, j] = torch.linalg.solve(normal, rhs).reshape(heads, d, m)


@torch.no_grad()
def als_refine(model: LLoPSMap, q: Tensor, k: Tensor, p: int, *, sweeps: int, ridge: float = 1e-8) -> list[float]:
    """Alternating least squares on every fit query x every fit key: each sweep solves each of the 2p factors of
    ``Theta_q, Theta_k`` exactly with the others fixed (the objective never rises, up to the ridge). Works in
    float64 on copies and writes the result back into ``model``; returns the relative Frobenius error on the fit
    pairs after each sweep."""
    q, k = q.double(), k.double()
    target = exact_kernel(q, k, p)  # (H, Nq, Nk)
    theta_q, theta_k = model.theta_q.detach().double().clone(), model.theta_k.detach().double().clone()
    errors = []
    for _ in range(sweeps):
        for j in range(p):
            _update_factor(q, theta_q, j, sketch_features(k, theta_k), target, ridge)
        for j in range(p):
            _update_factor(k, theta_k, j, sketch_features(q, theta_q), target.transpose(-1, -2), ridge)
        approx = sketch_features(q, theta_q) @ sketch_features(k, theta_k).transpose(-1, -2)
        errors.append(relative_frobenius(approx, target))
    model.theta_q.copy_(theta_q.to(model.theta_q.dtype))
    model.theta_k.copy_(theta_k.to(model.theta_k.dtype))
    return errors
