"""Softmax attention (Vaswani et al., arXiv 1706.03762): ``softmax(Q K^T / sqrt(d) + mask) V``."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._recomputed_softmax import row_block_attention, row_blocks
from .dropout_masks import apply_mask, keep_mask, keep_scale
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


def _kept_blocks(q: Tensor, k: Tensor, kept: Tensor, p: float):
    """``(rows, drop)`` per block of query rows: a slice and its dropout (a multiply by 0 or ``1 / (1 - p)``)."""
    for rows in row_blocks(q, k.shape[-2]):
        yield rows, partial(apply_mask, kept=kept[:, :, rows], scale=keep_scale(p))


def dropped_softmax(q: Tensor, k: Tensor, v: Tensor, p: float) -> Tensor:
    """Softmax attention without a mask, its weights dropped with probability ``p`` (inverted dropout).

    The keep mask is drawn once, ``(B, H, N, N)`` bools from the 16-bit CPU words (``dropout_masks``), and the
    weights are recomputed block by block in backward (``_recomputed_softmax``): on the CPU ~1.7x faster than
    SDPA's explicit path with ``dropout_p`` (its ``bernoulli_`` mask and float copies; one sequence of 1,500
    tokens, 2 heads of 32, one thread: 36 ms against 61 ms forward and backward).

    The drop rate is the 16-bit masks' ``round(p * 2**16) / 2**16`` (within ``2**-17`` of ``p``); the masks come
    from torch's default generator (one draw a call), so a seed or a checkpointed RNG state repeats them.
    """
    kept = keep_mask(q.shape[:-1] + k.shape[-2:-1], p, q.device)  # (B, H, N, N), saved for backward
    return row_block_attention(q, k, v, partial(_kept_blocks, kept=kept, p=p))


def per_sequence(q: Tensor, k: Tensor, v: Tensor, lengths: list[int], attend) -> Tensor:
    """``attend(q, k, v)`` on each sequence at its true length (no mask): a padded batch costs sum(L_i^2), not
    B * N^2. Padded query rows get zeros; real rows equal the masked computation's."""
    out = q.new_zeros(q.shape[:-1] + v.shape[-1:])  # (B, H, N, Dv)
    for i, length in enumerate(lengths):
        if length:
            s = slice(i, i + 1)
            out[s, :, :length] = attend(q[s, :, :length], k[s, :, :length], v[s, :, :length])
    return out


@register("softmax")
class SoftmaxAttention(nn.Module):
    """Exact softmax attention on ``F.scaled_dot_product_attention`` with the key padding mask.

    Options: ``dropout`` on the attention weights (off by default), ``causal``.

    On the CPU a batch padded at the end (the LRA batches) runs one attention per sequence at its true
    length: with ListOps lengths of 500-2,000 padded to the batch's longest that is ~0.44 of the
    masked batch's FLOPs, and the real tokens' outputs are the same (padded rows are zeros). Without dropout
    that is SDPA's fused kernel. With dropout (non-causal, on the CPU) it is :func:`dropped_softmax` (16-bit
    masks, weights recomputed in backward), ~1.7x faster than SDPA's explicit path with ``dropout_p``, which
    every other case with dropout takes (causal, a mask that is not a prefix, other devices).
    """

    supports_causal = True
    quadratic = True  # time (and memory) grow with the square of the sequence length

    def __init__(self, *, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        self.dropout = dropout
        self.causal = causal

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        p = self.dropout if self.training else 0.0
        cpu = q.device.type == "cpu" and not self.causal
        attend = F.scaled_dot_product_attention if p == 0.0 or not cpu else partial(dropped_softmax, p=p)
        if cpu and key_padding_mask is None:
            return attend(q, k, v)
        if cpu:
            lengths = prefix_lengths(key_padding_mask)
            if lengths is not None:
                return per_sequence(q, k, v, lengths.tolist(), attend)
        allowed = _allowed(key_padding_mask, q.shape[-2], self.causal, q.device)
        if allowed is None:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle (without dropout)."""
        return naive_softmax(q, k, v, key_padding_mask, causal=self.causal)
