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
from torch.autograd.function import once_differentiable

from ._sketch import CHUNK_BYTES, chunk_of, put_chunk, token_chunks
from .kernel import normalization_backward


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


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v1: Tensor, param_q: Tensor | None, param_k: Tensor | None,
                eps: float | Tensor, make_map: MakeMap, chunk_bytes: int) -> Tensor:
        b, h, n, _ = q.shape
        rows, width = b * h, v1.shape[-1]
        map_q, map_k = make_map(param_q, q, False), make_map(param_k, k, False)
        chunks = token_chunks(n, rows, max(map_q.width(), map_k.width()), q.element_size(), chunk_bytes)
        state = q.new_zeros(rows, map_k.features, width)  # (B H, m, D + 1)
        for sl in chunks:
            state.baddbmm_(map_k.forward(chunk_of(k, sl)).transpose(1, 2), chunk_of(v1, sl))
        out, den = q.new_empty(b, h, n, width - 1), q.new_empty(b, h, n, 1)
        for sl in chunks:
            num_den = torch.bmm(map_q.forward(chunk_of(q, sl)), state)  # (B H, C, D + 1)
            den_c = num_den[..., -1:].add_(eps_of(eps, sl))
            put_chunk(den, sl, den_c)
            put_chunk(out, sl, num_den[..., :-1].div_(den_c))
        ctx.save_for_backward(q, k, v1, param_q, param_k, state, out, den)
        ctx.make_map, ctx.chunk_bytes = make_map, chunk_bytes
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        q, k, v1, param_q, param_k, state, out, den = ctx.saved_tensors
        b, h, n, _ = q.shape
        rows, width = b * h, v1.shape[-1]
        need = ctx.needs_input_grad
        map_q, map_k = ctx.make_map(param_q, q, need[3]), ctx.make_map(param_k, k, need[4])
        chunks = token_chunks(n, rows, max(map_q.width(), map_k.width()), q.element_size(), ctx.chunk_bytes)
        grad_q, grad_k, grad_v1 = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v1)
        grad_state = torch.zeros_like(state)  # (B H, m, D + 1)
        grad_nd = q.new_empty(rows, chunks[0].stop, width)  # d loss / d [num, den] of a chunk
        state_t = state.transpose(1, 2).contiguous()  # (B H, D + 1, m): contiguous operands are faster
        for sl in chunks:
            g = normalization_backward(chunk_of(grad_out, sl), chunk_of(out, sl), chunk_of(den, sl),
                                       grad_nd[:, : sl.stop - sl.start])
            q_c = chunk_of(q, sl)
            grad_state.baddbmm_(map_q.recompute(q_c).transpose(1, 2), g)
            put_chunk(grad_q, sl, map_q.backprop(q_c, g @ state_t))
        grad_state_t = grad_state.transpose(1, 2).contiguous()
        for sl in chunks:
            k_c, v1_c = chunk_of(k, sl), chunk_of(v1, sl)
            phi_k = map_k.recompute(k_c)
            put_chunk(grad_v1, sl, phi_k @ grad_state)
            put_chunk(grad_k, sl, map_k.backprop(k_c, v1_c @ grad_state_t))
        grad_param_q = map_q.grad_param() if need[3] else None
        grad_param_k = map_k.grad_param() if need[4] else None
        return grad_q, grad_k, grad_v1, grad_param_q, grad_param_k, None, None, None


def chunked_kernel_attention(q: Tensor, k: Tensor, v1: Tensor, param_q: Tensor | None, param_k: Tensor | None,
                             make_map: MakeMap, *, eps: float | Tensor,
                             chunk_bytes: int = CHUNK_BYTES) -> Tensor:
    """Normalised non-causal attention on chunked features; ``v1 = [v, 1]`` with padded keys' rows zero.

    ``q, k`` ``(B, H, N, d)``, ``v1`` ``(B, H, N, D + 1)``, ``eps`` a float or per query ``(B, H, N, 1)``;
    returns ``(B, H, N, D)``. ``make_map`` builds the query and key maps from ``param_q``, ``param_k``.
    """
    return _ChunkedAttention.apply(q, k, v1, param_q, param_k, eps, make_map, chunk_bytes)
