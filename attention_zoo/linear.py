"""Linear Transformer (Katharopoulos et al., arXiv 2006.16236): ``phi(x) = elu(x) + 1``, normalised.

``out_i = phi(q_i)^T sum_j phi(k_j) v_j^T / (phi(q_i)^T sum_j phi(k_j) + eps)``, O(n d^2).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .kernel import float32_region, kernel_attention, naive_kernel_attention
from .registry import register


def elu_feature_map(x: Tensor) -> Tensor:
    """``elu(x) + 1`` in float32 (strictly positive)."""
    with float32_region(x):
        return F.elu(x.float()) + 1.0


def naive_linear(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                 *, eps: float = 1e-6, causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weights ``phi(q_i) . phi(k_j)``, row-normalised."""
    return naive_kernel_attention(elu_feature_map(q), elu_feature_map(k), v, key_padding_mask,
                                  eps=eps, causal=causal)


@register("linear")
class LinearAttention(nn.Module):
    """Linear attention with the elu+1 feature map; ``eps`` guards the denominator."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, eps: float = 1e-6, causal: bool = False, chunk_size: int = 256):
        super().__init__()
        self.eps, self.causal, self.chunk_size = eps, causal, chunk_size

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return kernel_attention(elu_feature_map(q), elu_feature_map(k), v, key_padding_mask,
                                eps=self.eps, causal=self.causal, chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_linear(q, k, v, key_padding_mask, eps=self.eps, causal=self.causal)
