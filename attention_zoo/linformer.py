"""Linformer (Wang et al., arXiv 2006.04768): keys and values projected along the length to k rows.

With learned ``E, F in R^{k x max_len}`` (per head, first ``n`` columns used) and pads zeroed in K and V:

    out = softmax(Q (E K)^T / sqrt(d)) (F V)

O(n k d) time and memory. As an explicit ``n x n`` weight matrix: ``W = softmax((Q K^T) E^T / sqrt(d)) F``,
``out = W V``. Defaults follow the PyTorch LRA port (mlpen/Nystromformer ``attention_linformer.py``):
``k = 256``, ``N(0, 0.02^2)`` initialisation, one matrix per head; that port also shares E = F
(``share_kv=True`` here) and shares it across layers (not done here). Not causal.

Memory: ``E K`` is one matmul per head (a broadcast one would copy ``E`` per sequence), and the
``n x k`` weights are computed for blocks of query rows and recomputed in the backward pass
(``_recomputed_softmax``), so a training step keeps ``O(n d + k d)`` per head, not ``O(n k)``.

``dropout`` is LRA's attention dropout: ``lra_benchmarks/models/linformer/linformer_attention.py`` passes
``attention_dropout_rate`` to flax's ``dot_product_attention`` on the projected keys, which drops the
``n x k`` softmax weights ``softmax(Q (E K)^T / sqrt(d))`` in training; so do we (``local.attention_dropout``,
each weight named by its query position and projection row). The PyTorch port has none.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from ._attention_dropout import attention_dropout, check_dropout, dropout_seed
from ._blocks import real_tokens, refuse_causal, scaled_scores
from ._recomputed_softmax import row_block_attention, row_blocks
from .kernel import float32_region
from .registry import register


def naive_linformer(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                    proj_k: Tensor, proj_v: Tensor) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weights ``softmax((Q K^T) E^T / sqrt(d)) F`` times V.

    ``proj_k, proj_v``: ``(H, k, max_len)``.
    """
    n = q.shape[-2]
    real = real_tokens(key_padding_mask, q)[:, None, :, None].float()
    scores = scaled_scores(q, k.float() * real)  # (B, H, N, N), pad keys give 0
    logits = scores @ proj_k[:, :, :n].float().transpose(-1, -2)  # (B, H, N, k)
    weights = logits.softmax(-1) @ proj_v[:, :, :n].float()  # (B, H, N, N)
    return (weights @ (v.float() * real)).to(v.dtype)


def _project(proj: Tensor, x: Tensor) -> Tensor:
    """``E x``: ``(H, k, N)`` times ``(B, H, N, D)`` -> ``(B, H, k, D)``, one matmul per head.

    A broadcast ``proj @ x`` would copy ``E`` once per sequence (``B x H x k x N``, kept for backward).
    """
    b, h, n, d = x.shape
    flat = x.permute(1, 2, 0, 3).reshape(h, n, b * d)  # (H, N, B D)
    return (proj @ flat).view(h, -1, b, d).permute(2, 0, 1, 3).contiguous()  # read by every block of rows


def _projected_blocks(q: Tensor, keys: Tensor, p: float, seed: int | None):
    """``(rows, drop)`` per block of query rows of ``drop(softmax(q keys^T / sqrt(d))) values``: a slice and its
    dropout (None without), which names a weight by its query row and key row."""
    cols = torch.arange(keys.shape[-2], device=q.device)
    for rows in row_blocks(q, keys.shape[-2]):
        drop = None
        if seed is not None:
            query_pos = torch.arange(rows.start, rows.stop, device=q.device)[:, None]
            drop = partial(attention_dropout, p=p, seed=seed, query_pos=query_pos, key_pos=cols)
        yield rows, drop


@register("linformer")
class LinformerAttention(nn.Module):
    """Low-rank projected softmax attention; needs ``max_len`` (the projections span the length).

    ``dropout``: attention dropout on the ``n x k`` weights in training (default 0: none), as
    ``lra_benchmarks/models/linformer/linformer_attention.py`` applies ``attention_dropout_rate``.
    """

    contract_options = {"proj_dim": 16}  # small, so contract tests see the structure

    supports_causal = False
    quadratic = False

    def __init__(self, *, num_heads: int, max_len: int | None, proj_dim: int = 256, share_kv: bool = False,
                 dropout: float = 0.0, causal: bool = False):
        super().__init__()
        refuse_causal("linformer", causal)
        if max_len is None:
            raise ValueError("linformer needs max_len: its projections E, F are k x max_len")
        if proj_dim < 1:
            raise ValueError(f"linformer proj_dim must be >= 1, got {proj_dim}")
        self.max_len, self.proj_dim, self.share_kv = max_len, proj_dim, share_kv
        self.dropout = check_dropout("linformer", dropout)
        self.proj_k = nn.Parameter(torch.randn(num_heads, proj_dim, max_len) * 0.02)  # E: (H, k, max_len)
        self.proj_v = None if share_kv else nn.Parameter(torch.randn(num_heads, proj_dim, max_len) * 0.02)

    def projections(self) -> tuple[Tensor, Tensor]:
        """``E, F``: ``(H, k, max_len)`` each (the same tensor when ``share_kv``)."""
        return self.proj_k, self.proj_k if self.proj_v is None else self.proj_v

    def _check_length(self, n: int) -> None:
        if n > self.max_len:
            raise ValueError(f"linformer was built for max_len={self.max_len}, got a sequence of {n}")

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        n = q.shape[-2]
        self._check_length(n)
        proj_k, proj_v = (p[:, :, :n].float() for p in self.projections())
        with float32_region(v):
            real = real_tokens(key_padding_mask, q)[:, None, :, None].float()
            keys, values = _project(proj_k, k.float() * real), _project(proj_v, v.float() * real)  # (B, H, k, D)
            seed = dropout_seed() if self.training and self.dropout > 0 else None
            out = row_block_attention(q.float(), keys, values, partial(_projected_blocks, p=self.dropout, seed=seed))
        return out.to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's projections."""
        self._check_length(q.shape[-2])
        proj_k, proj_v = self.projections()
        return naive_linformer(q, k, v, key_padding_mask, proj_k=proj_k, proj_v=proj_v)
