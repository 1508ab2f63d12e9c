"""Reformer LSH attention (Kitaev et al., arXiv 2001.04451) with shared QK, as Hugging Face computes it.

Follows ``transformers``' ``LSHSelfAttention`` (models/reformer/modeling_reformer.py), which the PyTorch LRA
port uses. Shared QK: the queries are ``q`` and the keys are ``k_j = q_j / rms(q_j) / sqrt(d)`` (HF's
``_len_and_dim_norm``, ``rms`` with ``+1e-6`` under the root: the unit vector ``q_j / |q_j|``); the ``k``
input is ignored (it gets a zero gradient). Scores ``s_ij = q_i . k_j``, with no further ``1/sqrt(d)``, and
``s_ii = -1e5``: a token attends to itself only when nothing else is allowed. Per hash round ``r``, with a
random rotation ``R_r in R^{d x n_buckets/2}`` (a fixed buffer drawn from ``seed``), ``h_r(x) =
argmax([x R_r, -x R_r])``. The rounds' tokens are sorted by (round, bucket, position) into one sequence of
``n_hashes * n`` slots, cut into chunks of ``chunk_len``; a query attends to every key of its chunk and of
the previous chunk, whatever their buckets (the first chunk looks back at the last one, cyclically, unless
it is the only one; a key found twice in the window counts twice). Each round gives a softmax output
``o_r(i)`` and its logsumexp ``l_r(i)``; the rounds are combined with weights ``softmax_r(l_r(i))``. That is

    out_i = sum_j N_ij exp(s_ij) v_j / sum_j N_ij exp(s_ij),   N_ij = how many window slots of i's copies hold j.

A sequence no longer than ``chunk_len`` gets full shared-QK attention (HF skips hashing there).
``n_buckets=None`` takes HF's rule, the power of two at or below ``2 (L // chunk_len)``, with ``L = max_len``
rather than the batch length so that padding cannot change it (HF factorises ``n_buckets`` beyond
``2 max(sqrt(L / chunk_len), chunk_len)``, from 8k tokens at chunk 64; we do not). O(n_hashes n chunk_len d).
Not causal (a later token's hash moves earlier tokens' chunks).

Deliberate difference on padded input: HF hashes pads to an extra bucket inside each round, so the number
of pads shifts the chunk boundaries of every later round; here pads (and, for a sequence of at most
``chunk_len`` real tokens, every round after the first) leave the sorted sequence, whose chunks are cut from
the real tokens only and whose first chunk looks back at the last real chunk. On unpadded input whose
``n_hashes * n`` is a multiple of ``chunk_len`` (HF's requirement) the two agree.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._blocks import explicit_attention, keep_in_graph, real_tokens, refuse_causal
from .kernel import float32_region
from .registry import register

SELF_SCORE = -1e5
LEN_NORM_EPS = 1e-6


def lsh_buckets(x: Tensor, rotations: Tensor, real: Tensor) -> Tensor:
    """Bucket of every token per round, ``(B, H, R, N)``; pads get the extra bucket ``n_buckets``.

    ``x``: ``(B, H, N, D)``; ``rotations``: ``(H, R, D, n_buckets / 2)``.
    """
    half = rotations.shape[-1]
    rotated = torch.einsum("bhnd,hrdk->bhrnk", x.detach().float(), rotations.float())
    top, top_index = rotated.max(-1)  # argmax([xR, -xR]) without building it
    low, low_index = rotated.min(-1)
    buckets = torch.where(top >= -low, top_index, low_index + half)
    return buckets.masked_fill(~real[:, None, None, :], 2 * half)


def shared_keys(q: Tensor) -> Tensor:
    """HF's ``_len_and_dim_norm``: ``q / sqrt(mean(q^2) + 1e-6) / sqrt(d)``, float32."""
    q = q.float()
    return q * torch.rsqrt(q.square().mean(-1, keepdim=True) + LEN_NORM_EPS) * q.shape[-1] ** -0.5


def active_entries(real: Tensor, rounds: int, chunk_len: int) -> Tensor:
    """``(B, R, N)``: which (round, token) copies take part: real tokens, one round when ``L <= chunk_len``."""
    long = real.sum(-1) > chunk_len  # (B,)
    first = torch.arange(rounds, device=real.device) == 0
    return real[:, None, :] & (first[None, :] | long[:, None])[..., None]


def sort_order(buckets: Tensor, active: Tensor) -> Tensor:
    """Slots ``(B, H, R N)``: flat (round, token) indices sorted by (round, bucket, token), inactive last."""
    b, h, rounds, n = buckets.shape
    flat = torch.arange(rounds * n, device=buckets.device).view(rounds, n)  # r n + i
    span = (buckets.amax() + 1) * n if buckets.numel() else n
    key = flat.div(n, rounding_mode="floor") * span + buckets * n + flat % n  # r span + bucket n + i
    key = torch.where(active[:, None], key, rounds * span + flat)
    return key.flatten(2).argsort(-1)


def chunk_windows(active_count: Tensor, chunk_len: int, chunks: int) -> Tensor:
    """``(B, C)``: the chunk each chunk looks back at: the previous one, the last active one for chunk 0."""
    last = (active_count - 1).clamp_min(0).div(chunk_len, rounding_mode="floor")  # (B,)
    prev = torch.arange(chunks, device=active_count.device) - 1
    return torch.where(prev[None, :] < 0, last[:, None], prev[None, :])


class _ChunkAttention(torch.autograd.Function):
    """Softmax attention of each chunk's queries over its window, returning the output and the logsumexp.

    ``q`` ``(..., c, D)``, ``k, v`` ``(..., w, D)``, ``self_mask`` and ``hidden`` broadcast to ``(..., c, w)``:
    scores ``q k^T`` with ``SELF_SCORE`` where ``self_mask`` and nothing where ``hidden``. Keeps the
    unnormalised ``E = exp(S - max)`` and the row sums ``s`` (``P = E / s``, divided on the ``(c, D)`` side);
    the backward is written out (``dS = P (dP - rowsum(dO O) + dlse)``).
    """

    @staticmethod
    def forward(ctx, q, k, v, self_mask, hidden):
        scores = q @ k.transpose(-1, -2)
        scores.masked_fill_(self_mask, SELF_SCORE).masked_fill_(hidden, torch.finfo(scores.dtype).min)
        top = scores.amax(-1, keepdim=True)
        weights = scores.sub_(top).exp_()  # E, in place of the scores
        total = weights.sum(-1, keepdim=True)
        out = (weights @ v).div_(total)
        ctx.save_for_backward(q, k, v, weights, total, out)
        return out, top + total.log()

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, weights, total, out = ctx.saved_tensors
        scaled = grad_out / total  # dO / s
        grad_scores = scaled @ v.transpose(-1, -2)  # dP / s
        row = ((grad_out * out).sum(-1, keepdim=True) - grad_lse) / total
        grad_scores.sub_(row).mul_(weights)  # P (dP - rowsum(dO O) + dlse)
        grad_q = grad_scores @ k
        grad_k = grad_scores.transpose(-1, -2) @ q
        grad_v = weights.transpose(-1, -2) @ scaled
        return grad_q, grad_k, grad_v, None, None


def naive_reformer(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                   rotations: Tensor, chunk_len: int) -> Tensor:
    """Oracle: softmax of the shared-QK scores plus ``log N_ij`` with the explicit ``(B, H, N, N)`` counts.

    A copy's slot is its rank among the active copies under (round, bucket, token), counted explicitly.
    """
    b, h, n, _ = q.shape
    real = real_tokens(key_padding_mask, q)
    rounds = rotations.shape[1]
    buckets = lsh_buckets(q, rotations, real)  # (B, H, R, N)
    active = active_entries(real, rounds, chunk_len)[:, None].expand(-1, h, -1, -1).flatten(2)  # (B, H, RN)
    r_idx = torch.arange(rounds, device=q.device).repeat_interleave(n)
    t_idx = torch.arange(n, device=q.device).repeat(rounds)
    bk = buckets.flatten(2)  # (B, H, RN)
    before = (r_idx[:, None] < r_idx[None, :]) | (r_idx[:, None] == r_idx[None, :]) & (
        (bk[..., :, None] < bk[..., None, :]) | (bk[..., :, None] == bk[..., None, :]) & (t_idx[:, None] < t_idx))
    slot = (before & active[..., :, None]).sum(-2)  # (B, H, RN): active copies ordered before each copy
    chunk = slot.div(chunk_len, rounding_mode="floor")
    count = active.sum(-1)  # (B, H)
    last = (count - 1).clamp_min(0).div(chunk_len, rounding_mode="floor")
    prev = torch.where(chunk == 0, last[..., None], chunk - 1)
    looks_back = (chunk[..., None, :] == prev[..., :, None]) & (prev != chunk)[..., :, None]
    in_window = ((chunk[..., None, :] == chunk[..., :, None]).float()
                 + looks_back.float()) * active[..., None, :] * active[..., :, None]
    per_token = in_window.view(b, h, rounds, n, rounds, n).sum((2, 4))  # (B, H, N, N): N_ij over rounds
    scores = q.float() @ shared_keys(q).transpose(-1, -2)
    scores = scores.masked_fill(torch.eye(n, dtype=torch.bool, device=q.device), SELF_SCORE)
    out = explicit_attention(scores + per_token.clamp_min(1).log(), per_token > 0, v)
    return keep_in_graph(out.to(v.dtype), k)


@register("reformer")
class ReformerAttention(nn.Module):
    """Shared-QK LSH attention over sorted chunks, as Hugging Face's ``LSHSelfAttention`` (module docstring)."""

    contract_options = {"chunk_len": 8}  # small, so contract tests see the structure

    supports_causal = False

    def __init__(self, *, head_dim: int, num_heads: int, max_len: int | None = None, n_hashes: int = 2,
                 chunk_len: int = 64, n_buckets: int | None = None, seed: int = 0, causal: bool = False):
        super().__init__()
        refuse_causal("reformer", causal)
        if n_hashes < 1 or chunk_len < 1:
            raise ValueError(f"reformer needs n_hashes >= 1 and chunk_len >= 1, got {n_hashes}, {chunk_len}")
        if n_buckets is None:
            if max_len is None:
                raise ValueError("reformer needs n_buckets, or max_len to derive it")
            n_buckets = max(2, 2 ** ((2 * (max_len // chunk_len)).bit_length() - 1))
        if n_buckets < 2 or n_buckets % 2:
            raise ValueError(f"reformer n_buckets must be even and >= 2, got {n_buckets}")
        self.n_hashes, self.chunk_len, self.n_buckets, self.seed = n_hashes, chunk_len, n_buckets, seed
        generator = torch.Generator().manual_seed(seed)
        rotations = torch.randn(num_heads, n_hashes, head_dim, n_buckets // 2, generator=generator)
        self.register_buffer("rotations", rotations)  # (H, R, D, n_buckets / 2)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, d = q.shape
        c, rounds = self.chunk_len, self.n_hashes
        chunks = -(-rounds * n // c)
        total = chunks * c
        real = real_tokens(key_padding_mask, q)
        with float32_region(v):
            with torch.no_grad():
                active = active_entries(real, rounds, c)  # (B, R, N)
                order = sort_order(lsh_buckets(q, self.rotations, real), active)  # (B, H, RN)
                rank = torch.empty_like(order).scatter_(-1, order, torch.arange(rounds * n, device=q.device)
                                                        .expand_as(order))
                pos = torch.nn.functional.pad(order % n, (0, total - rounds * n))  # (B, H, T) token of a slot
                count = active.flatten(1).sum(-1)  # (B,)
                slot_active = torch.arange(total, device=q.device) < count[:, None]  # (B, T)
                prev = chunk_windows(count, c, chunks)  # (B, C)
                pos_c = pos.view(b, h, chunks, c)
                pos_k = torch.cat([pos_c[torch.arange(b)[:, None], :, prev].transpose(1, 2), pos_c], dim=-1)
                act_c = slot_active.view(b, chunks, c)
                own = prev == torch.arange(chunks, device=q.device)  # one chunk in all: no look-back
                act_k = torch.cat([act_c[torch.arange(b)[:, None], prev] & ~own[..., None], act_c], dim=-1)
                blocked = (pos_c[..., :, None] == pos_k[..., None, :])  # self: (B, H, C, c, 2c)
                hidden = ~act_k[:, None, :, None, :]

            def look_back(x: Tensor) -> Tensor:  # (B, H, C, c, F) -> previous chunk then own (B, H, C, 2c, F)
                return torch.cat([x[torch.arange(b)[:, None], :, prev].transpose(1, 2), x], dim=3)

            stacked = torch.cat([q.float(), shared_keys(q), v.float()], dim=-1)  # one gather for q, k, v
            slots = stacked.gather(2, pos[..., None].expand(-1, -1, -1, 3 * d)).view(b, h, chunks, c, 3 * d)
            window = look_back(slots[..., d:])
            out, lse = _ChunkAttention.apply(slots[..., :d], window[..., :d], window[..., d:], blocked, hidden)

            out = out.view(b, h, total, d).gather(2, rank[..., None].expand(-1, -1, -1, d)).view(b, h, rounds, n, d)
            lse = lse.view(b, h, total).gather(2, rank).view(b, h, rounds, n)
            lse = lse.masked_fill(~active[:, None], torch.finfo(lse.dtype).min)
            out = (lse.softmax(dim=2)[..., None] * out).sum(2)
        return keep_in_graph(out.to(v.dtype), k)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's rotations."""
        return naive_reformer(q, k, v, key_padding_mask, rotations=self.rotations, chunk_len=self.chunk_len)
