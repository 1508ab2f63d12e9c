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
``2 max(sqrt(L / chunk_len), chunk_len)``, from 8k tokens at chunk 64; we do not). O(n_hashes n chunk_len d)
time; memory flash-style (``_LSHAttention``): groups of chunks at a time, and backward keeps only q, v, the
output and a few numbers per slot, recomputing the chunks' scores (one training step of Text 4k at batch 8:
+1,233 MiB before, about +610 to +670 MiB after).
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
from .first_order import first_order_only
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


GROUP_SCORES = 1 << 21  # score entries (B H G c 2c) a group of chunks holds at once: 8 MiB in float32


class _SortedChunks:
    """The sorted, chunked layout of one forward: which token sits in each slot, and each chunk's window.

    ``rows`` ``(B, H, C, c)``: the token of each slot as a row of ``(B H N, F)`` (slots past the ``R N``
    copies hold token 0, inactive); ``prev`` ``(B, C)``: the chunk each chunk looks back at; ``own``: it
    looks back at itself (one chunk in all: no look-back); ``slot_active`` ``(B, C, c)``: an active copy.
    """

    def __init__(self, pos: Tensor, prev: Tensor, slot_active: Tensor, n: int):
        b, h, chunks, _ = pos.shape
        self.rows = pos + (torch.arange(b * h, device=pos.device) * n).view(b, h, 1, 1)
        self.prev, self.slot_active = prev, slot_active
        self.own = prev == torch.arange(chunks, device=pos.device)
        self.batch = torch.arange(b, device=pos.device)[:, None]
        self.all_active = bool(slot_active.all()) and not bool(self.own.any())

    def groups(self) -> list[tuple[int, int]]:
        """Chunk ranges ``(g0, g1)`` of at most ``GROUP_SCORES`` score entries each."""
        b, h, chunks, c = self.rows.shape
        size = max(1, GROUP_SCORES // (b * h * c * 2 * c))
        return [(g0, min(g0 + size, chunks)) for g0 in range(0, chunks, size)]

    def window(self, g0: int, g1: int) -> tuple[Tensor, Tensor]:
        """Chunks ``g0 .. g1 - 1``: query rows ``(B, H, G, c)`` and key rows ``(B, H, G, 2c)``: the previous
        chunk's slots, then the chunk's own."""
        rows_q = self.rows[:, :, g0:g1]
        return rows_q, torch.cat([self.rows[self.batch, :, self.prev[:, g0:g1]].transpose(1, 2), rows_q], dim=-1)

    def scores(self, q: Tensor, k: Tensor, rows_q: Tensor, rows_k: Tensor, g0: int, g1: int) -> tuple:
        """``q k^T`` ``(B, H, G, c, 2c)`` with ``SELF_SCORE`` where query and key are one token and the lowest
        float where the key is inactive (or the chunk's own look-back); and those two masks (None: none
        inactive), where the scores do not depend on q and k."""
        scores = q @ k.transpose(-1, -2)
        itself = rows_q[..., :, None] == rows_k[..., None, :]
        scores.masked_fill_(itself, SELF_SCORE)
        if self.all_active:
            return scores, itself, None
        prev = self.prev[:, g0:g1]
        hidden = ~torch.cat([self.slot_active[self.batch, prev] & ~self.own[:, g0:g1, None],
                             self.slot_active[:, g0:g1]], dim=-1)[:, None, :, None, :]  # (B, 1, G, 1, 2c)
        return scores.masked_fill_(hidden, torch.finfo(scores.dtype).min), itself, hidden


def gather_rows(x: Tensor, rows: Tensor) -> Tensor:
    """Rows ``rows`` (any shape) of ``x`` ``(M, F)``: ``(*rows.shape, F)`` (whole rows, not elements)."""
    return x.index_select(0, rows.flatten()).view(*rows.shape, x.shape[-1])


def scatter_rows(into: Tensor, rows: Tensor, x: Tensor) -> None:
    """Adds ``x`` ``(*rows.shape, F)`` into the rows ``rows`` of ``into`` ``(M, F)``."""
    into.index_add_(0, rows.flatten(), x.reshape(-1, into.shape[-1]))


class _LSHAttention(torch.autograd.Function):
    """Chunked shared-QK attention of every hash round, rounds combined by their logsumexp; flash-style.

    Forward, a group of chunks at a time: ``S = q k^T`` (masked), ``E = exp(S - top)``, ``s = rowsum E``,
    ``o = E v / s``, ``lse = top + log s`` per slot; then ``out_i = sum_r w_r(i) o_r(i)`` with ``w =
    softmax_r(lse)`` over the active rounds. Saved: ``q``, ``v``, the layout, ``top``, ``s``, the round
    weight of each slot and ``out``; not the gathered copies of q, k, v nor the ``(c, 2c)`` weights, which
    the backward recomputes group by group (``P = E / s``). With ``g`` the output gradient at a slot's
    token, ``dO = w g`` and ``d lse = w (g . o - g . out)`` (zero for an inactive copy, whose lse is
    masked), so ``dS = P (dO v^T - rowsum(dO o) + d lse) = P (dO v^T - w g . out)`` for an active copy;
    an inactive copy with ``w > 0`` (a pad token's) needs ``g . o``, which its group recomputes. ``dS`` is
    zero where the score was filled (a token's own key, an inactive key): those scores do not depend on
    q, even where ``P > 0`` (a pad copy whose window holds no active key weighs every key alike).
    """

    @staticmethod
    def forward(ctx, q, v, layout: _SortedChunks, rank, active):
        b, h, n, d = q.shape
        _, _, chunks, c = layout.rows.shape
        rounds = active.shape[1]
        flat_q, flat_v = q.reshape(b * h * n, d), v.reshape(b * h * n, d)
        flat_k = shared_keys(flat_q)
        o = q.new_empty(b, h, chunks, c, d)
        top = q.new_empty(b, h, chunks, c, 1)
        total = q.new_empty(b, h, chunks, c, 1)
        for g0, g1 in layout.groups():
            rows_q, rows_k = layout.window(g0, g1)
            scores = layout.scores(gather_rows(flat_q, rows_q), gather_rows(flat_k, rows_k), rows_q, rows_k, g0, g1)[0]
            top[:, :, g0:g1] = scores.amax(-1, keepdim=True)
            weights = scores.sub_(top[:, :, g0:g1]).exp_()  # E, in place of the scores
            total[:, :, g0:g1] = weights.sum(-1, keepdim=True)
            o[:, :, g0:g1] = (weights @ gather_rows(flat_v, rows_k)).div_(total[:, :, g0:g1])
        del flat_k
        lse = (top + total.log()).view(b, h, chunks * c).gather(2, rank).view(b, h, rounds, n)
        weight = lse.masked_fill_(~active[:, None], torch.finfo(lse.dtype).min).softmax(dim=2)  # (B, H, R, N)
        rows = rank[..., None].expand(-1, -1, -1, d)
        out = (weight[..., None] * o.view(b, h, chunks * c, d).gather(2, rows).view(b, h, rounds, n, d)).sum(2)
        slot_weight = q.new_zeros(b, h, chunks * c).scatter_(2, rank, weight.flatten(2)).view(b, h, chunks, c, 1)
        ctx.layout = layout
        ctx.first_inactive = int(layout.slot_active.flatten(1).sum(-1).min())  # slots before it: active
        ctx.save_for_backward(q, v, top, total, slot_weight, out)
        return out

    @staticmethod
    @first_order_only
    def backward(ctx, grad_out):
        q, v, top, total, slot_weight, out = ctx.saved_tensors
        layout = ctx.layout
        b, h, n, d = q.shape
        c = layout.rows.shape[-1]
        flat_q, flat_v = q.reshape(b * h * n, d), v.reshape(b * h * n, d)
        flat_g = grad_out.reshape(b * h * n, d)
        grad_dot_out = (grad_out * out).sum(-1).view(b * h * n, 1)  # g . out
        with torch.enable_grad():
            q_leaf = flat_q.detach().requires_grad_(True)
            keys_graph = shared_keys(q_leaf)
        flat_k = keys_graph.detach()
        grad_q, grad_k, grad_v = torch.zeros_like(flat_q), torch.zeros_like(flat_q), torch.zeros_like(flat_v)
        for g0, g1 in layout.groups():
            rows_q, rows_k = layout.window(g0, g1)
            q_g, k_g, v_g = gather_rows(flat_q, rows_q), gather_rows(flat_k, rows_k), gather_rows(flat_v, rows_k)
            probs, itself, hidden = layout.scores(q_g, k_g, rows_q, rows_k, g0, g1)
            probs.sub_(top[:, :, g0:g1]).exp_().div_(total[:, :, g0:g1])  # P
            g = gather_rows(flat_g, rows_q)
            row = gather_rows(grad_dot_out, rows_q)  # g . out
            if g1 * c > ctx.first_inactive:  # inactive copies here: g . o for them
                inactive = ~layout.slot_active[:, None, g0:g1, :, None]
                row = torch.where(inactive, (g * (probs @ v_g)).sum(-1, keepdim=True), row)
            w = slot_weight[:, :, g0:g1]
            grad_o = g.mul_(w)  # dO = w g
            grad_scores = grad_o @ v_g.transpose(-1, -2)
            grad_scores.sub_(row.mul_(w)).mul_(probs).masked_fill_(itself, 0)  # dS = P (dO v^T - w row)
            if hidden is not None:  # filled scores have no gradient, even with P > 0 (a row of inactive keys)
                grad_scores.masked_fill_(hidden, 0)
            scatter_rows(grad_q, rows_q, grad_scores @ k_g)
            scatter_rows(grad_k, rows_k, grad_scores.transpose(-1, -2) @ q_g)
            scatter_rows(grad_v, rows_k, probs.transpose(-1, -2) @ grad_o)
        grad_q += torch.autograd.grad(keys_graph, q_leaf, grad_k)[0]
        return grad_q.view(b, h, n, d), grad_v.view(b, h, n, d), None, None, None


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
    quadratic = False

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
                layout = _SortedChunks(pos.view(b, h, chunks, c), chunk_windows(count, c, chunks),
                                       slot_active.view(b, chunks, c), n)
            out = _LSHAttention.apply(q.float(), v.float(), layout, rank, active)
        return keep_in_graph(out.to(v.dtype), k)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's rotations."""
        return naive_reformer(q, k, v, key_padding_mask, rotations=self.rotations, chunk_len=self.chunk_len)
