"""Non-causal linear attention on polynomial-sketch features, fused: LLoPS' fast path (arXiv 2610.14219).

    out_i = phi_Q(q_i)^T S / (phi_Q(q_i)^T z + eps),   [S, z] = sum_j phi_K(k_j) [v_j, 1]^T

with ``phi`` the (squared) sketch of ``_sketch``. Keys, then queries, go through in cache-sized token
chunks: a chunk's features feed the ``(m, D + 1)`` state (or read it) and are dropped, so no ``(N, m)``
tensor exists in forward or backward. Backward recomputes each chunk's projections, as the sketch does.
Autograd keeps ``q, k, [v, 1]``, Theta, the state, the output and the denominator: O(N d) memory.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ._sketch import CHUNK_BYTES, ChunkSketch, chunk_of, put_chunk, token_chunks
from .kernel import normalization_backward


class _SketchAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v1: Tensor, theta_q: Tensor, theta_k: Tensor, square: bool,
                eps: float, chunk_bytes: int) -> Tensor:
        b, h, n, _ = q.shape
        rows, width = b * h, v1.shape[-1]
        sketch_q, sketch_k = ChunkSketch(theta_q, b, square), ChunkSketch(theta_k, b, square)
        chunks = token_chunks(n, rows, sketch_q.width(), q.element_size(), chunk_bytes)
        state = q.new_zeros(rows, theta_q.shape[-1], width)  # (B H, m, D + 1)
        for sl in chunks:
            state.baddbmm_(sketch_k.forward(chunk_of(k, sl)).transpose(1, 2), chunk_of(v1, sl))
        out, den = q.new_empty(b, h, n, width - 1), q.new_empty(b, h, n, 1)
        for sl in chunks:
            num_den = torch.bmm(sketch_q.forward(chunk_of(q, sl)), state)  # (B H, C, D + 1)
            den_c = num_den[..., -1:].add_(eps)
            put_chunk(den, sl, den_c)
            put_chunk(out, sl, num_den[..., :-1].div_(den_c))
        ctx.save_for_backward(q, k, v1, theta_q, theta_k, state, out, den)
        ctx.square, ctx.chunk_bytes = square, chunk_bytes
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        q, k, v1, theta_q, theta_k, state, out, den = ctx.saved_tensors
        b, h, n, _ = q.shape
        rows, width = b * h, v1.shape[-1]
        need = ctx.needs_input_grad
        sketch_q = ChunkSketch(theta_q, b, ctx.square, need[3])
        sketch_k = ChunkSketch(theta_k, b, ctx.square, need[4])
        chunks = token_chunks(n, rows, sketch_q.width(), q.element_size(), ctx.chunk_bytes)
        grad_q, grad_k, grad_v1 = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v1)
        grad_state = torch.zeros_like(state)  # (B H, m, D + 1)
        grad_nd = q.new_empty(rows, chunks[0].stop, width)  # d loss / d [num, den] of a chunk
        state_t = state.transpose(1, 2).contiguous()  # (B H, D + 1, m): contiguous operands are faster
        for sl in chunks:
            g = normalization_backward(chunk_of(grad_out, sl), chunk_of(out, sl), chunk_of(den, sl),
                                       grad_nd[:, : sl.stop - sl.start])
            q_c = chunk_of(q, sl)
            grad_state.baddbmm_(sketch_q.recompute(q_c).transpose(1, 2), g)
            put_chunk(grad_q, sl, sketch_q.backprop(q_c, g @ state_t))
        grad_state_t = grad_state.transpose(1, 2).contiguous()
        for sl in chunks:
            k_c, v1_c = chunk_of(k, sl), chunk_of(v1, sl)
            phi_k = sketch_k.recompute(k_c)
            put_chunk(grad_v1, sl, phi_k @ grad_state)
            put_chunk(grad_k, sl, sketch_k.backprop(k_c, v1_c @ grad_state_t))
        grad_theta_q = sketch_q.grad_theta(b) if need[3] else None
        grad_theta_k = sketch_k.grad_theta(b) if need[4] else None
        return grad_q, grad_k, grad_v1, grad_theta_q, grad_theta_k, None, None, None


def sketch_attention(q: Tensor, k: Tensor, v1: Tensor, theta_q: Tensor, theta_k: Tensor, *, square: bool,
                     eps: float, chunk_bytes: int = CHUNK_BYTES) -> Tensor:
    """Normalised non-causal attention on sketch features; ``v1 = [v, 1]`` with padded keys' rows zero.

    ``q, k`` ``(B, H, N, d)``, ``v1`` ``(B, H, N, D + 1)``, Theta ``(H, t, p, d, m)``; returns ``(B, H, N, D)``.
    """
    return _SketchAttention.apply(q, k, v1, theta_q, theta_k, square, eps, chunk_bytes)
