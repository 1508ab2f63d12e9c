"""A padded batch's real tokens as one ``(T, ...)`` tensor, for the work that treats each token alone.

Everything in a block but attention (LayerNorm, the projections, the FFN, dropout, residuals) acts on each token
by itself, so it is computed for the ``T`` real tokens only: LRA batches are padded to their longest sequence,
and on ListOps (trees of 500-2,000 tokens) about half of the padded batch is padding. Attention gets the padded
``(B, H, N, d)`` layout back with zeros at the pads, which every mechanism ignores under its key padding mask
(``tests/attention_zoo/test_contract.py``: real outputs do not depend on what pads hold). Real tokens' outputs
and all gradients are the padded computation's up to rounding; dropout draws masks for real tokens only.
"""

from __future__ import annotations

import torch
from torch import Tensor


class Packing:
    """Moves tensors between the padded ``(B, N, ...)`` layout of ``mask`` ``(B, N)`` (True at real tokens,
    each row's real tokens first or anywhere) and the packed ``(T, ...)`` one, rows in batch-major order.
    Without padding both moves are views."""

    def __init__(self, mask: Tensor):
        self.batch, self.length = mask.shape
        self.index = None if bool(mask.all()) else mask.reshape(-1).nonzero().squeeze(1)  # (T,)
        self._head_rows: dict[int, Tensor] = {}

    def head_rows(self, num_heads: int) -> Tensor:
        """``(T, H)``: the row of each real token and head in a ``(B, H, N, d)`` tensor seen as ``(B H N, d)``
        (requires padding: ``index`` set)."""
        if num_heads not in self._head_rows:
            seq, pos = self.index // self.length, self.index % self.length
            heads = torch.arange(num_heads, device=self.index.device)
            self._head_rows[num_heads] = (seq[:, None] * num_heads + heads) * self.length + pos[:, None]
        return self._head_rows[num_heads]

    def pack(self, padded: Tensor) -> Tensor:
        """``(B, N, ...)`` -> ``(T, ...)``."""
        flat = padded.reshape(self.batch * self.length, *padded.shape[2:])
        return flat if self.index is None else flat.index_select(0, self.index)

    def unpack(self, packed: Tensor) -> Tensor:
        """``(T, ...)`` -> ``(B, N, ...)``, zeros at the pads."""
        rest = packed.shape[1:]
        if self.index is not None:
            packed = packed.new_zeros(self.batch * self.length, *rest).index_copy(0, self.index, packed)
        return packed.view(self.batch, self.length, *rest)
