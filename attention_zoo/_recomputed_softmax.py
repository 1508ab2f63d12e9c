"""Softmax attention over blocks of query rows whose weights are recomputed in the backward pass.

``out = drop(masked_softmax(q k^T * scale, allowed)) v`` for one block of query rows at a time: the
``rows x keys`` scores, weights and dropout masks exist for one block only, and the backward pass
recomputes them block by block from ``q, k, v`` instead of autograd keeping every block's weights (the
memory of a training step on long sequences is then that of the inputs, not of the weights). The backward
is written out: with ``P`` the weights, ``G = dO v^T`` and ``dP = drop(G)``,

    dv = drop(P)^T dO,   dS = P (dP - rowsum(P dP)),   dq = scale dS k,   dk = scale dS^T q.

Same values as autograd through the explicit form: rows where nothing is allowed have ``P = 0`` (as
``masked_softmax`` gives) and so ``dS = 0``; dropout is a fixed mask times ``1 / (1 - p)``, so the
backward applies the same function to ``G``, and since it multiplies elementwise, ``P dP = G drop(P)``: one
dropout of ``P`` serves ``dv`` and ``dS`` (a hashed mask is computed once a block, not twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from .first_order import first_order_only

Drop = Callable[[Tensor], Tensor] | None
Blocks = Callable[[Tensor, Tensor], Iterable[tuple[slice, Drop]]]  # (q, k) -> (rows, drop) per block

BLOCK_BYTES = 2**22  # weights per block: 4 MiB (a few such tensors stay in this CPU's cache)


def rows_per_block(rows: int, batch_rows: int, width: int, element_size: int, block_bytes: int | None = None) -> int:
    """How many of ``rows`` query rows (times ``batch_rows`` leading entries) make ``width``-wide weights of
    ``block_bytes`` (default ``BLOCK_BYTES``, read at the call); at least one."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    return max(1, min(rows, block_bytes // max(1, batch_rows * width * element_size)))


def row_blocks(q: Tensor, width: int) -> list[slice]:
    """Slices of the query rows of ``q`` ``(B, H, N, d)`` whose ``width``-wide weights make one block each."""
    b, h, n, _ = q.shape
    size = rows_per_block(n, b * h, width, q.element_size())
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def block_weights(q: Tensor, k: Tensor, scale: float, allowed: Tensor | None) -> Tensor:
    """``softmax(q k^T * scale)`` over the last dim, restricted to ``allowed`` (a row with none allowed: 0).

    The same operations as ``_blocks.masked_softmax(scaled scores, allowed)``, in place on the scores.
    """
    scores = (q @ k.transpose(-1, -2)).mul_(scale)
    if allowed is None:
        return scores.softmax(-1)
    probs = scores.masked_fill_(~allowed, torch.finfo(scores.dtype).min).softmax(-1)
    return probs.mul_(allowed.any(-1, keepdim=True))


def block_forward(q: Tensor, k: Tensor, v: Tensor, scale: float, allowed: Tensor | None, drop: Drop) -> Tensor:
    """One block's output ``drop(P) v``."""
    probs = block_weights(q, k, scale, allowed)
    return (probs if drop is None else drop(probs)) @ v


def block_backward(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, scale: float, allowed: Tensor | None,
                   drop: Drop) -> tuple[Tensor, Tensor, Tensor]:
    """``(dq, dk, dv)`` of one block, the weights recomputed (shapes of ``q``, ``k``, ``v``)."""
    probs = block_weights(q, k, scale, allowed)
    kept = probs if drop is None else drop(probs)  # a new tensor: probs is read again below
    grad_v = kept.transpose(-1, -2) @ grad_out
    grad_probs = (grad_out @ v.transpose(-1, -2)).mul_(kept)  # P dP = G drop(P)
    del kept
    row = grad_probs.sum(-1, keepdim=True)
    grad_scores = grad_probs.sub_(probs.mul_(row)).mul_(scale)  # P (dP - rowsum(P dP)) * scale
    return grad_scores @ k, grad_scores.transpose(-1, -2) @ q, grad_v


class _RowBlocks(torch.autograd.Function):
    """``drop(softmax(q k^T / sqrt(d))) v`` without a mask, one block of query rows at a time as ``blocks(q, k)``
    yields them, the weights recomputed in backward."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, blocks: Blocks) -> Tensor:
        ctx.save_for_backward(q, k, v)
        ctx.blocks = blocks
        out = q.new_empty(q.shape[:-1] + v.shape[-1:])
        for rows, drop in blocks(q, k):
            out[:, :, rows] = block_forward(q[:, :, rows], k, v, q.shape[-1] ** -0.5, None, drop)
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out: Tensor):
        q, k, v = ctx.saved_tensors
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for rows, drop in ctx.blocks(q, k):
            dq, dk, dv = block_backward(q[:, :, rows], k, v, grad_out[:, :, rows], q.shape[-1] ** -0.5, None, drop)
            grad_q[:, :, rows] = dq
            grad_k += dk
            grad_v += dv
        return grad_q, grad_k, grad_v, None


def row_block_attention(q: Tensor, k: Tensor, v: Tensor, blocks: Blocks) -> Tensor:
    """``q, k, v`` ``(B, H, N|M, .)``: unmasked softmax attention whose ``blocks(q, k)`` name the query rows of each
    block and its dropout (called again in backward: it must yield the same blocks and drops)."""
    return _RowBlocks.apply(q, k, v, blocks)
