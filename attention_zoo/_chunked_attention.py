"""Non-causal linear attention on a chunked feature map, fused: no ``(N, m)`` tensor, forward or backward.

    out_i = phi_Q(q_i)^T S / (phi_Q(q_i)^T z + eps_i),   [S, z] = sum_j phi_K(k_j) [v_j, 1]^T

(Katharopoulos et al., arXiv 2006.16236, eq. 2-4), the fast path of LLoPS (arXiv 2610.14219), BASED
(arXiv 2402.18668) and PolySketchFormer (arXiv 2310.01655). Keys, then queries, go through in cache-sized
token chunks: a chunk's features feed the ``(m, D + 1)`` state (or read it) and are dropped. Backward
recomputes each chunk's features. Autograd keeps ``q, k, [v, 1]``, the maps' parameters, the state, the
output and the denominator: O(N d) memory.

A feature map is given as ``make_map(param, like, need_grad) -> ChunkMap``: ``param`` a tensor (or None)
whose gradient the map accumulates, ``like`` the ``(B, H, N, d)`` input (batch, dtype).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import Tensor

from ._sketch import CHUNK_BYTES, chunk_of, put_chunk, token_chunks
from .first_order import first_order_only
from .kernel import normalization_backward, prefix_lengths


class ChunkMap(Protocol):
    """A feature map on token chunks ``x_c`` ``(B H, C, d)``, with buffers reused across chunks."""

    features: int  # m

    def width(self) -> int:
        """Numbers per token of the largest per-chunk buffer: sets the chunk length."""

    def forward(self, x_c: Tensor) -> Tensor:
        """``phi(x_c)`` ``(B H, C, m)``, possibly a buffer overwritten by the next call."""

    def recompute(self, x_c: Tensor) -> Tensor:
        """As ``forward``, keeping what ``backprop`` needs."""

    def backprop(self, x_c: Tensor, grad_phi: Tensor) -> Tensor:
        """After ``recompute(x_c)``: ``grad_x_c`` (may overwrite ``grad_phi``); the parameter's grad adds up."""

    def grad_param(self) -> Tensor:
        """The accumulated gradient of ``param``, in its shape."""


MakeMap = Callable[[Tensor | None, Tensor, bool], ChunkMap]


def eps_of(eps: float | Tensor, sl: slice) -> float | Tensor:
    """A float ``eps``, or tokens ``sl`` of a per-query ``eps`` ``(B, H, N, 1)``."""
    return chunk_of(eps, sl) if isinstance(eps, Tensor) else eps


def active_groups(chunks: list[slice], lengths: list[int] | None, batch: int) -> list[tuple[int, list[slice]]]:
    """Consecutive chunks grouped by how many sequences reach into them: ``(a, chunks)`` where the first ``a``
    sequences (``lengths`` sorted longest first) have a token in each chunk; without ``lengths``, all of them."""
    if lengths is None:
        return [(batch, chunks)]
    groups: list[tuple[int, list[slice]]] = []
    for sl in chunks:
        a = sum(length > sl.start for length in lengths)
        if a == 0:
            break
        if groups and groups[-1][0] == a:
            groups[-1][1].append(sl)
        else:
            groups.append((a, [sl]))
    return groups


def group_map(full: ChunkMap, a: int, make_map: MakeMap, param: Tensor | None, x: Tensor, need_grad: bool) -> ChunkMap:
    """The map for the first ``a`` sequences of ``x``: ``full`` when that is all of them, else a new one."""
    return full if a == x.shape[0] else make_map(param, x[:a], need_grad)


def add_grad(total: Tensor | None, part: Tensor | None) -> Tensor | None:
    """A parameter's gradient summed over the maps of the groups."""
    return part if total is None else total + part


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v1: Tensor, param_q: Tensor | None, param_k: Tensor | None,
                eps: float | Tensor, make_map: MakeMap, chunk_bytes: int, lengths: list[int] | None) -> Tensor:
        b, h, n, _ = q.shape
        rows, width = b * h, v1.shape[-1]
        map_q, map_k = make_map(param_q, q, False), make_map(param_k, k, False)
        chunks = token_chunks(n, rows, max(map_q.width(), map_k.width()), q.element_size(), chunk_bytes)
        groups = active_groups(chunks, lengths, b)
        state = q.new_zeros(rows, map_k.features, width)  # (B H, m, D + 1)
        for a, group in groups:  # the first a sequences: a h rows
            map_k = group_map(map_k, a, make_map, param_k, k, False)
            for sl in group:
                state[: a * h].baddbmm_(map_k.forward(chunk_of(k[:a], sl)).transpose(1, 2), chunk_of(v1[:a], sl))
        skipped = lengths is not None
        out = q.new_zeros(b, h, n, width - 1) if skipped else q.new_empty(b, h, n, width - 1)
        den = q.new_ones(b, h, n, 1) if skipped else q.new_empty(b, h, n, 1)
        for a, group in groups:
            map_q = group_map(map_q, a, make_map, param_q, q, False)
            for sl in group:
                num_den = torch.bmm(map_q.forward(chunk_of(q[:a], sl)), state[: a * h])  # (a H, C, D + 1)
                den_c = num_den[..., -1:].add_(eps_of(eps[:a] if isinstance(eps, Tensor) else eps, sl))
                put_chunk(den[:a], sl, den_c)
                put_chunk(out[:a], sl, num_den[..., :-1].div_(den_c))
        ctx.save_for_backward(q, k, v1, param_q, param_k, state, out, den)
        ctx.make_map, ctx.chunk_bytes, ctx.lengths = make_map, chunk_bytes, lengths
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out: Tensor):
        q, k, v1, param_q, param_k, state, out, den = ctx.saved_tensors
        b, h, n, _ = q.shape
        rows, width = b * h, v1.shape[-1]
        need = ctx.needs_input_grad
        map_q, map_k = ctx.make_map(param_q, q, need[3]), ctx.make_map(param_k, k, need[4])
        chunks = token_chunks(n, rows, max(map_q.width(), map_k.width()), q.element_size(), ctx.chunk_bytes)
        groups = active_groups(chunks, ctx.lengths, b)
        new = torch.empty_like if ctx.lengths is None else torch.zeros_like  # skipped tokens' gradients are 0
        grad_q, grad_k, grad_v1 = new(q), new(k), new(v1)
        grad_state = torch.zeros_like(state)  # (B H, m, D + 1)
        grad_nd = q.new_empty(rows, chunks[0].stop, width)  # d loss / d [num, den] of a chunk
        state_t = state.transpose(1, 2).contiguous()  # (B H, D + 1, m): contiguous operands are faster
        grad_param_q = grad_param_k = None
        for a, group in groups:
            r = a * h
            map_a = group_map(map_q, a, ctx.make_map, param_q, q, need[3])
            for sl in group:
                g = normalization_backward(chunk_of(grad_out[:a], sl), chunk_of(out[:a], sl), chunk_of(den[:a], sl),
                                           grad_nd[:r, : sl.stop - sl.start])
                q_c = chunk_of(q[:a], sl)
                grad_state[:r].baddbmm_(map_a.recompute(q_c).transpose(1, 2), g)
                put_chunk(grad_q[:a], sl, map_a.backprop(q_c, g @ state_t[:r]))
            if need[3]:
                grad_param_q = add_grad(grad_param_q, map_a.grad_param())
        grad_state_t = grad_state.transpose(1, 2).contiguous()
        for a, group in groups:
            r = a * h
            map_a = group_map(map_k, a, ctx.make_map, param_k, k, need[4])
            for sl in group:
                k_c, v1_c = chunk_of(k[:a], sl), chunk_of(v1[:a], sl)
                phi_k = map_a.recompute(k_c)
                put_chunk(grad_v1[:a], sl, phi_k @ grad_state[:r])
                put_chunk(grad_k[:a], sl, map_a.backprop(k_c, v1_c @ grad_state_t[:r]))
            if need[4]:
                grad_param_k = add_grad(grad_param_k, map_a.grad_param())
        return grad_q, grad_k, grad_v1, grad_param_q, grad_param_k, None, None, None, None


class _PermuteBatch(torch.autograd.Function):
    """``x[order]`` along dim 0, with a gather (``grad[inverse]``) for backward instead of index_select's
    scatter-add: on CPU the scatter costs ~3x the gather."""

    @staticmethod
    def forward(ctx, x: Tensor, order: Tensor, inverse: Tensor) -> Tensor:
        ctx.save_for_backward(inverse)
        return x.index_select(0, order)

    @staticmethod
    @first_order_only
    def backward(ctx, grad: Tensor):
        (inverse,) = ctx.saved_tensors
        return grad.index_select(0, inverse), None, None


def permute_batch(x: Tensor, order: Tensor, inverse: Tensor) -> Tensor:
    """``x.index_select(0, order)`` (contiguous) where ``inverse`` undoes ``order``; gathers both ways."""
    return _PermuteBatch.apply(x, order, inverse)


def chunked_kernel_attention(q: Tensor, k: Tensor, v1: Tensor, param_q: Tensor | None, param_k: Tensor | None,
                             make_map: MakeMap, *, eps: float | Tensor, chunk_bytes: int = CHUNK_BYTES,
                             key_padding_mask: Tensor | None = None) -> Tensor:
    """Normalised non-causal attention on chunked features; ``v1 = [v, 1]`` with padded keys' rows zero.

    ``q, k`` ``(B, H, N, d)``, ``v1`` ``(B, H, N, D + 1)``, ``eps`` a float or per query ``(B, H, N, 1)``;
    returns ``(B, H, N, D)``. ``make_map`` builds the query and key maps from ``param_q``, ``param_k``
    (per head: no batch dimension). With a ``key_padding_mask`` ``(B, N)`` whose rows are real tokens then
    padding (``prefix_lengths``; LRA's batches), chunks past a sequence's end are skipped (their outputs and
    gradients 0), the sequences taken longest first so the ones still running are a prefix of the batch. Real
    tokens get the same numbers either way: a skipped chunk's keys only ever added zeros (``v1``'s pad rows).
    """
    padded = key_padding_mask is not None and not bool(key_padding_mask.all())
    lengths = prefix_lengths(key_padding_mask) if padded else None  # None: nothing to skip
    if lengths is None:
        return _ChunkedAttention.apply(q, k, v1, param_q, param_k, eps, make_map, chunk_bytes, None)
    order = torch.argsort(lengths, descending=True, stable=True)
    if bool((order == torch.arange(len(order), device=order.device)).all()):
        return _ChunkedAttention.apply(q, k, v1, param_q, param_k, eps, make_map, chunk_bytes, lengths.tolist())
    inverse = torch.argsort(order)
    q, k, v1 = (permute_batch(t, order, inverse) for t in (q, k, v1))  # (B, H, N, .) longest first, contiguous
    eps = permute_batch(eps, order, inverse) if isinstance(eps, Tensor) else eps
    out = _ChunkedAttention.apply(q, k, v1, param_q, param_k, eps, make_map, chunk_bytes, lengths[order].tolist())
    return permute_batch(out, inverse, order)
