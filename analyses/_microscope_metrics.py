"""What the microscope measures on one head's ``L x L`` attention matrix (real tokens only).

Rows may hold negative weights (Nystromformer's pseudo-inverse, a signed feature map): entropy and top-k mass are
taken on ``|a_ij| / sum_j |a_ij|``, and ``negative_mass`` says how much of a row's weight is negative.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

TINY = 1e-30


def row_distribution(a: Tensor) -> Tensor:
    """``|a| / sum_j |a|`` per row ``(..., L, L)`` in float64 (an all-zero row stays zero)."""
    a = a.double().abs()
    return a / a.sum(-1, keepdim=True).clamp_min(TINY)


def row_entropy(a: Tensor) -> Tensor:
    """Entropy (nats) of each row's distribution ``(..., L)``; between 0 and ``log L``."""
    p = row_distribution(a)
    return -(p * p.clamp_min(TINY).log()).sum(-1)


def top_k_mass(a: Tensor, k: int = 8) -> Tensor:
    """Share of each row's absolute weight on its ``k`` largest entries ``(..., L)``."""
    p = row_distribution(a)
    return p.topk(min(k, p.shape[-1]), dim=-1).values.sum(-1)


def negative_mass(a: Tensor) -> Tensor:
    """Share of each row's absolute weight that is negative ``(..., L)``."""
    a = a.double()
    return (-a).clamp_min(0).sum(-1) / a.abs().sum(-1).clamp_min(TINY)


def relative_frobenius(a: Tensor, reference: Tensor) -> Tensor:
    """``||a - reference||_F / ||reference||_F`` per matrix ``(...)``."""
    a, reference = a.double(), reference.double()
    return (a - reference).flatten(-2).norm(dim=-1) / reference.flatten(-2).norm(dim=-1).clamp_min(TINY)


def effective_rank(a: Tensor) -> Tensor:
    """``exp`` of the entropy of the normalised singular values (Roy & Vetterli 2007) per matrix ``(...)``."""
    s = torch.linalg.svdvals(a.double())
    p = s / s.sum(-1, keepdim=True).clamp_min(TINY)
    return torch.exp(-(p * p.clamp_min(TINY).log()).sum(-1))


def head_metrics(a: Tensor, softmax: Tensor, k: int = 8) -> list[dict[str, float]]:
    """Per head of ``a`` and the softmax matrix ``(H, L, L)`` of the same q, k: one dict of scalars each."""
    length = a.shape[-1]
    log_l = math.log(length) if length > 1 else 1.0
    entropy, entropy_sm = row_entropy(a).mean(-1), row_entropy(softmax).mean(-1)
    values = {
        "entropy": entropy, "entropy_softmax": entropy_sm,
        "entropy_norm": entropy / log_l, "entropy_norm_softmax": entropy_sm / log_l,
        "top_k_mass": top_k_mass(a, k).mean(-1), "top_k_mass_softmax": top_k_mass(softmax, k).mean(-1),
        "rel_error": relative_frobenius(a, softmax),
        "eff_rank": effective_rank(a), "eff_rank_softmax": effective_rank(softmax),
        "negative_mass": negative_mass(a).mean(-1),
    }
    return [{name: float(v[h]) for name, v in values.items()} for h in range(a.shape[0])]
