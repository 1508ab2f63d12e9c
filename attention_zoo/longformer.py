"""Longformer attention (Beltagy et al., arXiv 2004.05150): a sliding window plus optional global tokens.

A query attends to the keys within ``w = window // 2`` positions on each side (``|i - j| <= w``, the
paper's "w/2 on each side", as in Hugging Face's ``attention_window``); the first ``num_global`` tokens
attend to every key and every query attends to them:

    out_i = sum_{j in A(i)} softmax_j(q_i . k_j / sqrt(d)) v_j,
    A(i) = {j : |i - j| <= w} u {j : j < g} u (all j if i < g)

LRA's JAX mask is 255 left + self + 256 right for window 512, and sets no global tokens (global_mask None):
hence ``num_global = 0`` by default; set 1 to make the first (CLS) token global as in the paper.
Fast form: query chunks of ``chunk_size`` rows against the ``chunk_size + 2w`` keys around them, plus
``g`` global key columns and ``g`` full global rows: O(n (c + 2w + g) d) time and O(n (c + 2w)) memory.

``dropout`` is LRA's attention dropout: ``_get_attention_result`` in
``lra_benchmarks/models/longformer/longformer_attention.py`` hands ``attention_dropout_rate`` to flax's
``dot_product_attention`` for the sliding-window and the global attention, which drops the softmax
weights in training; here the banded, global-column and global-row weights (``local.attention_dropout``).

Against Hugging Face ``transformers`` ``LongformerSelfAttention`` (the authors' code, upstreamed; parity in
``tests/attention_zoo/test_parity_packages.py``): the same band (its ``attention_window`` is ``window``,
``|i - j| <= window // 2``), the same ``1 / sqrt(d)``, global keys taken out of the band and attended as
extra columns, global rows over every key. One deliberate difference: HF, the paper and LRA's JAX code
(``query_global``, ``key_global``, ``value_global`` Dense layers) project the global rows with a second set
of q, k, v; a mechanism here gets the block's one q, k, v and uses them for the global rows too. LRA sets
no global tokens, so at its setting (``num_global = 0``, our default) the second set is never used and the
results are the same; the test hands HF's global projections the same q, k, v. HF also needs ``n`` a
multiple of ``window`` (its model pads); this module takes any ``n``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._attention_dropout import attention_dropout, check_dropout, dropout_seed
from ._blocks import explicit_attention, masked_softmax, pad_tokens, real_tokens, scaled_scores
from .kernel import float32_region
from .registry import register


def naive_longformer(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                     window: int, num_global: int = 0, causal: bool = False) -> Tensor:
    """Oracle: softmax under the explicit banded (plus global rows and columns) ``(B, 1, N, N)`` mask."""
    pos = torch.arange(q.shape[-2], device=q.device)
    offset = pos[None, :] - pos[:, None]  # j - i
    allowed = (offset.abs() <= window // 2) | (pos[:, None] < num_global) | (pos[None, :] < num_global)
    if causal:
        allowed = allowed & (offset <= 0)
    allowed = allowed & real_tokens(key_padding_mask, q)[:, None, None, :]
    return explicit_attention(scaled_scores(q, k), allowed, v).to(v.dtype)


def _windows(x: Tensor, side: int, chunk: int, length: int) -> Tensor:
    """``(B, H, N, D)`` -> ``(B, H, M, chunk + 2 side, D)``: the keys around each chunk of queries."""
    padded = F.pad(x, (0, 0, side, length - x.shape[-2] + side))
    return padded.unfold(2, chunk + 2 * side, chunk).transpose(-1, -2)


@register("longformer")
class LongformerAttention(nn.Module):
    """Sliding-window attention with global tokens (see module docstring); chunked, O(n w) memory.

    ``dropout``: attention dropout on the weights in training (default 0: none), as
    ``lra_benchmarks/models/longformer/longformer_attention.py`` applies ``attention_dropout_rate``.
    """

    contract_options = {"window": 8, "chunk_size": 8}  # small, so contract tests see the structure

    supports_causal = True

    def __init__(self, *, window: int = 512, num_global: int = 0, chunk_size: int = 64, dropout: float = 0.0,
                 causal: bool = False):
        super().__init__()
        if window < 0 or num_global < 0 or chunk_size < 1:
            raise ValueError(f"longformer needs window >= 0, num_global >= 0, chunk_size >= 1; got "
                             f"window={window}, num_global={num_global}, chunk_size={chunk_size}")
        self.window, self.num_global, self.chunk_size, self.causal = window, num_global, chunk_size, causal
        self.dropout = check_dropout("longformer", dropout)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        n, out_dtype = q.shape[-2], v.dtype
        side, chunk, g = self.window // 2, self.chunk_size, min(self.num_global, n)
        m = -(-n // chunk)
        real = real_tokens(key_padding_mask, q)
        seed = dropout_seed() if self.training and self.dropout > 0 else None
        with float32_region(v):
            q, k, v = q.float(), k.float(), v.float()
            width = chunk + 2 * side
            queries = pad_tokens(q, m * chunk).unflatten(2, (m, chunk))  # (B, H, M, c, D)
            keys, values = _windows(k, side, chunk, m * chunk), _windows(v, side, chunk, m * chunk)
            scores = (queries @ keys.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, M, c, W)
            allowed = self._band(real, m, g)  # (B, M, c, W)
            if g:
                to_global = (queries @ k[:, :, None, :g].transpose(-1, -2)) * q.shape[-1] ** -0.5
                scores = torch.cat([scores, to_global], -1)  # (B, H, M, c, W + g)
                allowed = torch.cat([allowed, self._to_global(real, m, g)], -1)
            probs = masked_softmax(scores, allowed[:, None])
            if seed is not None:
                probs = self._drop(probs, seed, m, g)
            out = probs[..., :width] @ values
            if g:
                out = out + probs[..., width:] @ v[:, :, None, :g]
            out = out.flatten(2, 3)[:, :, :n]
            if g:
                out = torch.cat([self._global_rows(q, k, v, real, g, seed), out[:, :, g:]], dim=2)
        return out.to(out_dtype)

    def _drop(self, probs: Tensor, seed: int, m: int, g: int) -> Tensor:
        """Dropout of the chunked weights ``(B, H, M, c, W + g)``, named by query and key positions."""
        side, chunk = self.window // 2, self.chunk_size
        starts = torch.arange(m, device=probs.device)[:, None, None] * chunk  # (M, 1, 1)
        query_pos = starts + torch.arange(chunk, device=probs.device)[:, None]  # (M, c, 1)
        key_pos = starts + torch.arange(-side, chunk + side, device=probs.device)  # (M, 1, W)
        key_pos = torch.cat([key_pos, torch.arange(g, device=probs.device).expand(m, 1, g)], -1)
        return attention_dropout(probs, self.dropout, seed, query_pos, key_pos)

    def _band(self, real: Tensor, m: int, g: int) -> Tensor:
        """``(B, M, c, c + 2w)``: query row r of chunk t may see window column s (non-global keys only)."""
        side, chunk = self.window // 2, self.chunk_size
        rows = torch.arange(chunk, device=real.device)
        cols = torch.arange(chunk + 2 * side, device=real.device)
        offset = cols[None, :] - side - rows[:, None]  # j - i
        band = offset.abs() <= side
        if self.causal:
            band = band & (offset <= 0)
        key_pos = torch.arange(m, device=real.device)[:, None] * chunk + cols - side  # (M, W)
        key_real = F.pad(real, (side, m * chunk - real.shape[-1] + side)).unfold(1, chunk + 2 * side, chunk)
        return band & (key_pos >= g)[:, None, :] & key_real[:, :, None, :]

    def _to_global(self, real: Tensor, m: int, g: int) -> Tensor:
        """``(B, M, c, g)``: every query may see the (real) global keys, when causal only earlier ones."""
        allowed = real[:, None, None, :g].expand(-1, m, self.chunk_size, -1)
        if self.causal:
            query_pos = torch.arange(m * self.chunk_size, device=real.device).view(m, self.chunk_size, 1)
            allowed = allowed & (query_pos >= torch.arange(g, device=real.device))
        return allowed

    def _global_rows(self, q: Tensor, k: Tensor, v: Tensor, real: Tensor, g: int, seed: int | None) -> Tensor:
        """The first ``g`` queries attend to every (real, and when causal earlier) key: ``(B, H, g, D)``."""
        allowed = real[:, None, None, :]
        pos = torch.arange(q.shape[-2], device=q.device)
        if self.causal:
            allowed = allowed & (pos[None, :] <= pos[:g, None])
        probs = masked_softmax(scaled_scores(q[:, :, :g], k), allowed)
        if seed is not None:
            probs = attention_dropout(probs, self.dropout, seed, pos[:g, None], pos[None, :])
        return probs @ v

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_longformer(q, k, v, key_padding_mask, window=self.window, num_global=self.num_global,
                                causal=self.causal)
