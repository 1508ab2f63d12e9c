"""Iterative Moore-Penrose pseudo-inverse shared by Nystromformer and Skyformer.

Razavi et al. (2014) iteration, as in Nystromformer (Xiong et al., arXiv 2102.03902, eq. 13)::

    Z_0 = A^T / s,    Z <- Z (13 I - A Z (15 I - A Z (7 I - A Z))) / 4

Initial scale ``s``: ``"original"`` is the reference code's single max column sum over the whole batch
(every matrix in the batch shares it, so one sample's result depends on the others); ``"per_matrix"``
is the paper's ``||A||_1 ||A||_inf`` for each matrix.
"""

from __future__ import annotations

import torch
from torch import Tensor

PINV_INITS = ("original", "per_matrix")


def check_pinv_init(init: str, owner: str) -> None:
    """Raise ``ValueError`` naming the valid initialisations."""
    if init not in PINV_INITS:
        raise ValueError(f"{owner} pinv_init must be one of {PINV_INITS}, got {init!r}")


def newton_schulz_pinv(mat: Tensor, iterations: int = 6, init: str = "original") -> Tensor:
    """Approximate ``pinv(mat)`` for ``mat`` ``(..., c, c)`` by ``iterations`` Newton-Schulz steps."""
    check_pinv_init(init, "newton_schulz_pinv")
    eye = torch.eye(mat.shape[-1], dtype=mat.dtype, device=mat.device)
    col_sums = mat.abs().sum(-2)  # (..., c)
    if init == "original":
        scale = col_sums.max()
    else:
        row_sums = mat.abs().sum(-1)
        scale = (col_sums.amax(-1) * row_sums.amax(-1))[..., None, None]
    z = mat.transpose(-1, -2) / scale
    for _ in range(iterations):
        az = mat @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z
