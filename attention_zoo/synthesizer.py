"""Synthesizer (Tay et al., arXiv 2005.00743): attention weights synthesized without query-key dot products.

Two variants (``variant``), per head, masked to real (and, when causal, earlier) keys:

    dense:              B_i = W_2 relu(W_1 x_i + b_1) + b_2 in R^{max_len},  out = softmax(B[:, :n]) V
    factorized_random:  B = R_1 R_2^T,  R_1, R_2 in R^{max_len x k} learned,  out = softmax(B[:n, :n]) V

The per-token input ``x_i`` of the dense variant is the query ``q_i``; the factorized variant ignores q and
k (LRA ``ignore_dot_product=True``, default ``synthesizer_mode='factorized_random'``, ``k=32``); ignored
inputs get a zero gradient. O(n^2 d): the weights are dense; the fast form builds them ``chunk_size``
query rows at a time (memory O(chunk_size n)) and only up to the batch's last real token (queries past
it are pads in every sequence and get zeros). Initialisation gives logits of unit scale.

``dropout`` is LRA's attention dropout: ``synthetic_attention`` in
``lra_benchmarks/models/synthesizer/synthesizer_attention.py`` drops the softmax of the synthetic weights
(``attention_dropout_rate``) in training; so do we (``local.attention_dropout``, by query and key position).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._attention_dropout import attention_dropout, check_dropout, dropout_seed
from ._blocks import explicit_attention, keep_in_graph, pad_tokens, real_lengths, real_tokens
from .kernel import float32_region
from .registry import register

VARIANTS = ("dense", "factorized_random")


def naive_synthesizer(logits: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                      causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B|1, H, N, N)`` weights ``softmax(logits)`` over allowed keys, times V."""
    n = logits.shape[-1]
    allowed = real_tokens(key_padding_mask, v)[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=v.device).tril()
    return explicit_attention(logits, allowed, v).to(v.dtype)


@register("synthesizer")
class SynthesizerAttention(nn.Module):
    """Dense or factorized-random synthetic attention weights; needs ``max_len``.

    ``dropout``: attention dropout on the synthetic weights in training (default 0: none), as
    ``lra_benchmarks/models/synthesizer/synthesizer_attention.py`` applies ``attention_dropout_rate``.
    """

    supports_causal = True
    quadratic = True  # time (and memory) grow with the square of the sequence length

    def __init__(self, *, head_dim: int, num_heads: int, max_len: int | None,
                 variant: str = "factorized_random", rank: int = 32, chunk_size: int = 256,
                 dropout: float = 0.0, causal: bool = False):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"synthesizer variant must be one of {', '.join(VARIANTS)}; got {variant!r}")
        if max_len is None:
            raise ValueError("synthesizer needs max_len: its logits span the length")
        if rank < 1 or chunk_size < 1:
            raise ValueError(f"synthesizer needs rank >= 1 and chunk_size >= 1, got {rank}, {chunk_size}")
        self.variant, self.max_len, self.chunk_size, self.causal = variant, max_len, chunk_size, causal
        self.dropout = check_dropout("synthesizer", dropout)
        h, d = num_heads, head_dim
        if variant == "dense":
            self.w1 = nn.Parameter(torch.randn(h, d, d) / d**0.5)  # (H, d, d)
            self.b1 = nn.Parameter(torch.zeros(h, 1, d))
            self.w2 = nn.Parameter(torch.randn(h, d, max_len) * (2 / d) ** 0.5)  # (H, d, max_len)
            self.b2 = nn.Parameter(torch.zeros(h, 1, max_len))
        else:
            self.r1 = nn.Parameter(torch.randn(h, max_len, rank) / rank**0.25)  # (H, max_len, k)
            self.r2 = nn.Parameter(torch.randn(h, max_len, rank) / rank**0.25)

    def logits(self, q: Tensor, rows: slice, n: int) -> Tensor:
        """Synthetic logits of query rows ``rows`` over the first ``n`` keys: ``(B|1, H, R, n)``, float32."""
        if self.variant == "dense":
            hidden = torch.relu(q[:, :, rows].float() @ self.w1.float() + self.b1.float())  # (B, H, R, d)
            return hidden @ self.w2[:, :, :n].float() + self.b2[:, :, :n].float()
        return (self.r1[:, rows].float() @ self.r2[:, :n].float().transpose(-1, -2))[None]

    def _bias(self, real: Tensor, rows: slice) -> Tensor:
        """``(B, 1, R|1, L)``: 0 for allowed keys, the most negative float for the others."""
        allowed = real[:, None, None, :]
        if self.causal:
            pos = torch.arange(real.shape[-1], device=real.device)
            allowed = allowed & (pos[None, :] <= pos[rows, None])
        blocked = torch.finfo(torch.float32).min
        return torch.zeros(allowed.shape, device=real.device).masked_fill(~allowed, blocked)

    def _check_length(self, n: int) -> None:
        if n > self.max_len:
            raise ValueError(f"synthesizer was built for max_len={self.max_len}, got a sequence of {n}")

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        n = q.shape[-2]
        self._check_length(n)
        real = real_tokens(key_padding_mask, q)
        length = max(int(real_lengths(real).max()), 1)  # later queries and keys are pads in every row
        seed = dropout_seed() if self.training and self.dropout > 0 else None
        pos = torch.arange(length, device=q.device)
        with float32_region(v):
            values = v[:, :, :length].float()
            outs = []
            for start in range(0, length, self.chunk_size):
                rows = slice(start, min(start + self.chunk_size, length))
                logits = self.logits(q, rows, length) + self._bias(real[:, :length], rows)
                probs = logits.softmax(-1)  # (B, H, R, length)
                if seed is not None:
                    probs = attention_dropout(probs, self.dropout, seed, pos[rows, None], pos)
                outs.append(probs @ values)
            out = pad_tokens(torch.cat(outs, dim=2), n)
        return keep_in_graph(out.to(v.dtype), q, k)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle: the explicit ``(B, H, N, N)`` weight matrix times V."""
        n = q.shape[-2]
        self._check_length(n)
        out = naive_synthesizer(self.logits(q, slice(0, n), n), v, key_padding_mask, causal=self.causal)
        return keep_in_graph(out, q, k)

