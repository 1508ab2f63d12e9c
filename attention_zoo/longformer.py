"""Longformer attention (Beltagy et al., arXiv 2004.05150): a sliding window plus optional global tokens.

A query attends to the keys within ``w = window // 2`` positions on each side (``|i - j| <= w``, the
paper's "w/2 on each side", as in Hugging Face's ``attention_window``); the first ``num_global`` tokens
attend to every key and every query attends to them:

    out_i = sum_{j in A(i)} softmax_j(q_i . k_j / sqrt(d)) v_j,
    A(i) = {j : |i - j| <= w} u {j : j < g} u (all j if i < g)

LRA's JAX mask is 255 left + self + 256 right for window 512, and sets no global tokens (global_mask None):
hence ``num_global = 0`` by default; set 1 to make the first (CLS) token global as in the paper.
Fast form: query chunks of ``chunk_size`` rows against the ``chunk_size + 2w`` keys around them, plus
``g`` global key columns and ``g`` full global rows: O(n (c + 2w + g) d) time. The chunks' weights are
computed a block of chunks at a time and recomputed in the backward pass (``_recomputed_softmax``), so a
training step keeps O(n d) per head for backward, not the O(n (c + 2w)) weights, softmax and masks.

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

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._attention_dropout import attention_dropout, check_dropout, dropout_seed
from ._blocks import explicit_attention, masked_softmax, pad_tokens, real_tokens, scaled_scores
from ._recomputed_softmax import block_backward, block_forward, rows_per_block
from .first_order import first_order_only
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


class _Plan:
    """What the blocks of chunks of one call share: the module's options, masks, dropout seed, block size."""

    def __init__(self, module: LongformerAttention, real: Tensor, m: int, g: int, seed: int | None):
        self.module, self.real, self.m, self.g, self.seed = module, real, m, g, seed
        self.side, self.chunk = module.window // 2, module.chunk_size
        self.width = self.chunk + 2 * self.side
        self.key_real = F.pad(real, (self.side, m * self.chunk - real.shape[-1] + self.side))  # (B, M c + 2w)

    def blocks(self, q: Tensor):
        """``(first, last)`` chunk ranges whose ``(B, H, M', c, W + g)`` weights fit ``BLOCK_BYTES``."""
        size = rows_per_block(self.m, q.shape[0] * q.shape[1] * self.chunk, self.width + self.g, q.element_size())
        return [(first, min(first + size, self.m)) for first in range(0, self.m, size)]

    def keys(self, x: Tensor, x_global: Tensor, first: int, last: int) -> Tensor:
        """``(B, H, M', W + g, D)``: the window of each chunk ``first..last - 1`` then the global keys."""
        span = x[:, :, first * self.chunk:last * self.chunk + 2 * self.side]
        windows = span.unfold(2, self.width, self.chunk).transpose(-1, -2)
        if not self.g:
            return windows
        return torch.cat([windows, x_global[:, :, None].expand(-1, -1, last - first, -1, -1)], -2)

    def fold(self, grad: Tensor, into: Tensor, into_global: Tensor, first: int, last: int) -> None:
        """Adds the gradient of ``keys(x, x_global, first, last)`` to ``into`` and ``into_global``."""
        span = into[:, :, first * self.chunk:last * self.chunk + 2 * self.side]
        windows = grad[..., :self.width, :].transpose(-1, -2)
        span += torch.ops.aten.unfold_backward(windows, list(span.shape), 2, self.width, self.chunk)
        if self.g:
            into_global += grad[..., self.width:, :].sum(2)

    def allowed(self, first: int, last: int) -> Tensor:
        """``(B, 1, M', c, W + g)``."""
        allowed = self.module._band(self.key_real, first, last, self.g)
        if self.g:
            allowed = torch.cat([allowed, self.module._to_global(self.real, first, last, self.g)], -1)
        return allowed[:, None]

    def drop(self, first: int, last: int):
        if self.seed is None:
            return None
        return self.module._drop(self.seed, first, last, self.g, self.real.device)


class _BandAttention(torch.autograd.Function):
    """The chunks' banded (and global-column) softmax attention, ``(B, H, M c, D)``, over blocks of chunks
    whose weights are recomputed in backward (``_recomputed_softmax``)."""

    @staticmethod
    def forward(ctx, queries: Tensor, keys: Tensor, values: Tensor, keys_global: Tensor, values_global: Tensor,
                plan: _Plan) -> Tensor:
        ctx.save_for_backward(queries, keys, values, keys_global, values_global)
        ctx.plan = plan
        chunk, scale = plan.chunk, queries.shape[-1] ** -0.5
        out = torch.empty_like(queries)
        for first, last in plan.blocks(queries):
            q = queries[:, :, first * chunk:last * chunk].unflatten(2, (last - first, chunk))
            k, v = plan.keys(keys, keys_global, first, last), plan.keys(values, values_global, first, last)
            block = block_forward(q, k, v, scale, plan.allowed(first, last), plan.drop(first, last))
            out[:, :, first * chunk:last * chunk] = block.flatten(2, 3)
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out: Tensor):
        queries, keys, values, keys_global, values_global = ctx.saved_tensors
        plan = ctx.plan
        chunk, scale = plan.chunk, queries.shape[-1] ** -0.5
        grad_q = torch.empty_like(queries)
        grad_k, grad_v = torch.zeros_like(keys), torch.zeros_like(values)
        grad_kg, grad_vg = torch.zeros_like(keys_global), torch.zeros_like(values_global)
        for first, last in plan.blocks(queries):
            rows = slice(first * chunk, last * chunk)
            q = queries[:, :, rows].unflatten(2, (last - first, chunk))
            k, v = plan.keys(keys, keys_global, first, last), plan.keys(values, values_global, first, last)
            dq, dk, dv = block_backward(q, k, v, grad_out[:, :, rows].unflatten(2, (last - first, chunk)), scale,
                                        plan.allowed(first, last), plan.drop(first, last))
            grad_q[:, :, rows] = dq.flatten(2, 3)
            plan.fold(dk, grad_k, grad_kg, first, last)
            plan.fold(dv, grad_v, grad_vg, first, last)
        return grad_q, grad_k, grad_v, grad_kg, grad_vg, None


@register("longformer")
class LongformerAttention(nn.Module):
    """Sliding-window attention with global tokens (see module docstring); chunked, recomputed in backward.

    ``dropout``: attention dropout on the weights in training (default 0: none), as
    ``lra_benchmarks/models/longformer/longformer_attention.py`` applies ``attention_dropout_rate``.
    """

    contract_options = {"window": 8, "chunk_size": 8}  # small, so contract tests see the structure

    supports_causal = True
    quadratic = False

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
            queries = pad_tokens(q, m * chunk)  # (B, H, M c, D)
            keys, values = (F.pad(x, (0, 0, side, m * chunk - n + side)) for x in (k, v))  # (B, H, M c + 2w, D)
            plan = _Plan(self, real, m, g, seed)
            out = _BandAttention.apply(queries, keys, values, k[:, :, :g], v[:, :, :g], plan)[:, :, :n]
            if g:
                out = torch.cat([self._global_rows(q, k, v, real, g, seed), out[:, :, g:]], dim=2)
        return out.to(out_dtype)

    def _drop(self, seed: int, first: int, last: int, g: int, device: torch.device):
        """Dropout of chunks ``first..last - 1``'s weights ``(B, H, M', c, W + g)``, named by query and key
        positions."""
        side, chunk = self.window // 2, self.chunk_size
        starts = torch.arange(first, last, device=device)[:, None, None] * chunk  # (M', 1, 1)
        query_pos = starts + torch.arange(chunk, device=device)[:, None]  # (M', c, 1)
        key_pos = starts + torch.arange(-side, chunk + side, device=device)  # (M', 1, W)
        key_pos = torch.cat([key_pos, torch.arange(g, device=device).expand(last - first, 1, g)], -1)
        return partial(attention_dropout, p=self.dropout, seed=seed, query_pos=query_pos, key_pos=key_pos)

    def _band(self, key_real: Tensor, first: int, last: int, g: int) -> Tensor:
        """``(B, M', c, c + 2w)``: query row r of chunk t (``first <= t < last``) may see window column s
        (non-global keys only). ``key_real``: ``(B, M c + 2w)``, the real-token mask padded by w each side."""
        side, chunk = self.window // 2, self.chunk_size
        rows = torch.arange(chunk, device=key_real.device)
        cols = torch.arange(chunk + 2 * side, device=key_real.device)
        offset = cols[None, :] - side - rows[:, None]  # j - i
        band = offset.abs() <= side
        if self.causal:
            band = band & (offset <= 0)
        key_pos = torch.arange(first, last, device=key_real.device)[:, None] * chunk + cols - side  # (M', W)
        windows = key_real[:, first * chunk:last * chunk + 2 * side].unfold(1, chunk + 2 * side, chunk)
        return band & (key_pos >= g)[:, None, :] & windows[:, :, None, :]

    def _to_global(self, real: Tensor, first: int, last: int, g: int) -> Tensor:
        """``(B, M', c, g)``: every query of chunks ``first..last - 1`` may see the (real) global keys, when
        causal only earlier ones."""
        allowed = real[:, None, None, :g].expand(-1, last - first, self.chunk_size, -1)
        if self.causal:
            query_pos = torch.arange(first * self.chunk_size, last * self.chunk_size,
                                     device=real.device).view(last - first, self.chunk_size, 1)
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
