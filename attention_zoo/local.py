"""Local (block-diagonal) attention, the LRA "Local Attention" baseline (Tay et al., arXiv 2011.04006).

The sequence is cut into consecutive blocks of ``b = block_size`` tokens from its start; a query attends
only to the keys of its own block (and, when causal, to those at or before it):

    out_i = sum_{j : floor(j / b) = floor(i / b)} softmax_j(q_i . k_j / sqrt(d)) v_j

O(n b d) time, O(n b) memory. LRA's JAX code reshapes the length axis as ``(block_size, num_blocks)``,
which makes strided rather than contiguous blocks; we follow the paper: contiguous blocks.

``dropout`` is LRA's attention dropout: ``local_dot_product_attention`` in
``lra_benchmarks/models/local/local_attention.py`` drops the softmax weights in training
(``attention_zoo/_attention_dropout.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._attention_dropout import attention_dropout, check_dropout, dropout_seed
from ._blocks import explicit_attention, masked_softmax, pad_real, real_tokens, scaled_scores, to_blocks
from .kernel import float32_region
from .registry import register


def naive_local(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                block_size: int, causal: bool = False) -> Tensor:
    """Oracle: softmax under the explicit block-diagonal ``(B, 1, N, N)`` mask."""
    pos = torch.arange(q.shape[-2], device=q.device)
    allowed = (pos[:, None] // block_size) == (pos[None, :] // block_size)
    if causal:
        allowed = allowed & (pos[None, :] <= pos[:, None])
    allowed = allowed & real_tokens(key_padding_mask, q)[:, None, None, :]
    return explicit_attention(scaled_scores(q, k), allowed, v).to(v.dtype)


@register("local")
class LocalAttention(nn.Module):
    """Block-diagonal softmax attention; ``block_size`` 50 as in LRA's local attention (see docstring).

    ``dropout``: attention dropout on the block weights in training (default 0: none), as
    ``lra_benchmarks/models/local/local_attention.py`` applies ``attention_dropout_rate``.
    """

    contract_options = {"block_size": 8}  # small, so contract tests see the structure

    supports_causal = True
    quadratic = False

    def __init__(self, *, block_size: int = 50, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        if block_size < 1:
            raise ValueError(f"local block_size must be >= 1, got {block_size}")
        self.block_size, self.causal = block_size, causal
        self.dropout = check_dropout("local", dropout)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, _ = q.shape
        size = self.block_size
        with float32_region(v):
            qb, kb, vb = (to_blocks(t.float(), size) for t in (q, k, v))  # (B, H, M, b, D)
            m = qb.shape[2]
            allowed = pad_real(real_tokens(key_padding_mask, q), m * size).view(b, 1, m, 1, size)
            if self.causal:
                allowed = allowed & torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
            scores = (qb @ kb.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, M, b, b)
            probs = masked_softmax(scores, allowed)
            if self.training and self.dropout > 0:
                pos = torch.arange(m * size, device=q.device).view(m, size)  # (M, b): query and key positions
                probs = attention_dropout(probs, self.dropout, dropout_seed(), pos[:, :, None], pos[:, None, :])
            out = probs @ vb
        return out.flatten(2, 3)[:, :, :n].to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_local(q, k, v, key_padding_mask, block_size=self.block_size, causal=self.causal)
