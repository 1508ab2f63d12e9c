"""Reformer LSH attention (Kitaev et al., arXiv 2001.04451) with shared QK.

Shared QK: the queries are ``q`` and the keys are ``k_j = q_j / |q_j|``; the ``k`` input is ignored (it
gets a zero gradient). Scores ``s_ij = q_i . k_j / sqrt(d)``, and ``s_ii = -1e5``: a token attends to
itself only when nothing else is allowed. Per hash round ``r``, with a random rotation
``R_r in R^{d x n_buckets/2}`` (fixed buffer drawn from ``seed``), ``h_r(x) = argmax([x R_r, -x R_r])``;
tokens are sorted by (bucket, position), the sorted order is cut into chunks of ``chunk_len``, and a
query attends to the keys of its bucket in its chunk and the previous one, ``P_i^r``. Rounds are combined
by their logsumexp weights, a key found in several rounds counted once (scores minus ``log N_ij``, with
``N_ij`` the number of rounds that find it), which makes the whole

    out_i = sum_{j in P_i} softmax_j(s_ij) v_j,   P_i = union_r P_i^r.

Pads hash to an extra bucket sorted after every real token, so they move no real token's chunk and are
never attended. ``n_buckets=None`` takes Hugging Face's rule (the power of two at or below
``2 L / chunk_len``) with ``L = max_len`` rather than the batch length, so that padding cannot change it.
Defaults follow the PyTorch LRA port (Hugging Face LSH attention: ``chunk_len`` 64, 2 hashes).
O(n_hashes n chunk_len d). Not causal (a later token's hash moves earlier tokens' chunks).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._blocks import explicit_attention, keep_in_graph, pad_real, pad_tokens, real_tokens, refuse_causal
from .kernel import float32_region
from .registry import register

SELF_SCORE = -1e5


def lsh_buckets(x: Tensor, rotations: Tensor, real: Tensor) -> Tensor:
    """Bucket of every token per round, ``(B, H, R, N)``; pads get the extra bucket ``n_buckets``.

    ``x``: ``(B, H, N, D)``; ``rotations``: ``(H, R, D, n_buckets / 2)``.
    """
    rotated = torch.einsum("bhnd,hrdk->bhrnk", x.float(), rotations.float())
    buckets = torch.cat([rotated, -rotated], dim=-1).argmax(-1)
    return buckets.masked_fill(~real[:, None, None, :], 2 * rotations.shape[-1])


def sort_order(buckets: Tensor) -> Tensor:
    """Token positions sorted by (bucket, position), per round: ``(B, H, R, N)``."""
    n = buckets.shape[-1]
    return (buckets * n + torch.arange(n, device=buckets.device)).argsort(-1)


def shared_qk_scores(q: Tensor) -> Tensor:
    """``(B, H, N, N)`` scores ``q_i . (q_j / |q_j|) / sqrt(d)`` with ``SELF_SCORE`` on the diagonal."""
    q = q.float()
    scores = (q @ F.normalize(q, dim=-1).transpose(-1, -2)) * q.shape[-1] ** -0.5
    eye = torch.eye(q.shape[-2], dtype=torch.bool, device=q.device)
    return scores.masked_fill(eye, SELF_SCORE)


def naive_reformer(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                   rotations: Tensor, chunk_len: int) -> Tensor:
    """Oracle: softmax of the shared-QK scores under the explicit ``(B, H, N, N)`` union of ``P_i^r``."""
    real = real_tokens(key_padding_mask, q)
    buckets = lsh_buckets(q, rotations, real)  # (B, H, R, N)
    chunk = sort_order(buckets).argsort(-1) // chunk_len
    same_bucket = buckets[..., :, None] == buckets[..., None, :]
    near = (chunk[..., None, :] <= chunk[..., :, None]) & (chunk[..., None, :] >= chunk[..., :, None] - 1)
    allowed = (same_bucket & near).any(2) & real[:, None, None, :]  # (B, H, N, N)
    return keep_in_graph(explicit_attention(shared_qk_scores(q), allowed, v).to(v.dtype), k)


def _look_back(x: Tensor) -> Tensor:
    """Chunks ``(B, H, R, C, c, ...)`` -> previous chunk then this chunk ``(B, H, R, C, 2c, ...)``."""
    return torch.cat([x.roll(1, dims=3), x], dim=4)


def _round_counts(q_pos: Tensor, k_pos: Tensor, buckets: Tensor, chunk: Tensor) -> Tensor:
    """``N_ij``: in how many rounds key ``k_pos`` is in ``P`` of query ``q_pos``; ``(B, H, R, C, c, 2c)``."""
    def at(table: Tensor, pos: Tensor) -> Tensor:  # table (B, H, N) read at pos (B, H, R, C, ...)
        return table.gather(-1, pos.flatten(2)).view_as(pos)

    count = torch.zeros(q_pos.shape + k_pos.shape[-1:], device=q_pos.device)
    for r in range(buckets.shape[2]):
        bq, bk = at(buckets[:, :, r], q_pos), at(buckets[:, :, r], k_pos)
        cq, ck = at(chunk[:, :, r], q_pos)[..., :, None], at(chunk[:, :, r], k_pos)[..., None, :]
        count += (bq[..., :, None] == bk[..., None, :]) & (ck <= cq) & (ck >= cq - 1)
    return count


@register("reformer")
class ReformerAttention(nn.Module):
    """Shared-QK LSH attention over sorted, chunked buckets (see module docstring)."""

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
            n_buckets = 2 ** int(math.log2(max(2 * max_len // chunk_len, 2)))
        if n_buckets < 2 or n_buckets % 2:
            raise ValueError(f"reformer n_buckets must be even and >= 2, got {n_buckets}")
        self.n_hashes, self.chunk_len, self.n_buckets, self.seed = n_hashes, chunk_len, n_buckets, seed
        generator = torch.Generator().manual_seed(seed)
        rotations = torch.randn(num_heads, n_hashes, head_dim, n_buckets // 2, generator=generator)
        self.register_buffer("rotations", rotations)  # (H, R, D, n_buckets / 2)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, d = q.shape
        c, rounds = self.chunk_len, self.n_hashes
        total = -(-n // c) * c
        chunks = total // c
        real = pad_real(real_tokens(key_padding_mask, q), total)
        with float32_region(v):
            queries, values = pad_tokens(q.float(), total), pad_tokens(v.float(), total)
            buckets = lsh_buckets(queries, self.rotations, real)  # (B, H, R, T)
            order = sort_order(buckets)
            rank = order.argsort(-1)

            def by_order(x: Tensor) -> Tensor:  # (B, H, T, D) -> sorted chunks (B, H, R, C, c, D)
                index = order[..., None].expand(-1, -1, -1, -1, x.shape[-1])
                return x[:, :, None].expand(-1, -1, rounds, -1, -1).gather(3, index).view(b, h, rounds, chunks, c, -1)

            sq, sk, sv = by_order(queries), by_order(F.normalize(queries, dim=-1)), by_order(values)
            keys, vals = _look_back(sk), _look_back(sv)  # (B, H, R, C, 2c, D)
            q_pos = order.view(b, h, rounds, chunks, c)
            k_pos = _look_back(q_pos)  # (B, H, R, C, 2c)
            q_bucket = buckets.gather(-1, order).view(b, h, rounds, chunks, c)
            allowed = q_bucket[..., :, None] == _look_back(q_bucket)[..., None, :]
            allowed = allowed & real.gather(-1, k_pos.flatten(1)).view_as(k_pos)[..., None, :]
            first = torch.arange(chunks, device=q.device)[:, None] == 0
            allowed = allowed & ~(first & (torch.arange(2 * c, device=q.device) < c))[:, None, :]

            scores = (sq @ keys.transpose(-1, -2)) * d**-0.5  # (B, H, R, C, c, 2c)
            scores = scores.masked_fill(q_pos[..., :, None] == k_pos[..., None, :], SELF_SCORE)
            scores = scores - _round_counts(q_pos, k_pos, buckets, rank // c).clamp(min=1).log()
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            lse = scores.logsumexp(-1)  # (B, H, R, C, c)
            out = ((scores - lse[..., None]).exp() * allowed) @ vals

            out = out.view(b, h, rounds, total, d).gather(3, rank[..., None].expand(-1, -1, -1, -1, d))
            weights = lse.view(b, h, rounds, total).gather(3, rank).softmax(dim=2)  # over rounds
            out = (weights[..., None] * out).sum(2)[:, :, :n]
        return keep_in_graph(out.to(v.dtype), k)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's rotations."""
        return naive_reformer(q, k, v, key_padding_mask, rotations=self.rotations, chunk_len=self.chunk_len)
