"""Skyformer (Chen et al., arXiv 2111.00035): Gaussian-kernel attention by symmetrised Nystrom.

Kernel ``k(x, y) = exp(-|x - y|^2 / 2)`` on ``x = q d^(-1/4)``, ``y = k d^(-1/4)``; exact output
``kappa(Q, K) V`` (unnormalised, as in the paper). ``[Q; K]`` (2n rows) is one PSD kernel matrix: sample
``m`` landmark rows ``S`` uniformly from the real rows (half from Q, half from K), then::

    Q^ = kappa(Q, S),  K^ = kappa(K, S),  W = kappa(S, S) + lambda I,  D = rowsum(W)
    out = Q^ [D^(-1/2) pinv(D^(-1/2) W D^(-1/2)) D^(-1/2) K^T] V          (pads of K^, V zeroed)

``pinv`` is 6 Newton-Schulz steps (``_pinv.py``); O(n m d + m^3); not causal. The product runs in
token chunks, recomputed in backward (``_chunked_gaussian.py``): O(n d) memory, not O(n m). Landmarks are a fresh
sample per training call and a fixed sample (seeded by ``seed``) in evaluation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._chunked_gaussian import chunked_gaussian_nystrom
from ._pinv import check_pinv_init, newton_schulz_pinv
from .kernel import float32_region
from .nystrom import masked_values
from .registry import register


def gaussian_kernel(x: Tensor, y: Tensor) -> Tensor:
    """``exp(-|x_i - y_j|^2 / 2)`` ``(..., N, M)`` for scaled ``x`` ``(..., N, D)``, ``y`` ``(..., M, D)``."""
    x_sq, y_sq = x.square().sum(-1, keepdim=True) / 2, y.square().sum(-1)[..., None, :] / 2
    half_sq_dist = x_sq + y_sq - x @ y.transpose(-1, -2)
    return torch.exp(-half_sq_dist.clamp_min(0.0))


def exact_gaussian_kernel(q: Tensor, k: Tensor) -> Tensor:
    """The kernel Skyformer approximates, ``(B, H, N, N)`` in float64."""
    scale = q.shape[-1] ** -0.25
    return gaussian_kernel(scale * q.double(), scale * k.double())


def gaussian_kernel_attention(q: Tensor, k: Tensor, v: Tensor,
                              key_padding_mask: Tensor | None = None) -> Tensor:
    """The exact target ``kappa(Q, K) V`` over real keys, float64."""
    weights = exact_gaussian_kernel(q, k)
    if key_padding_mask is not None:
        weights = weights * key_padding_mask[:, None, None, :]
    return weights @ v.double()


def landmark_indices(key_padding_mask: Tensor | None, batch: int, n: int, num_landmarks: int,
                     generator: torch.Generator | None = None, device=None) -> Tensor:
    """``(B, m)`` row indices ``floor(L u)``: one ``u ~ U[0, 1)^m`` for the batch, ``L`` the true lengths."""
    if key_padding_mask is None:
        lengths = torch.full((batch,), n, dtype=torch.float64, device=device)
    else:
        lengths = key_padding_mask.sum(-1).double()
    u = torch.rand(num_landmarks, generator=generator, dtype=torch.float64).to(lengths.device)
    idx = torch.floor(lengths[:, None] * u[None, :]).long()
    return torch.minimum(idx, (lengths.long() - 1).clamp_min(0)[:, None])  # (B, m)


def gather_rows(x: Tensor, indices: Tensor) -> Tensor:
    """Rows ``indices`` ``(B, m)`` of every head of ``x`` ``(B, H, N, D)`` -> ``(B, H, m, D)``."""
    return x.gather(-2, indices[:, None, :, None].expand(x.shape[0], x.shape[1], -1, x.shape[-1]))


def skyformer_parts(q: Tensor, k: Tensor, key_padding_mask: Tensor | None, indices: Tensor, *,
                    regularization: float = 0.1, pinv_iterations: int = 6,
                    pinv_init: str = "original") -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Scaled (pads zeroed) ``q``, ``k`` ``(B, H, N, d)``, landmarks ``S`` ``(B, H, m, d)`` and the middle
    matrix ``M = D^(-1/2) P D^(-1/2)`` ``(B, H, m, m)``, float32; indices[:, :m // 2] pick Q rows."""
    scale = q.shape[-1] ** -0.25
    q, k = q.float() * scale, k.float() * scale
    if key_padding_mask is not None:
        real = key_padding_mask[:, None, :, None]
        q, k = q.masked_fill(~real, 0.0), k.masked_fill(~real, 0.0)  # pads may hold anything
    half = indices.shape[-1] // 2
    landmarks = torch.cat([gather_rows(q, indices[:, :half]), gather_rows(k, indices[:, half:])], dim=-2)
    eye = torch.eye(landmarks.shape[-2], device=q.device)
    w = gaussian_kernel(landmarks, landmarks) + regularization * eye  # (B, H, m, m)
    d_inv_sqrt = w.sum(-1).rsqrt()  # (B, H, m)
    w_normalised = d_inv_sqrt[..., :, None] * w * d_inv_sqrt[..., None, :]
    p = newton_schulz_pinv(w_normalised, pinv_iterations, pinv_init)
    return q, k, landmarks, d_inv_sqrt[..., :, None] * p * d_inv_sqrt[..., None, :]


def skyformer_factors(q: Tensor, k: Tensor, key_padding_mask: Tensor | None, indices: Tensor,
                      **options) -> tuple[Tensor, Tensor]:
    """``Q^`` and ``K^ M`` ``(B, H, N, m)`` (pads' rows zero), float32: the oracle's factors."""
    q, k, landmarks, middle = skyformer_parts(q, k, key_padding_mask, indices, **options)
    right = gaussian_kernel(k, landmarks) @ middle
    if key_padding_mask is not None:
        right = right.masked_fill(~key_padding_mask[:, None, :, None], 0.0)
    return gaussian_kernel(q, landmarks), right


def naive_skyformer(q: Tensor, k: Tensor, v: Tensor, indices: Tensor, key_padding_mask: Tensor | None = None,
                    **options) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` matrix ``Q^ D^(-1/2) P D^(-1/2) K^T`` times the values."""
    q_hat, right = skyformer_factors(q, k, key_padding_mask, indices, **options)
    weights = q_hat @ right.transpose(-1, -2)  # (B, H, N, N)
    return (weights @ masked_values(v, key_padding_mask)).to(v.dtype)


@register("skyformer")
class SkyformerAttention(nn.Module):
    """Skyformer: symmetrised Nystrom approximation of Gaussian-kernel attention (unnormalised)."""

    contract_options = {"num_landmarks": 8}  # small, so contract tests see the structure

    supports_causal = False
    quadratic = False

    def __init__(self, *, num_landmarks: int = 128, regularization: float = 0.1, pinv_iterations: int = 6,
                 pinv_init: str = "original", seed: int | None = None, causal: bool = False):
        super().__init__()
        if causal:
            raise ValueError("skyformer cannot be causal: the landmarks are sampled from the whole sequence")
        if num_landmarks < 2 or pinv_iterations < 0 or regularization < 0:
            raise ValueError("skyformer needs num_landmarks >= 2, pinv_iterations >= 0, regularization >= 0")
        check_pinv_init(pinv_init, "skyformer")
        self.num_landmarks, self.regularization, self.causal = num_landmarks, regularization, causal
        self.pinv_iterations, self.pinv_init = pinv_iterations, pinv_init
        self.seed = int(torch.randint(2**31 - 1, ())) if seed is None else int(seed)

    def get_extra_state(self) -> dict:
        return {"seed": self.seed}

    def set_extra_state(self, state: dict) -> None:
        self.seed = state["seed"]

    def landmarks_for(self, q: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """A fresh sample in training; in evaluation the same sample for the same true lengths."""
        generator = None if self.training else torch.Generator().manual_seed(self.seed)
        return landmark_indices(key_padding_mask, q.shape[0], q.shape[-2], self.num_landmarks, generator,
                                q.device)

    def options(self) -> dict:
        return {"regularization": self.regularization, "pinv_iterations": self.pinv_iterations,
                "pinv_init": self.pinv_init}

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        indices = self.landmarks_for(q, key_padding_mask)
        with float32_region(v):
            q, k, landmarks, middle = skyformer_parts(q, k, key_padding_mask, indices, **self.options())
            out = chunked_gaussian_nystrom(q, k, masked_values(v, key_padding_mask), landmarks, middle)
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's landmarks (identical to forward's in evaluation)."""
        indices = self.landmarks_for(q, key_padding_mask)
        with float32_region(v):
            return naive_skyformer(q, k, v, indices, key_padding_mask, **self.options())
