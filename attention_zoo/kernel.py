"""Shared pieces of kernelized (linear) attention.

Generic normalised form (Katharopoulos et al., arXiv 2006.16236, eq. 2-4)::

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j) + eps)

computed in O(n m d) by associativity, with ``sum_j`` over real keys only (padded ``phi(k_j)`` and
``v_j`` are zeroed) and, when causal, over ``j <= i`` via chunked prefix sums.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .first_order import first_order_only


def float32_region(x: Tensor):
    """Context where autocast is off, so feature maps are computed in float32."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def at_least_float32(x: Tensor) -> Tensor:
    """``x`` in float32, or in float64 if it already is (half precision is widened, double kept)."""
    return x.double() if x.dtype == torch.float64 else x.float()


def expand_key_mask(key_padding_mask: Tensor | None, x: Tensor) -> Tensor | None:
    """``(B, N)`` bool mask to ``(B, 1, N, 1)`` in ``x``'s dtype, or None."""
    if key_padding_mask is None:
        return None
    return key_padding_mask[:, None, :, None].to(x.dtype)


def kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    eps: float | Tensor = 1e-6,
    causal: bool = False,
    chunk_size: int = 256,
) -> Tensor:
    """Normalised linear attention from features ``phi_q, phi_k`` ``(B, H, N, M)`` and ``v`` ``(B, H, N, D)``.

    ``eps`` a float or per query ``(B, H, N, 1)``. Computed in float32 (float64 for float64 inputs);
    returns ``v``'s dtype.
    """
    out_dtype = v.dtype
    with float32_region(v):
        phi_q, phi_k, v = (at_least_float32(t) for t in (phi_q, phi_k, v))
        v1 = values_and_ones(v, key_padding_mask)  # (B, H, N, D + 1), padded rows zero
        if causal:
            num_den = causal_products(phi_q, phi_k, v1, chunk_size)
            out = num_den[..., :-1] / (num_den[..., -1:] + eps)
        else:
            out = _GlobalKernelAttention.apply(phi_q, phi_k, v1, eps)
    return out.to(out_dtype)


def power_of_two_exponent(x: Tensor) -> Tensor:
    """``e`` with ``x / 2^e`` in [0.5, 1) (0 for 0), clamped to +-100 so ``2^-e`` is a normal float32."""
    return torch.frexp(x).exponent.clamp_(-100, 100)


def rescale_homogeneous(q: Tensor, k: Tensor, degree: int, eps: float,
                        key_padding_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``q', k', eps'`` for a kernel ``phi_Q(q) . phi_K(k)`` homogeneous of ``degree`` in q and in k.

    ``phi(2^-e x) = 2^-(e degree) phi(x)``: each query is scaled by its own ``2^-a_i`` and all keys of a
    (sequence, head) by one ``2^-b`` (a per-key scale would change the weights), so ``num_i``, ``den_i``
    scale by ``2^-(a_i + b) degree`` and ``eps_i' = 2^-(a_i + b) degree eps`` keeps ``num / (den + eps)``.
    The largest entry of each query and of the largest real key lands in [0.5, 1), so features stay in
    range for inputs up to 2^100 (keys far smaller than their sequence's largest may underflow to weight 0).
    Powers of two scale floats exactly, so where nothing over- or underflows the result is bit for bit the
    unscaled one. ``q, k`` ``(B, H, N, d)``; ``eps'`` ``(B, H, N, 1)`` in q's dtype.
    """
    a = power_of_two_exponent(q.detach().abs().amax(-1, keepdim=True))  # (B, H, N, 1)
    key_max = k.detach().abs().amax(-1, keepdim=True)
    if key_padding_mask is not None:  # padded keys (any garbage) do not set the scale
        key_max = key_max.masked_fill(~key_padding_mask[:, None, :, None], 0)
    b = power_of_two_exponent(key_max.amax(-2, keepdim=True))  # (B, H, 1, 1)
    exponent = ((a + b) * degree).clamp_(-1000, 1000).double()  # float64: 2^-1000 is still normal
    tiny, huge = torch.finfo(q.dtype).tiny, torch.finfo(q.dtype).max  # eps' > 0 keeps 0 / (0 + eps') = 0
    eps_scaled = (eps * torch.exp2(-exponent)).clamp_(tiny, huge).to(q.dtype)
    return q * torch.exp2(-a.to(q.dtype)), k * torch.exp2(-b.to(k.dtype)), eps_scaled


def values_and_ones(v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """``[v, 1]`` ``(B, H, N, D + 1)`` with padded keys' rows zeroed: the last column sums the weights.

    Zeroing ``v``'s row j removes key j from numerator and denominator whatever ``phi(k_j)`` is, so the
    features themselves need no mask (and their gradient there is zero).
    """
    v1 = torch.cat([v, v.new_ones(v.shape[:-1] + (1,))], dim=-1)
    if key_padding_mask is None:
        return v1
    return v1.masked_fill_(~key_padding_mask[:, None, :, None], 0)  # in place: cat's backward needs no output


def prefix_lengths(key_padding_mask: Tensor) -> Tensor | None:
    """Each sequence's length ``(B,)`` when every row of the ``(B, N)`` mask is its real tokens followed by
    padding (LRA's batches), else None: what softmax's per-sequence path and the chunked kernel attention's
    padding skip need."""
    lengths = key_padding_mask.sum(-1)
    positions = torch.arange(key_padding_mask.shape[-1], device=key_padding_mask.device)
    return lengths if torch.equal(key_padding_mask, positions < lengths[:, None]) else None


def normalization_backward(grad_out: Tensor, out: Tensor, den: Tensor, into: Tensor) -> Tensor:
    """``d loss / d [num, den]`` of ``out = num / den`` written into ``into`` ``(..., D + 1)``."""
    grad_num = torch.div(grad_out, den, out=into[..., :-1])
    into[..., -1] = torch.linalg.vecdot(grad_num, out).neg_()
    return into


class _GlobalKernelAttention(torch.autograd.Function):
    """``num_den = phi_q (phi_k^T v1)``, ``out = num / (den + eps)`` with a hand-written backward.

    Saves the features, ``v1``, the ``(M, D + 1)`` state, the output and the denominator; backward is four
    matmuls and no ``(N, M)`` elementwise pass (autograd's chain would run several).
    """

    @staticmethod
    def forward(ctx, phi_q: Tensor, phi_k: Tensor, v1: Tensor, eps: float | Tensor) -> Tensor:
        state = phi_k.transpose(-1, -2) @ v1  # (B, H, M, D + 1)
        num_den = phi_q @ state  # (B, H, N, D + 1)
        den = num_den[..., -1:] + eps
        out = num_den[..., :-1].div_(den)
        ctx.save_for_backward(phi_q, phi_k, v1, state, out, den)
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out: Tensor):
        phi_q, phi_k, v1, state, out, den = ctx.saved_tensors
        grad_nd = normalization_backward(grad_out, out, den, torch.empty_like(v1))  # (B, H, N, D + 1)
        grad_q = grad_nd @ state.transpose(-1, -2) if ctx.needs_input_grad[0] else None
        grad_state = phi_q.transpose(-1, -2) @ grad_nd  # (B, H, M, D + 1)
        grad_k = v1 @ grad_state.transpose(-1, -2) if ctx.needs_input_grad[1] else None
        grad_v1 = phi_k @ grad_state if ctx.needs_input_grad[2] else None
        return grad_q, grad_k, grad_v1, None


def causal_products(phi_q: Tensor, phi_k: Tensor, v1: Tensor, chunk_size: int) -> Tensor:
    """``sum_{j<=i} (phi_q_i . phi_k_j) v1_j`` by chunks: exact inside a chunk, a running state across."""
    n = phi_q.shape[-2]
    state = phi_q.new_zeros(phi_q.shape[:-2] + (phi_q.shape[-1], v1.shape[-1]))  # (B, H, M, D + 1)
    outs = []
    for start in range(0, n, chunk_size):
        sl = slice(start, start + chunk_size)
        q_c, k_c, v_c = phi_q[..., sl, :], phi_k[..., sl, :], v1[..., sl, :]
        scores = torch.tril(q_c @ k_c.transpose(-1, -2))  # (B, H, C, C)
        outs.append(scores @ v_c + q_c @ state)
        state = state + k_c.transpose(-1, -2) @ v_c
    return torch.cat(outs, dim=-2)


def naive_normalized_attention(
    weights: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    eps: float | Tensor = 1e-6,
    causal: bool = False,
) -> Tensor:
    """Oracle: apply an explicit ``(B, H, N, N)`` weight matrix, row-normalised by its own sum + eps."""
    weights = at_least_float32(weights)
    n = weights.shape[-1]
    if key_padding_mask is not None:
        weights = weights * key_padding_mask[:, None, None, :].to(weights.dtype)
    if causal:
        weights = weights * torch.ones(n, n, dtype=torch.bool, device=weights.device).tril()
    out = (weights @ v.to(weights.dtype)) / (weights.sum(-1, keepdim=True) + eps)
    return out.to(v.dtype)


def naive_kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    eps: float | Tensor = 1e-6,
    causal: bool = False,
) -> Tensor:
    """Oracle for ``kernel_attention``: build the full weight matrix ``phi_q phi_k^T``, then normalise."""
    weights = at_least_float32(phi_q) @ at_least_float32(phi_k).transpose(-1, -2)  # (B, H, N, N)
    return naive_normalized_attention(weights, v, key_padding_mask, eps=eps, causal=causal)
