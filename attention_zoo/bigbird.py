"""BigBird block-sparse attention (Zaheer et al., arXiv 2007.14062), the ITC pattern used in LRA.

The sequence is cut into blocks of ``b = block_size`` tokens from its start. Query block ``i`` attends to
key blocks ``A(i)`` = the window ``{i-1, i, i+1}``, the global blocks ``{0, L-1}`` and ``r``
random blocks; the global blocks attend to every key. With ``s_ij = q_i . k_j / sqrt(d)``:

    out_i = sum_{j : block(j) in A(block(i))} softmax_j(s_ij) v_j

``L`` is the number of blocks holding real tokens (LRA's ITC code takes the last block of the padded
sequence). Random blocks are drawn per head and query block among the real blocks outside the window and
the global blocks, by fixed pseudo-random priorities hashed from ``(seed, head, i, j)``: the choice does
not depend on the padded length, so appending pads changes nothing. Fast form: gather the ``3 + 2 + r``
key blocks of every query block (O(n (5 + r) b d) time, O(n (5 + r) b) memory) plus two full rows of blocks.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._blocks import (
    explicit_attention,
    masked_softmax,
    num_blocks,
    pad_real,
    real_lengths,
    real_tokens,
    refuse_causal,
    scaled_scores,
    to_blocks,
)
from .kernel import float32_region
from .registry import register

_MASK32 = 0xFFFFFFFF


def _hash32(x: Tensor) -> Tensor:
    """An integer mix of int64 values below 2^32 (xor-shift-multiply); products stay below 2^59."""
    for _ in range(2):
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def block_priorities(seed: int, num_heads: int, m: int, device=None) -> Tensor:
    """``(H, M, M)`` int64 pseudo-random priorities of key block ``j`` for query block ``i`` in head ``h``."""
    h, i, j = (torch.arange(size, device=device) for size in (num_heads, m, m))
    x = _hash32(torch.full((), seed & _MASK32, device=device))
    x = _hash32(_hash32(_hash32(x ^ h[:, None, None]) ^ i[None, :, None]) ^ j[None, None, :])
    return x


def num_blocks_with_real(real: Tensor, block_size: int) -> Tensor:
    """``(B,)`` number of blocks that hold real tokens (pads trail)."""
    return -(-real_lengths(real) // block_size)


def random_blocks(priorities: Tensor, real_blocks: Tensor, r: int) -> tuple[Tensor, Tensor]:
    """The ``r`` random key blocks per head and query block: indices and validity, ``(B, H, M, r)``.

    Candidates are real blocks (``j < L``) outside the window and the global blocks ``{0, L - 1}``; the
    ``r`` of highest priority are taken (fewer, marked invalid, when there are not enough candidates).
    """
    m = priorities.shape[-1]
    i = torch.arange(m, device=priorities.device)[:, None]
    j = torch.arange(m, device=priorities.device)[None, :]
    last = (real_blocks - 1).clamp(min=0)[:, None, None]
    candidate = (j < real_blocks[:, None, None]) & ((i - j).abs() > 1) & (j != 0) & (j != last)  # (B, M, M)
    score = torch.where(candidate[:, None], priorities, -1)  # (B, H, M, M)
    top, idx = score.topk(min(r, m), dim=-1)
    valid = top >= 0
    if r > m:
        idx = torch.cat([idx, idx.new_zeros(idx.shape[:-1] + (r - m,))], -1)
        valid = torch.cat([valid, valid.new_zeros(valid.shape[:-1] + (r - m,))], -1)
    return idx, valid


def bigbird_layout(real: Tensor, num_heads: int, *, block_size: int, num_random_blocks: int,
                   seed: int) -> Tensor:
    """``(B, H, M, M)`` bool: query block ``i`` may attend to key block ``j``."""
    m = num_blocks(real.shape[-1], block_size)
    real_blocks = num_blocks_with_real(real, block_size)
    i = torch.arange(m, device=real.device)
    last = (real_blocks - 1).clamp(min=0)[:, None]
    is_global = (i == 0) | (i == last)  # (B, M)
    layout = ((i[:, None] - i[None, :]).abs() <= 1) | is_global[:, :, None] | is_global[:, None, :]
    priorities = block_priorities(seed, num_heads, m, real.device)
    idx, valid = random_blocks(priorities, real_blocks, num_random_blocks)
    chosen = torch.zeros(idx.shape[:-1] + (m,), device=real.device).scatter_add(-1, idx, valid.float()) > 0
    return layout[:, None] | chosen


def naive_bigbird(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                  block_size: int, num_random_blocks: int, seed: int) -> Tensor:
    """Oracle: softmax under the explicit ``(B, H, N, N)`` token mask expanded from the block layout."""
    n = q.shape[-2]
    real = real_tokens(key_padding_mask, q)
    layout = bigbird_layout(real, q.shape[1], block_size=block_size, num_random_blocks=num_random_blocks,
                            seed=seed)
    allowed = layout.repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)[..., :n, :n]
    return explicit_attention(scaled_scores(q, k), allowed & real[:, None, None, :], v).to(v.dtype)


@register("bigbird")
class BigBirdAttention(nn.Module):
    """Block-sparse window + global + random attention; LRA defaults block 64, 3 random blocks."""

    contract_options = {"block_size": 8, "num_random_blocks": 1}  # small, so contract tests see the structure

    supports_causal = False

    def __init__(self, *, num_heads: int, block_size: int = 64, num_random_blocks: int = 3, seed: int = 0,
                 causal: bool = False):
        super().__init__()
        refuse_causal("bigbird", causal)
        if block_size < 1 or num_random_blocks < 0:
            raise ValueError(f"bigbird needs block_size >= 1 and num_random_blocks >= 0, got "
                             f"block_size={block_size}, num_random_blocks={num_random_blocks}")
        self.num_heads, self.block_size, self.num_random_blocks, self.seed = (
            num_heads, block_size, num_random_blocks, seed)

    def key_blocks(self, real: Tensor, m: int) -> tuple[Tensor, Tensor]:
        """Key-block indices of every query block and their validity, ``(B, H, M, 5 + r)``.

        Order: window ``i-1, i, i+1``; globals ``0, L-1`` unless already in the window (or equal);
        then the random blocks. Every block appears at most once among the valid entries.
        """
        b, h, device = real.shape[0], self.num_heads, real.device
        real_blocks = num_blocks_with_real(real, self.block_size)
        i = torch.arange(m, device=device)[:, None]
        window = i + torch.arange(-1, 2, device=device)  # (M, 3)
        last = (real_blocks - 1).clamp(min=0)[:, None, None]
        first = torch.zeros_like(last)
        globals_ = torch.cat([first, last], -1).expand(b, m, 2)  # (B, M, 2)
        distinct = torch.cat([torch.ones_like(last, dtype=torch.bool), last != 0], -1)  # (B, 1, 2)
        global_valid = ((globals_ - i).abs() > 1) & distinct
        idx, valid = random_blocks(block_priorities(self.seed, h, m, device), real_blocks,
                                   self.num_random_blocks)
        all_idx = torch.cat([window.expand(b, h, m, 3), globals_[:, None].expand(b, h, m, 2), idx], -1)
        all_valid = torch.cat([((window >= 0) & (window < m)).expand(b, h, m, 3),
                               global_valid[:, None].expand(b, h, m, 2), valid], -1)
        return all_idx.clamp(0, m - 1), all_valid

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        b, h, n, d = q.shape
        size = self.block_size
        real = real_tokens(key_padding_mask, q)
        with float32_region(v):
            qb, kb, vb = (to_blocks(t.float(), size) for t in (q, k, v))  # (B, H, M, b, D)
            m = qb.shape[2]
            real_b = pad_real(real, m * size).view(b, m, size)
            idx, valid = self.key_blocks(real, m)  # (B, H, M, c)
            batch = torch.arange(b, device=q.device)[:, None, None, None]
            head = torch.arange(h, device=q.device)[None, :, None, None]
            keys = kb[batch, head, idx].flatten(3, 4)  # (B, H, M, c b, D)
            values = vb[batch, head, idx].flatten(3, 4)
            allowed = (real_b[batch, idx] & valid[..., None]).flatten(3, 4)  # (B, H, M, c b)
            scores = (qb @ keys.transpose(-1, -2)) * d**-0.5  # (B, H, M, b, c b)
            out = masked_softmax(scores, allowed[:, :, :, None, :]) @ values
            out = self._with_global_rows(out, qb, kb, vb, real, real_b)
        return out.flatten(2, 3)[:, :, :n].to(v.dtype)

    def _with_global_rows(self, out: Tensor, qb: Tensor, kb: Tensor, vb: Tensor, real: Tensor,
                          real_b: Tensor) -> Tensor:
        """Replace the rows of the global query blocks ``0`` and ``L - 1`` by full attention rows."""
        b, h, m, size, d = qb.shape
        last = (num_blocks_with_real(real, size) - 1).clamp(min=0)  # (B,)
        batch = torch.arange(b, device=qb.device)
        global_q = torch.stack([qb[:, :, 0], qb[batch, :, last]], dim=2).flatten(2, 3)  # (B, H, 2 b, D)
        keys, values = kb.flatten(2, 3), vb.flatten(2, 3)  # (B, H, M b, D)
        rows = masked_softmax(scaled_scores(global_q, keys), real_b.view(b, 1, 1, m * size)) @ values
        first_rows, last_rows = rows.unflatten(2, (2, size)).unbind(2)  # (B, H, b, D) each
        block = torch.arange(m, device=qb.device).view(1, 1, m, 1, 1)
        out = torch.where(block == last.view(b, 1, 1, 1, 1), last_rows[:, :, None], out)
        return torch.where(block == 0, first_rows[:, :, None], out)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's options."""
        return naive_bigbird(q, k, v, key_padding_mask, block_size=self.block_size,
                             num_random_blocks=self.num_random_blocks, seed=self.seed)
