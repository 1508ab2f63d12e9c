"""Sparse Sinkhorn attention (Tay et al., arXiv 2002.11296), as in the LRA Sinkhorn Transformer.

The sequence is cut into ``M`` blocks of ``b = block_size`` tokens from its start. A sort net (two
layers with ReLU, shared by the heads) maps each block summary (the sum of its real keys) to logits over
blocks, ``R in R^{M x M}``; ``S = Sinkhorn(R / temperature)``, rounds of row then column normalisation in
log space, is a soft block permutation: doubly stochastic, as the paper's sorting matrix is (the limit of
the rounds). Each round leaves the columns exact; the rounds go on until every row sums to 1 within
``sinkhorn_tol`` too (checked every 5 rounds), at most ``sinkhorn_iters`` rounds. A fixed count stops
short: lucidrains/sinkhorn-transformer's 7 rounds leave rows off by up to 0.5 at initialisation, where
the block sums of 50 keys make the logits large (``sinkhorn_tol=0`` runs exactly ``sinkhorn_iters``
rounds, as the reference). Every round is differentiated through. Block ``i`` gets the sorted keys and values
``K^s_i = sum_j S_ij K_j``, ``V^s_i = sum_j S_ij V_j``, and each query attends jointly to its own block
and to the sorted block:

    out_q = softmax([q K_i^T, q (K^s_i)^T] / sqrt(d)) [V_i; V^s_i]

Only real blocks take part in the sorting (pad blocks are fixed points), so pads change nothing. LRA's
JAX code reshapes the length axis as ``(block_size, num_blocks)`` (strided blocks), sums two separate
softmaxes, and defaults to a plain softmax sort; we follow the paper: contiguous blocks, Sinkhorn
balancing, and one softmax over the local and the sorted block as in lucidrains/sinkhorn-transformer
(temperature 0.75, 7 iterations there). No Gumbel noise: evaluation and training are deterministic.
O(n b d + M^2 (d + b d)). Not causal.

``dropout`` is LRA's attention dropout: ``local_dot_product_attention`` in
``lra_benchmarks/models/sinkhorn_transformer/sinkhorn_attention.py`` drops the weights of both its local
and its sorted softmax (``attention_dropout_rate``) in training; here those of the joint softmax
(``local.attention_dropout``; a weight is named by its query's position and its key's, sorted slot ``t``
counting as key ``-1 - t``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._attention_dropout import attention_dropout, check_dropout, dropout_seed
from ._blocks import masked_softmax, pad_real, real_tokens, refuse_causal, scaled_scores, to_blocks
from .kernel import float32_region
from .registry import register

SINKHORN_CHECK_EVERY = 5


def sinkhorn(log_alpha: Tensor, real_blocks: Tensor, iters: int, tol: float = 0.0) -> Tensor:
    """Doubly-stochastic ``exp`` of ``log_alpha`` ``(B, H, M, M)`` over the real blocks ``(B, M)``.

    Rows and columns of pad blocks are the identity, so the real blocks are balanced among themselves.
    Rounds of row then column normalisation stop, per sequence and head, once all row sums are within
    ``tol`` of 1 (columns are exact after each round), or after ``iters`` rounds; ``tol=0`` runs all
    ``iters``. Stopping per matrix keeps a sequence's result independent of the rest of its batch.
    """
    m = log_alpha.shape[-1]
    both_real = real_blocks[:, None, :, None] & real_blocks[:, None, None, :]
    eye = torch.eye(m, dtype=torch.bool, device=log_alpha.device)
    log_alpha = log_alpha.masked_fill(~both_real, float("-inf")).masked_fill(eye & ~both_real, 0.0)
    converged = None  # (B, H, 1, 1) True where balanced: those matrices are left as they are
    for done in range(1, iters + 1):
        balanced = log_alpha - log_alpha.logsumexp(-1, keepdim=True)
        balanced = balanced - balanced.logsumexp(-2, keepdim=True)
        log_alpha = balanced if converged is None else torch.where(converged, log_alpha, balanced)
        if tol > 0 and done % SINKHORN_CHECK_EVERY == 0:
            with torch.no_grad():
                row_error = (log_alpha.logsumexp(-1).exp() - 1).abs().amax(-1)[..., None, None]
                converged = row_error <= tol
                if converged.all():
                    break
    return log_alpha.exp()


def naive_sinkhorn(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                   block_size: int, permutation: Tensor) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weight matrix of local plus sorted-block attention.

    The sorted scores are mixtures of the full score matrix: ``q_i . K^s_{i,t} = sum_j S_ij (q_i . k_{j,t})``,
    and sorted slot ``t`` passes weight ``p_t S_ij`` on to token ``t`` of block ``j``.
    """
    n, size = q.shape[-2], block_size
    real = real_tokens(key_padding_mask, q)
    m = permutation.shape[-1]
    keys, values = (t.float() * real[:, None, :, None] for t in (k, v))  # pads zeroed, as in the sums
    scores = F.pad(scaled_scores(q, keys), (0, m * size - n)).unflatten(-1, (m, size))
    block = torch.arange(n, device=q.device) // size
    own = F.one_hot(block, m).float()  # (N, M): query i's own block
    local = torch.einsum("bhnmt,nm->bhnt", scores, own)  # (B, H, N, b)
    mix = permutation[:, :, block]  # (B, H, N, M): S_{block(i), j}
    sorted_ = torch.einsum("bhnmt,bhnm->bhnt", scores, mix)
    real_b = pad_real(real, m * size).view(-1, m, size)
    local_ok = real_b[:, block][:, None]  # (B, 1, N, b)
    sorted_ok = real_b.any(1)[:, None, None, :].expand_as(local_ok)
    probs = masked_softmax(torch.cat([local, sorted_], -1), torch.cat([local_ok, sorted_ok], -1))
    p_local, p_sorted = probs.split(size, dim=-1)
    weights = torch.einsum("bhnt,nm->bhnmt", p_local, own) + torch.einsum("bhnt,bhnm->bhnmt", p_sorted, mix)
    weights = weights.flatten(-2)[..., :n]  # (B, H, N, N)
    return (weights @ values).to(v.dtype)


@register("sinkhorn")
class SinkhornAttention(nn.Module):
    """Local block plus Sinkhorn-sorted block attention; needs ``max_len`` (the sort net spans the blocks).

    ``dropout``: attention dropout on the local and sorted weights in training (default 0: none), as
    ``lra_benchmarks/models/sinkhorn_transformer/sinkhorn_attention.py`` applies ``attention_dropout_rate``.
    """

    contract_options = {"block_size": 8}  # small, so contract tests see the structure

    supports_causal = False
    quadratic = False

    def __init__(self, *, head_dim: int, max_len: int | None, block_size: int = 50, sinkhorn_iters: int = 100,
                 sinkhorn_tol: float = 1e-3, temperature: float = 0.75, dropout: float = 0.0,
                 causal: bool = False):
        super().__init__()
        refuse_causal("sinkhorn", causal)
        if max_len is None:
            raise ValueError("sinkhorn needs max_len: its sort net outputs one logit per block")
        if block_size < 1 or sinkhorn_iters < 1 or temperature <= 0 or sinkhorn_tol < 0:
            raise ValueError(f"sinkhorn needs block_size >= 1, sinkhorn_iters >= 1, temperature > 0, "
                             f"sinkhorn_tol >= 0; got {block_size}, {sinkhorn_iters}, {temperature}, {sinkhorn_tol}")
        self.block_size, self.sinkhorn_iters, self.temperature = block_size, sinkhorn_iters, temperature
        self.sinkhorn_tol = sinkhorn_tol
        self.dropout = check_dropout("sinkhorn", dropout)
        self.max_blocks = -(-max_len // block_size)
        d = head_dim
        self.w1 = nn.Parameter(torch.randn(d, d) / d**0.5)
        self.b1 = nn.Parameter(torch.zeros(d))
        self.w2 = nn.Parameter(torch.randn(d, self.max_blocks) * (2 / d) ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(self.max_blocks))

    def permutation(self, k: Tensor, real: Tensor) -> Tensor:
        """The soft block permutation ``S`` ``(B, H, M, M)`` from the keys and the ``(B, N)`` real mask."""
        kb = to_blocks(k.float() * real[:, None, :, None], self.block_size)  # (B, H, M, b, D)
        m = kb.shape[2]
        if m > self.max_blocks:
            raise ValueError(f"sinkhorn was built for {self.max_blocks} blocks (max_len), got {m}")
        hidden = torch.relu(kb.sum(-2) @ self.w1.float() + self.b1.float())  # (B, H, M, D)
        logits = hidden @ self.w2[:, :m].float() + self.b2[:m].float()  # (B, H, M, M)
        real_blocks = pad_real(real, m * self.block_size).view(-1, m, self.block_size).any(-1)
        return sinkhorn(logits / self.temperature, real_blocks, self.sinkhorn_iters, self.sinkhorn_tol)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, d = q.shape
        size = self.block_size
        real = real_tokens(key_padding_mask, q)
        with float32_region(v):
            perm = self.permutation(k, real)
            m = perm.shape[-1]
            qb = to_blocks(q.float(), size)  # (B, H, M, b, D)
            kb, vb = (to_blocks(t.float() * real[:, None, :, None], size) for t in (k, v))
            keys = torch.cat([kb, torch.einsum("bhij,bhjtd->bhitd", perm, kb)], dim=-2)  # (B, H, M, 2b, D)
            values = torch.cat([vb, torch.einsum("bhij,bhjtd->bhitd", perm, vb)], dim=-2)
            real_b = pad_real(real, m * size).view(b, m, size)
            allowed = torch.cat([real_b, real_b.any(1, keepdim=True).expand(-1, m, -1)], -1)  # (B, M, 2b)
            scores = (qb @ keys.transpose(-1, -2)) * d**-0.5
            probs = masked_softmax(scores, allowed[:, None, :, None, :])  # (B, H, M, b, 2b)
            if self.training and self.dropout > 0:
                pos = torch.arange(m * size, device=q.device).view(m, 1, size)
                slots = torch.arange(-1, -1 - size, -1, device=q.device).expand(m, 1, size)
                keys_pos = torch.cat([pos, slots], -1)  # (M, 1, 2b): own block's keys, then sorted slots
                probs = attention_dropout(probs, self.dropout, dropout_seed(), pos.transpose(-1, -2), keys_pos)
            out = probs @ values
        return out.flatten(2, 3)[:, :, :n].to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle, with this module's block permutation."""
        perm = self.permutation(k, real_tokens(key_padding_mask, q))
        return naive_sinkhorn(q, k, v, key_padding_mask, block_size=self.block_size, permutation=perm)
