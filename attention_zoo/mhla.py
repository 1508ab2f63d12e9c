"""Multi-head linear attention, MHLA (Yau et al., arXiv 2410.10101, Def. 2.1), on projected heads.

The paper's model ``Y = sum_h V_h Z (Z^T Q_h Z)`` reads, column by column, as linear attention with no
softmax and no normalisation: ``y_j = sum_h sum_i (V_h z_i) (z_i^T Q_h z_j)``. Here each head receives
its own projected ``q, k, v`` (query ``W_q z``, key ``W_k z``, value ``V_h z``: the paper's ``Q_h`` is ``W_q^T W_k``,
of rank at most the head width), so per head

    out_i = (1 / n_i) sum_j (q_i . k_j) v_j        (computed as q_i (K^T V) / n_i: O(n d^2))

over real keys ``j`` (and ``j <= i`` when causal). ``scale="length"`` divides by ``n_i`` = the number of
real keys summed (all of them, or those up to ``i`` when causal): the practical scaling of
ATTENTION_ZOO.md section 14 that keeps magnitudes independent of the length (the paper's sums grow
with ``n``); ``scale="none"`` is the paper's raw sum. Causal form: chunked prefix sums of ``k_j v_j^T``.
The paper's own parametrisation (``V_h, Q_h`` acting on ``Z``) and Algorithm 1 are in ``analyses/_mhla_model.py``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .kernel import causal_products, expand_key_mask, float32_region
from .registry import register

SCALES = ("length", "none")


def real_key_counts(key_padding_mask: Tensor | None, b: int, n: int, causal: bool, device) -> Tensor:
    """``n_i`` ``(B, 1, N, 1)``: real keys summed by query ``i`` (at least 1, so an empty sum stays 0)."""
    mask = torch.ones(b, n, device=device) if key_padding_mask is None else key_padding_mask.float()
    counts = mask.cumsum(-1) if causal else mask.sum(-1, keepdim=True).expand(b, n)
    return counts.clamp_min(1.0)[:, None, :, None]


def naive_mhla(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
               scale: str = "length", causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weights ``q_i . k_j`` (masked), times ``v``, over ``n_i``."""
    with float32_region(q):
        b, _, n, _ = q.shape
        weights = q.float() @ k.float().transpose(-1, -2)  # (B, H, N, N)
        if key_padding_mask is not None:
            weights = weights * key_padding_mask[:, None, None, :].float()
        if causal:
            weights = weights * torch.ones(n, n, device=q.device).tril()
        out = weights @ v.float()
        if scale == "length":
            out = out / real_key_counts(key_padding_mask, b, n, causal, q.device)
    return out.to(v.dtype)


@register("mhla")
class MHLAAttention(nn.Module):
    """Unnormalised linear attention ``q (K^T V)``, divided by the real key count (``scale="length"``)."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, scale: str = "length", causal: bool = False, chunk_size: int = 256):
        super().__init__()
        if scale not in SCALES:
            raise ValueError(f"mhla scale must be one of {', '.join(SCALES)}; got {scale!r}")
        self.scale, self.causal, self.chunk_size = scale, causal, chunk_size

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        with float32_region(q):
            q, k, vf = q.float(), k.float(), v.float()
            mask = expand_key_mask(key_padding_mask, vf)
            if mask is not None:
                k, vf = k * mask, vf * mask
            if self.causal:
                out = causal_products(q, k, vf, self.chunk_size)
            else:
                out = q @ (k.transpose(-1, -2) @ vf)  # (B, H, N, d) from the (d, d) state K^T V
            if self.scale == "length":
                out = out / real_key_counts(key_padding_mask, q.shape[0], q.shape[-2], self.causal, q.device)
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_mhla(q, k, v, key_padding_mask, scale=self.scale, causal=self.causal)
