"""Depthwise 1-D convolution of the values along the sequence (the "DWC" term of FLatten and PolaFormer).

``out[i, c] = b_c + sum_t w_{c,t} v[i + t - pad, c]`` per head-dim channel ``c``, one kernel shared by
all heads (the references apply ``Conv2d(head_dim, head_dim, groups=head_dim)`` to every head alike),
zero padding: centred (``pad = (k - 1) / 2``, odd ``k``) or causal (``pad = k - 1``, only the past).
Padded values are zeroed first, so a real token sees real neighbours or zeros whatever the padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernel import expand_key_mask, float32_region


def check_conv_kernel_size(name: str, kernel_size: int, causal: bool) -> None:
    """``kernel_size`` is 0 (no convolution) or positive, and odd unless causal (centred padding)."""
    if kernel_size < 0 or (kernel_size and not causal and kernel_size % 2 == 0):
        raise ValueError(f"{name} kernel_size must be 0 (off), an odd positive number, or any positive "
                         f"number when causal; got {kernel_size}")


def _left_right_padding(kernel_size: int, causal: bool) -> tuple[int, int]:
    return (kernel_size - 1, 0) if causal else (kernel_size // 2, kernel_size // 2)


class DepthwiseSequenceConv(nn.Module):
    """Learnable depthwise convolution over the sequence of ``v`` ``(B, H, N, d)``; float32 inside."""

    def __init__(self, channels: int, kernel_size: int, causal: bool = False):
        super().__init__()
        self.kernel_size, self.causal = kernel_size, causal
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels)  # PyTorch's default init

    def forward(self, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, d = v.shape
        with float32_region(v):
            v = v.float()
            mask = expand_key_mask(key_padding_mask, v)
            if mask is not None:
                v = v * mask
            x = v.reshape(b * h, n, d).transpose(1, 2)  # (B * H, d, N)
            x = F.pad(x, _left_right_padding(self.kernel_size, self.causal))
            x = F.conv1d(x, self.conv.weight.float(), self.conv.bias.float(), groups=d)
            return x.transpose(1, 2).reshape(b, h, n, d)

    def naive(self, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return naive_depthwise_sequence_conv(v, self.conv.weight[:, 0], self.conv.bias, key_padding_mask,
                                             causal=self.causal)


def naive_depthwise_sequence_conv(v: Tensor, weight: Tensor, bias: Tensor,
                                  key_padding_mask: Tensor | None = None, *, causal: bool = False) -> Tensor:
    """Oracle: the explicit banded ``(d, N, N)`` matrix ``T[c, i, j] = w[c, j - i + pad]`` applied to ``v``.

    ``weight`` is ``(d, k)``, ``bias`` ``(d,)``; returns float32 ``(B, H, N, d)``.
    """
    n, k = v.shape[-2], weight.shape[-1]
    pad = _left_right_padding(k, causal)[0]
    idx = torch.arange(n, device=v.device)
    offset = idx[None, :] - idx[:, None] + pad  # (N, N): tap index j - i + pad
    valid = (offset >= 0) & (offset < k)
    band = weight.float()[:, offset.clamp(0, k - 1)] * valid  # (d, N, N)
    v = v.float()
    if key_padding_mask is not None:
        v = v * key_padding_mask[:, None, :, None].float()
    return torch.einsum("cij,bhjc->bhic", band, v) + bias.float()
