"""Softmax attention (Vaswani et al., arXiv 1706.03762): ``softmax(Q K^T / sqrt(d) + mask) V``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernel import prefix_lengths
from .registry import register


def _allowed(key_padding_mask: Tensor | None, n: int, causal: bool, device) -> Tensor | None:
    """Boolean ``(B|1, 1, N|1, N)`` mask, True where a query may attend to a key."""
    allowed = None
    if key_padding_mask is not None:
        allowed = key_padding_mask[:, None, None, :]
    if causal:
        tri = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]
        allowed = tri if allowed is None else allowed & tri
    return allowed


def naive_softmax(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                  *, causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` softmax weight matrix times ``v``."""
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    allowed = _allowed(key_padding_mask, q.shape[-2], causal, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(v.dtype)


def per_sequence_sdpa(q: Tensor, k: Tensor, v: Tensor, lengths: list[int], dropout_p: float = 0.0) -> Tensor:
    """Each sequence at its true length (no mask): a padded batch costs sum(L_i^2), not B * N^2.

    Padded query rows get zeros; real rows equal the masked computation's (with ``dropout_p``, in expectation:
    the weights are dropped by SDPA's own draw, one sequence at a time).
    """
    out = q.new_zeros(q.shape[:-1] + v.shape[-1:])  # (B, H, N, Dv)
    for i, length in enumerate(lengths):
        if length:
            s = slice(i, i + 1)
            out[s, :, :length] = F.scaled_dot_product_attention(q[s, :, :length], k[s, :, :length], v[s, :, :length],
                                                                dropout_p=dropout_p)
    return out


@register("softmax")
class SoftmaxAttention(nn.Module):
    """Exact softmax attention on ``F.scaled_dot_product_attention`` with the key padding mask.

    Options: ``dropout`` on the attention weights (off by default: on the CPU it leaves SDPA's
    fused kernel for its explicit one, ~2.2x the attention's time at ListOps lengths), ``causal``.

    On the CPU a batch padded at the end (the LRA batches) runs one SDPA per sequence at its true
    length: with ListOps lengths of 500-2,000 padded to the batch's longest that is ~0.44 of the
    masked batch's FLOPs, and the real tokens' outputs are the same (padded rows are zeros). With
    dropout the masked batch took 4x the per-sequence time (8 trees, one thread).
    """

    supports_causal = True
    quadratic = True  # time (and memory) grow with the square of the sequence length

    def __init__(self, *, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        self.dropout = dropout
        self.causal = causal

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        p = self.dropout if self.training else 0.0
        if key_padding_mask is not None and q.device.type == "cpu" and not self.causal:
            lengths = prefix_lengths(key_padding_mask)
            if lengths is not None:
                return per_sequence_sdpa(q, k, v, lengths.tolist(), p)
        allowed = _allowed(key_padding_mask, q.shape[-2], self.causal, q.device)
        if allowed is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle (without dropout)."""
        return naive_softmax(q, k, v, key_padding_mask, causal=self.causal)
