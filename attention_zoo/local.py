"""Local (block-diagonal) attention, the LRA "Local Attention" baseline (Tay et al., arXiv 2011.04006).

The sequence is cut into consecutive blocks of ``b = block_size`` tokens from its start; a query attends
only to the keys of its own block (and, when causal, to those at or before it):

    out_i = sum_{j : floor(j / b) = floor(i / b)} softmax_j(q_i . k_j / sqrt(d)) v_j

O(n b d) time, O(n b) memory. LRA's JAX code reshapes the length axis as ``(block_size, num_blocks)``,
which makes strided rather than contiguous blocks; we follow the paper: contiguous blocks.

``dropout`` is LRA's attention dropout: ``local_dot_product_attention`` in
``lra_benchmarks/models/local/local_attention.py`` drops the softmax weights (rate
``attention_dropout_rate``, a mask per sequence and head: ``broadcast_dropout=False``) in training.
``attention_dropout`` below does the same for every mechanism here whose LRA JAX code drops its weights
(local, longformer, linformer, sinkhorn, synthesizer). Its draw is a hash of one seed (one draw from
torch's CPU generator per call, so a checkpointed CPU RNG state resumes it exactly) and the positions of
each weight's query and key, so pads appended to a batch change no real token's output; integer arithmetic
only, so every device drops the same weights.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._blocks import explicit_attention, masked_softmax, pad_real, real_tokens, scaled_scores, to_blocks
from .kernel import float32_region
from .registry import register

_HASH_MUL = 0x45D9F3B  # xor-shift-multiply rounds with this odd multiplier: a bijection of 32-bit words
_SALTS = (0x165667B1, 0x61C88647, 0x1B873593, 0x27D4EB2F)  # odd, below 2**31: batch, head, query, key


def check_dropout(name: str, p: float) -> float:
    """``p`` as a float; a rate outside ``[0, 1)`` is a ``ValueError`` naming the mechanism."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} dropout must be in [0, 1), got {p}")
    return float(p)


def dropout_seed() -> int:
    """One draw from torch's default (CPU) generator: the seed of one call's dropout masks."""
    return int(torch.randint(0, 2**31 - 1, ()))


def _mix_(x: Tensor) -> Tensor:
    """Two xor-shift-multiply rounds on int32 words, in place (wrapping; ``& 0xFFFF`` makes the shift logical).

    A bijection whose high bits depend on every input bit; the dropout threshold reads the high bits, so the
    usual closing ``x ^= x >> 16`` (it changes only the low half) is left out. One scratch buffer: a fresh
    full-size tensor per operation would cost as much as the arithmetic.
    """
    shifted = torch.empty_like(x)
    for _ in range(2):
        torch.bitwise_right_shift(x, 16, out=shifted)
        x ^= shifted.bitwise_and_(0xFFFF)
        x *= _HASH_MUL
    return x


def attention_dropout(weights: Tensor, p: float, seed: int, query_pos: Tensor, key_pos: Tensor) -> Tensor:
    """Inverted dropout of normalised weights ``(B, H, ..., R, C)``: zero with probability ``p``, else ``/ (1 - p)``.

    Whether the weight of query ``i`` on key ``j`` in sequence ``b``, head ``h`` is kept is a hash of
    ``(seed, b, h, i, j)``: ``query_pos`` and ``key_pos`` are integer tensors broadcasting to
    ``weights.shape[2:]`` (``(..., R, 1)`` and ``(..., 1, C)`` keep the hashing cheap) that name each
    weight's query and key (any integers that identify them, fixed by the real tokens only).
    """
    b, h = weights.shape[:2]
    device, i32 = weights.device, torch.int32
    lane = torch.arange(b, device=device, dtype=i32)[:, None] * _SALTS[0] + seed
    lane = _mix_(lane + torch.arange(h, device=device, dtype=i32) * _SALTS[1])
    lane = lane.view(b, h, *[1] * (weights.ndim - 2))
    rows = _mix_(lane + query_pos.to(device, i32) * _SALTS[2])
    bits = _mix_(rows + key_pos.to(device, i32) * _SALTS[3])
    drop = bits < min(round(p * 2**32), 2**32 - 1) - 2**31  # the words are uniform over [-2**31, 2**31)
    return weights.masked_fill(drop, 0.0).mul_(1.0 / (1.0 - p))


def naive_local(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                block_size: int, causal: bool = False) -> Tensor:
    """Oracle: softmax under the explicit block-diagonal ``(B, 1, N, N)`` mask."""
    pos = torch.arange(q.shape[-2], device=q.device)
    allowed = (pos[:, None] // block_size) == (pos[None, :] // block_size)
    if causal:
        allowed = allowed & (pos[None, :] <= pos[:, None])
    allowed = allowed & real_tokens(key_padding_mask, q)[:, None, None, :]
    return explicit_attention(scaled_scores(q, k), allowed, v).to(v.dtype)


@register("local")
class LocalAttention(nn.Module):
    """Block-diagonal softmax attention; ``block_size`` 50 as in LRA's local attention (see docstring).

    ``dropout``: attention dropout on the block weights in training (default 0: none), as
    ``lra_benchmarks/models/local/local_attention.py`` applies ``attention_dropout_rate``.
    """

    contract_options = {"block_size": 8}  # small, so contract tests see the structure

    supports_causal = True

    def __init__(self, *, block_size: int = 50, dropout: float = 0.0, causal: bool = False):
        super().__init__()
        if block_size < 1:
            raise ValueError(f"local block_size must be >= 1, got {block_size}")
        self.block_size, self.causal = block_size, causal
        self.dropout = check_dropout("local", dropout)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, _ = q.shape
        size = self.block_size
        with float32_region(v):
            qb, kb, vb = (to_blocks(t.float(), size) for t in (q, k, v))  # (B, H, M, b, D)
            m = qb.shape[2]
            allowed = pad_real(real_tokens(key_padding_mask, q), m * size).view(b, 1, m, 1, size)
            if self.causal:
                allowed = allowed & torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
            scores = (qb @ kb.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, M, b, b)
            probs = masked_softmax(scores, allowed)
            if self.training and self.dropout > 0:
                pos = torch.arange(m * size, device=q.device).view(m, size)  # (M, b): query and key positions
                probs = attention_dropout(probs, self.dropout, dropout_seed(), pos[:, :, None], pos[:, None, :])
            out = probs @ vb
        return out.flatten(2, 3)[:, :, :n].to(v.dtype)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_local(q, k, v, key_padding_mask, block_size=self.block_size, causal=self.causal)
