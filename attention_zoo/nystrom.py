"""Nystromformer (Xiong et al., arXiv 2102.03902): Nystrom approximation of softmax attention.

With ``Q, K`` scaled by ``d^(-1/4)`` each and landmarks ``Q~, K~`` (c segment means of the real tokens)::

    out = softmax(Q K~^T) pinv(softmax(Q~ K~^T)) softmax(Q~ K^T + mask) V  +  conv(V)

``pinv`` is 6 Newton-Schulz steps (``_pinv.py``), ``conv`` a depthwise convolution over the sequence
(kernel 35, one filter per head, on zeroed pads). O(n c d + c^3); not causal (landmarks mix the future).
Segment ``s`` covers the real-token interval ``[s L / c, (s + 1) L / c)`` with fractional overlaps, so the
landmarks depend only on the ``L`` real tokens (not on padding, and ``L`` need not divide by ``c``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._pinv import check_pinv_init, newton_schulz_pinv
from .kernel import float32_region
from .registry import register


def segment_mean_weights(key_padding_mask: Tensor | None, batch: int, n: int, landmarks: int,
                         device) -> Tensor:
    """``(B, c, N)`` averaging weights: row ``s`` spreads 1 over segment ``s`` of the real tokens."""
    if key_padding_mask is None:
        key_padding_mask = torch.ones(batch, n, dtype=torch.bool, device=device)
    real = key_padding_mask.float()
    width = (real.sum(-1) / landmarks).clamp_min(1e-6)[:, None, None]  # (B, 1, 1)
    rank = (real.cumsum(-1) - 1)[:, None, :]  # (B, 1, N): 0-based index among real tokens
    start = torch.arange(landmarks, device=device, dtype=torch.float32)[None, :, None] * width  # (B, c, 1)
    overlap = (torch.minimum(rank + 1, start + width) - torch.maximum(rank, start)).clamp_min(0.0)
    return overlap * real[:, None, :] / width


def nystrom_factors(q: Tensor, k: Tensor, key_padding_mask: Tensor | None, landmarks: int,
                    pinv_iterations: int = 6, pinv_init: str = "original") -> tuple[Tensor, Tensor, Tensor]:
    """``F`` ``(B, H, N, c)``, ``pinv(A)`` ``(B, H, c, c)``, ``B`` ``(B, H, c, N)`` in float32."""
    scale = q.shape[-1] ** -0.25
    q, k = q.float() * scale, k.float() * scale
    means = segment_mean_weights(key_padding_mask, q.shape[0], q.shape[-2], landmarks, q.device)[:, None]
    if key_padding_mask is not None:
        real = key_padding_mask[:, None, :, None]
        q, k = q.masked_fill_(~real, 0.0), k.masked_fill_(~real, 0.0)  # pads may hold anything (new tensors)
    q_land, k_land = means @ q, means @ k  # (B, H, c, D)
    f = torch.softmax(q @ k_land.transpose(-1, -2), dim=-1)
    a = torch.softmax(q_land @ k_land.transpose(-1, -2), dim=-1)
    scores = q_land @ k.transpose(-1, -2)  # (B, H, c, N)
    if key_padding_mask is not None:  # padded keys are zero here: adding the lowest float gives it exactly,
        low = torch.finfo(scores.dtype).min  # and an addition's backward copies nothing (masked_fill's would)
        scores.add_(torch.where(key_padding_mask, 0.0, low)[:, None, None, :].to(scores.dtype))
    b = torch.softmax(scores, dim=-1)
    return f, newton_schulz_pinv(a, pinv_iterations, pinv_init), b


def conv_as_matrix(weight: Tensor, n: int) -> Tensor:
    """The depthwise conv ``(H, 1, ks, 1)`` (zero padding ks // 2) as banded ``(H, N, N)`` matrices."""
    ks = weight.shape[2]
    idx = torch.arange(n, device=weight.device)
    offset = idx[None, :] - idx[:, None] + ks // 2  # tap used by output i for input j
    inside = (offset >= 0) & (offset < ks)
    return weight[:, 0, :, 0].float()[:, offset.clamp(0, ks - 1)] * inside


def masked_values(v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """``v`` in float32 with pads set to zero."""
    v = v.float()
    return v if key_padding_mask is None else v.masked_fill(~key_padding_mask[:, None, :, None], 0.0)


def naive_nystrom(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                  landmarks: int = 64, conv_weight: Tensor | None = None, pinv_iterations: int = 6,
                  pinv_init: str = "original") -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` matrix ``F pinv(A) B`` plus the conv as a banded matrix."""
    f, a_pinv, b = nystrom_factors(q, k, key_padding_mask, landmarks, pinv_iterations, pinv_init)
    weights = f @ a_pinv @ b  # (B, H, N, N)
    if conv_weight is not None:
        weights = weights + conv_as_matrix(conv_weight, q.shape[-2])
    return (weights @ masked_values(v, key_padding_mask)).to(v.dtype)


@register("nystrom")
class NystromAttention(nn.Module):
    """Nystromformer: segment-mean landmarks, iterative pseudo-inverse, depthwise conv skip on V."""

    contract_options = {"num_landmarks": 8}  # small, so contract tests see the structure

    supports_causal = False
    quadratic = False

    def __init__(self, *, num_heads: int, num_landmarks: int = 64, conv_kernel_size: int = 35,
                 pinv_iterations: int = 6, pinv_init: str = "original", causal: bool = False):
        super().__init__()
        if causal:
            raise ValueError("nystrom cannot be causal: every landmark averages over the whole sequence")
        if num_landmarks < 1 or pinv_iterations < 0:
            raise ValueError("nystrom needs num_landmarks >= 1 and pinv_iterations >= 0")
        if conv_kernel_size < 0 or (conv_kernel_size and conv_kernel_size % 2 == 0):
            raise ValueError(f"nystrom conv_kernel_size must be 0 (no conv) or odd, got {conv_kernel_size}")
        check_pinv_init(pinv_init, "nystrom")
        self.num_landmarks, self.causal = num_landmarks, causal
        self.pinv_iterations, self.pinv_init = pinv_iterations, pinv_init
        self.conv = None
        if conv_kernel_size:
            self.conv = nn.Conv2d(num_heads, num_heads, (conv_kernel_size, 1),
                                  padding=(conv_kernel_size // 2, 0), groups=num_heads, bias=False)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        with float32_region(v):
            f, a_pinv, b = nystrom_factors(q, k, key_padding_mask, self.num_landmarks, self.pinv_iterations,
                                           self.pinv_init)
            values = masked_values(v, key_padding_mask)
            out = f @ (a_pinv @ (b @ values))  # (B, H, N, D)
            if self.conv is not None:
                per_head = values.expand(-1, self.conv.groups, -1, -1)  # a 1-head input broadcasts
                out = out + F.conv2d(per_head, self.conv.weight.float(), padding=self.conv.padding,
                                     groups=self.conv.groups)
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options and conv weights."""
        conv_weight = None if self.conv is None else self.conv.weight
        with float32_region(v):
            return naive_nystrom(q, k, v, key_padding_mask, landmarks=self.num_landmarks,
                                 conv_weight=conv_weight, pinv_iterations=self.pinv_iterations,
                                 pinv_init=self.pinv_init)
