"""FLatten: focused linear attention (Han et al., arXiv 2308.00442), plus a depthwise conv of the values.

Per head, with a learned per-channel ``s`` (init 0) shared by queries and keys:

    x+ = (ReLU(x) + 1e-6) / softplus(s)           f_p(x) = ||x|| * x^p / ||x^p||   (elementwise power)
    out_i = f_p(q+_i)^T sum_j f_p(k+_j) v_j^T / (f_p(q+_i)^T sum_j f_p(k+_j) + eps) + DWC(v)_i

The norms ``||x||`` and ``||x^p||`` of the focusing function are taken over all channels of a token, all
heads at once (the paper's f_p acts on the whole C-dimensional query or key, and so does
LeapLabTHU/FLatten-Transformer's models/flatten_swin.py, before it splits the heads): each head's features
are scaled by a per-token factor that depends on the other heads. The focusing function keeps the norm and
sharpens the direction; ``DWC`` is a learned depthwise
convolution of the values along the sequence (kernel 5) that restores feature diversity (rank).
O(n d^2). Optionally a learned positional table is added to the keys (``key_positions``, needs max_len).

Deviations from the reference: ``x^p / ||x^p||`` is computed as ``y^p / ||y^p||`` with ``y = x / max(x)``
(the max over the token's channels: same value, no underflow of ``x^p`` when ``x`` is small); the DWC is a
1-D convolution along the sequence (the reference convolves the 2-D window); the reference's normaliser
``q . mean_j k_j + eps`` is computed as ``q . sum_j k_j + L eps`` with ``L`` the number of real keys (the
same ratio; with pads, the mean over real keys; causal: over the real keys so far). The ``eps`` matters:
with the norms over all heads, one head's features can be tiny next to ``eps``. Causal: the convolution is
then causal (left padding, sees the current and ``k - 1`` previous values).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._dwconv import DepthwiseSequenceConv, check_conv_kernel_size, naive_depthwise_sequence_conv
from ._positions import LearnedKeyPositions
from .kernel import float32_region, kernel_attention, naive_kernel_attention
from .registry import register


def positive_scaled(x: Tensor, scale: Tensor) -> Tensor:
    """``(ReLU(x) + 1e-6) / softplus(scale)`` for ``x`` ``(B, H, N, d)``, ``scale`` ``(H, d)``."""
    return (F.relu(x.float()) + 1e-6) / F.softplus(scale.float())[:, None, :]


TOKEN_CHANNELS = (1, 3)  # heads and head channels of (B, H, N, d): all C channels of a token


def focus(x: Tensor, power: float, dim: int | tuple[int, ...] = -1) -> Tensor:
    """``||x|| x^p / ||x^p||`` over ``dim`` for positive ``x``; the power is taken on ``x / max(x)``."""
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True)
    y = (x / x.amax(dim=dim, keepdim=True).detach()) ** power  # max entry 1: ||y|| >= 1
    return norm * y / torch.linalg.vector_norm(y, dim=dim, keepdim=True)


def mean_normaliser_eps(eps: float, key_padding_mask: Tensor | None, x: Tensor, causal: bool) -> Tensor:
    """``L eps`` ``(B, 1, N, 1)``: the eps of ``q . mean_j k_j + eps`` moved to the sum over ``L`` real keys."""
    b, _, n, _ = x.shape
    real = torch.ones(b, n, device=x.device) if key_padding_mask is None else key_padding_mask.float()
    count = real.cumsum(-1) if causal else real.sum(-1, keepdim=True).expand(b, n)
    return eps * count.clamp_min(1.0)[:, None, :, None]


def naive_flatten(q: Tensor, k: Tensor, v: Tensor, scale: Tensor, conv_weight: Tensor | None,
                  conv_bias: Tensor | None, key_padding_mask: Tensor | None = None, *,
                  focusing_factor: float = 3.0, eps: float = 1e-6, causal: bool = False) -> Tensor:
    """Oracle: explicit weights ``f_p(q+_i) . f_p(k+_j)`` (the paper's formula, norms over all of a token's
    channels), normalised, + banded conv."""

    def features(x):
        x = positive_scaled(x, scale)
        xp = x**focusing_factor
        norm = lambda t: t.square().sum(TOKEN_CHANNELS, keepdim=True).sqrt()  # noqa: E731
        return norm(x) * xp / norm(xp)

    out = naive_kernel_attention(features(q), features(k), v.float(), key_padding_mask,
                                 eps=mean_normaliser_eps(eps, key_padding_mask, q, causal), causal=causal)
    if conv_weight is not None:
        out = out + naive_depthwise_sequence_conv(v, conv_weight, conv_bias, key_padding_mask, causal=causal)
    return out.to(v.dtype)


@register("flatten")
class FocusedLinearAttention(nn.Module):
    """Focused linear attention with a depthwise value convolution (see module docstring)."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, num_heads: int, max_len: int | None = None,
                 focusing_factor: float = 3.0, kernel_size: int = 5, key_positions: bool = False,
                 eps: float = 1e-6, causal: bool = False, chunk_size: int = 256):
        super().__init__()
        if focusing_factor < 1:
            raise ValueError(f"flatten focusing_factor must be >= 1, got {focusing_factor}")
        check_conv_kernel_size("flatten", kernel_size, causal)
        self.focusing_factor, self.eps = focusing_factor, eps
        self.causal, self.chunk_size = causal, chunk_size
        self.scale = nn.Parameter(torch.zeros(num_heads, head_dim))  # (H, d): softplus(0) = ln 2
        self.key_positions = LearnedKeyPositions("flatten", num_heads, max_len, head_dim) if key_positions else None
        self.dwc = DepthwiseSequenceConv(head_dim, kernel_size, causal) if kernel_size else None

    def _keys(self, k: Tensor) -> Tensor:
        return k if self.key_positions is None else self.key_positions(k)

    def features(self, x: Tensor) -> Tensor:
        """``f_p(x+)`` ``(B, H, N, d)`` in float32, norms over all heads' channels of each token."""
        with float32_region(x):
            return focus(positive_scaled(x, self.scale), self.focusing_factor, dim=TOKEN_CHANNELS)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        phi_q, phi_k = self.features(q), self.features(self._keys(k))
        with float32_region(v):
            eps = mean_normaliser_eps(self.eps, key_padding_mask, q, self.causal)
            out = kernel_attention(phi_q, phi_k, v.float(), key_padding_mask, eps=eps,
                                   causal=self.causal, chunk_size=self.chunk_size)
            if self.dwc is not None:
                out = out + self.dwc(v, key_padding_mask)
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's parameters."""
        weight, bias = (None, None) if self.dwc is None else (self.dwc.conv.weight[:, 0], self.dwc.conv.bias)
        return naive_flatten(q, self._keys(k), v, self.scale, weight, bias, key_padding_mask,
                             focusing_factor=self.focusing_factor, eps=self.eps, causal=self.causal)

