"""cosFormer (Qin et al., arXiv 2202.08791): ReLU features with a cos re-weighting of the positions.

``w_ij = relu(q_i) . relu(k_j) cos(pi/2 (i - j) / M)``, normalised over j. With ``a_i = pi i / (2 M)``
the cosine splits, ``cos(a_i - a_j) = sin a_i sin a_j + cos a_i cos a_j``, so
``phi(x_i) = [relu(x_i) sin a_i, relu(x_i) cos a_i]`` (m = 2d) gives linear attention, O(n d^2);
causal via prefix sums. ``i`` counts the sequence's real tokens from 1 and ``M`` is its true length
(the number of real tokens), so padding changes neither; no 1/sqrt(d) (it cancels). Causal, as in the paper,
``M`` is still the whole sequence's length: an output depends on how many tokens follow, not on their values.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .kernel import float32_region, kernel_attention, naive_normalized_attention
from .registry import register


def positions_and_lengths(key_padding_mask: Tensor | None, batch: int, n: int,
                          device) -> tuple[Tensor, Tensor]:
    """1-based positions among real tokens ``(B, N)`` and true lengths ``M`` ``(B, 1)``, float32."""
    if key_padding_mask is None:
        key_padding_mask = torch.ones(batch, n, dtype=torch.bool, device=device)
    real = key_padding_mask.float()
    lengths = real.sum(-1, keepdim=True).clamp_min(1.0)
    positions = real.cumsum(-1).clamp_min(1.0)  # pads reuse the previous real position
    return positions, lengths


def cos_reweighted_features(x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
    """``[relu(x_i) sin a_i, relu(x_i) cos a_i]`` ``(B, H, N, 2d)`` in float32, ``a_i = pi i / (2 M)``."""
    with float32_region(x):
        positions, lengths = positions_and_lengths(key_padding_mask, x.shape[0], x.shape[-2], x.device)
        angle = (math.pi / 2 * positions / lengths)[:, None, :, None]  # (B, 1, N, 1)
        relu = torch.relu(x.float())
        return torch.cat([relu * torch.sin(angle), relu * torch.cos(angle)], dim=-1)


def naive_cosformer(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                    *, eps: float = 1e-6, causal: bool = False) -> Tensor:
    """Oracle: explicit ``relu(q_i) . relu(k_j) cos(pi/2 (i - j) / M)`` weights, row-normalised."""
    positions, lengths = positions_and_lengths(key_padding_mask, q.shape[0], q.shape[-2], q.device)
    gap = positions[:, :, None] - positions[:, None, :]  # (B, N, N)
    reweight = torch.cos(math.pi / 2 * gap / lengths[:, :, None])[:, None]  # (B, 1, N, N)
    weights = torch.relu(q.float()) @ torch.relu(k.float()).transpose(-1, -2) * reweight
    return naive_normalized_attention(weights, v, key_padding_mask, eps=eps, causal=causal)


@register("cosformer")
class CosFormerAttention(nn.Module):
    """cosFormer: ReLU linear attention re-weighted by ``cos(pi/2 (i - j) / M)``."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, eps: float = 1e-6, causal: bool = False, chunk_size: int = 256):
        super().__init__()
        self.eps, self.causal, self.chunk_size = eps, causal, chunk_size

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        phi_q = cos_reweighted_features(q, key_padding_mask)
        phi_k = cos_reweighted_features(k, key_padding_mask)
        return kernel_attention(phi_q, phi_k, v, key_padding_mask, eps=self.eps, causal=self.causal,
                                chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_cosformer(q, k, v, key_padding_mask, eps=self.eps, causal=self.causal)
