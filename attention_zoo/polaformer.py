"""PolaFormer: polarity-aware linear attention (Meng et al., arXiv 2501.15061), plus a depthwise value conv.

Per head, with learned per-channel ``s`` (init 0, shared by q and k) and ``w`` (init 0):

    x = x / softplus(s)      p = 1 + alpha * sigmoid(w)      x+ = ReLU(x)^p,  x- = ReLU(-x)^p
    phi_k = [k+, k-]     same-sign queries [q+, q-]     opposite-sign queries [q-, q+]
    out = ([A([q+, q-], phi_k, v_1), A([q-, q+], phi_k, v_2)] + DWC(v)) * g

where ``v_1, v_2`` are the halves of the head dim and ``A`` is normalised linear attention
``phi_q^T sum_j phi_k_j v_j^T / (phi_q^T sum_j phi_k_j + eps)``, each branch normalised on its own: the
same-sign products ``q+ k+ + q- k-`` and the opposite-sign products ``q- k+ + q+ k-`` each drive half
the value channels, instead of the negative products being dropped. The learnable power ``p > 1``
sharpens the weights (lower entropy). ``DWC`` is a learned depthwise convolution of the values along the
sequence (kernel 5), and ``g`` is the output gate: a fourth projection of the block input, as
``qkvg = Linear(C, 4C)`` in ZacharyMeng/PolaFormer (models/pola_swin.py, ``PolaLinearAttention``). The
module declares it as an extra input (``extra_inputs = ("gate",)``, see ``attention_zoo.registry``): the
LRA block projects its input four times and passes the fourth projection as ``gate=``; the block's output
projection is the reference's ``proj``. Called without ``gate`` (benchmarks), the output is ungated;
``gate=False`` builds the ungated variant, whose block has only q, k, v. O(n d^2). Optionally a learned
positional table is added to the keys (the vision reference's window table).

``alpha`` defaults to 3: the PolaFormer README's LRA table reports alpha 3, 5 and 7, 3 with the best
average; the vision configs use 4 (``MODEL.LA.ALPHA``). Deviations: the DWC is a 1-D convolution along
the sequence (the reference convolves the 2-D window); the reference's normaliser ``q . mean_j k_j + eps``
is computed as ``q . sum_j k_j + L eps`` over the ``L`` real keys (the same ratio; with pads, the mean over
real keys; causal: over the real keys so far). Causal: the
convolution is then causal (the current and ``k - 1`` previous values).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._dwconv import DepthwiseSequenceConv, check_conv_kernel_size, naive_depthwise_sequence_conv
from ._positions import LearnedKeyPositions
from .flatten import mean_normaliser_eps
from .kernel import float32_region, kernel_attention, naive_normalized_attention
from .registry import register


def polarity_power(power_logit: Tensor, alpha: float) -> Tensor:
    """``p = 1 + alpha * sigmoid(w)``, in ``(1, 1 + alpha)``."""
    return 1 + alpha * torch.sigmoid(power_logit.float())


def polarity_parts(x: Tensor, scale: Tensor, power: Tensor) -> tuple[Tensor, Tensor]:
    """``ReLU(+-x / softplus(s))^p`` for ``x`` ``(B, H, N, d)``, ``s`` and ``p`` ``(H, d)``; float32."""
    x = x.float() / F.softplus(scale.float())[:, None, :]
    p = power[:, None, :]
    return F.relu(x) ** p, F.relu(-x) ** p


def naive_polaformer(q: Tensor, k: Tensor, v: Tensor, scale: Tensor, power: Tensor,
                     conv_weight: Tensor | None, conv_bias: Tensor | None,
                     key_padding_mask: Tensor | None = None, *, gate: Tensor | None = None, eps: float = 1e-6,
                     causal: bool = False) -> Tensor:
    """Oracle: explicit same-sign ``q+.k+ + q-.k-`` and opposite-sign ``q-.k+ + q+.k-`` weight matrices,
    plus the banded convolution, times the gate."""
    q_pos, q_neg = polarity_parts(q, scale, power)
    k_pos, k_neg = polarity_parts(k, scale, power)
    same = q_pos @ k_pos.transpose(-1, -2) + q_neg @ k_neg.transpose(-1, -2)  # (B, H, N, N)
    opposite = q_neg @ k_pos.transpose(-1, -2) + q_pos @ k_neg.transpose(-1, -2)
    v_same, v_opposite = v.float().chunk(2, dim=-1)
    opts = dict(eps=mean_normaliser_eps(eps, key_padding_mask, q, causal), causal=causal)
    out = torch.cat([naive_normalized_attention(same, v_same, key_padding_mask, **opts),
                     naive_normalized_attention(opposite, v_opposite, key_padding_mask, **opts)], dim=-1)
    if conv_weight is not None:
        out = out + naive_depthwise_sequence_conv(v, conv_weight, conv_bias, key_padding_mask, causal=causal)
    if gate is not None:
        out = out * gate.float()
    return out.to(v.dtype)


@register("polaformer")
class PolarityAwareLinearAttention(nn.Module):
    """Polarity-aware linear attention plus a depthwise value convolution, gated (see module docstring)."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, num_heads: int, max_len: int | None = None, alpha: float = 3.0,
                 kernel_size: int = 5, gate: bool = True, key_positions: bool = False, eps: float = 1e-6,
                 causal: bool = False, chunk_size: int = 256):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"polaformer splits the values in halves: head_dim must be even, got {head_dim}")
        if alpha <= 0:
            raise ValueError(f"polaformer alpha must be > 0, got {alpha}")
        check_conv_kernel_size("polaformer", kernel_size, causal)
        self.alpha, self.eps, self.causal, self.chunk_size = alpha, eps, causal, chunk_size
        self.extra_inputs = ("gate",) if gate else ()  # the block's fourth projection, g
        self.scale = nn.Parameter(torch.zeros(num_heads, head_dim))  # (H, d): softplus(0) = ln 2
        self.power_logit = nn.Parameter(torch.zeros(num_heads, head_dim))  # (H, d): p = 1 + alpha / 2 at init
        self.key_positions = LearnedKeyPositions("polaformer", num_heads, max_len, head_dim) if key_positions else None
        self.dwc = DepthwiseSequenceConv(head_dim, kernel_size, causal) if kernel_size else None

    def _keys(self, k: Tensor) -> Tensor:
        return k if self.key_positions is None else self.key_positions(k)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                gate: Tensor | None = None) -> Tensor:
        with float32_region(v):
            power = polarity_power(self.power_logit, self.alpha)
            q_pos, q_neg = polarity_parts(q, self.scale, power)
            k_pos, k_neg = polarity_parts(self._keys(k), self.scale, power)
            phi_k = torch.cat([k_pos, k_neg], dim=-1)  # (B, H, N, 2d)
            v_same, v_opposite = v.float().chunk(2, dim=-1)
            eps = mean_normaliser_eps(self.eps, key_padding_mask, q, self.causal)
            opts = dict(eps=eps, causal=self.causal, chunk_size=self.chunk_size)
            q_same, q_opposite = torch.cat([q_pos, q_neg], dim=-1), torch.cat([q_neg, q_pos], dim=-1)
            same = kernel_attention(q_same, phi_k, v_same, key_padding_mask, **opts)
            opposite = kernel_attention(q_opposite, phi_k, v_opposite, key_padding_mask, **opts)
            out = torch.cat([same, opposite], dim=-1)  # (B, H, N, d)
            if self.dwc is not None:
                out = out + self.dwc(v, key_padding_mask)
            if gate is not None:
                out = out * gate.float()
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
              gate: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's parameters."""
        weight, bias = (None, None) if self.dwc is None else (self.dwc.conv.weight[:, 0], self.dwc.conv.bias)
        return naive_polaformer(q, self._keys(k), v, self.scale, polarity_power(self.power_logit, self.alpha),
                                weight, bias, key_padding_mask, gate=gate, eps=self.eps, causal=self.causal)
