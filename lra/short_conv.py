"""A short depthwise convolution over positions on a block's q/k/v projections (``model.short_conv``).

Linear-attention language models put one here (BASED, arXiv 2402.18668, section 4, and the Zoology MQAR blocks,
arXiv 2312.04927; DeltaNet and GLA after them): with ``k_t = sum_j w_j * (W_k x)_{t-j}`` the key of a value
token can carry the token before it, so one attention layer can bind a key to its value, which a kernel that
cannot attend sharply by position cannot learn otherwise. Each channel has its own ``kernel`` taps and no bias;
causal tasks look back only (``t-kernel+1 .. t``), the others over a centred window. Padded positions are zero
before the convolution (zeroed here unless the caller's layout has them zero already), so a sequence never
reads its pads' projections (which are not zero: they carry the projection's bias).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


class ShortConv(nn.Module):
    """Depthwise ``Conv1d`` over positions of ``(B, N, channels)``, causal or centred, without bias."""

    def __init__(self, channels: int, kernel: int, causal: bool):
        super().__init__()
        if kernel < 2:
            raise ValueError(f"a short convolution needs a kernel of at least 2 positions, got {kernel}")
        self.causal = causal
        left = kernel - 1 if causal else (kernel - 1) // 2
        self.padding = (left, kernel - 1 - left)  # zeros before and after the sequence
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels, bias=False)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        """``x`` ``(B, N, channels)``, ``mask`` ``(B, N)`` True at real tokens, or None when ``x`` is already zero
        at its pads (``lra.packing``'s unpacked layout); the same shape back."""
        if mask is not None:
            x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
        x = F.pad(x.transpose(1, 2), self.padding)  # (B, channels, N + kernel - 1)
        return self.conv(x).transpose(1, 2).contiguous()  # (B, N, channels), head_dim contiguous for the kernels
