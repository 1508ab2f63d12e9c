"""The LRA encoder backbone: embeddings, pre-norm attention blocks, pooling over real tokens.

Shape of the PyTorch-port protocol (Nystromformer/Skyformer LRA code): learned positions, pre-norm
blocks (attention + GELU FFN), a final LayerNorm, mean pooling over real tokens only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attention_zoo import extra_inputs

from .dropout import Dropout
from .feedforward import FeedForward
from .heads import pack_heads, split_heads
from .norm_linear import norm_linear
from .packing import Packing
from .residual import linear_dropout_add
from .settings import Pooling
from .short_conv import ShortConv


class AttentionBlock(nn.Module):
    """Pre-norm self-attention: ``x + dropout(W_o attention(W_q x, W_k x, W_v x, **extras))``.

    q, k and v are ``qkv_dim`` wide (default ``dim``; LRA's JAX configs set it apart), split into heads.
    ``extras`` are the mechanism's declared extra projections of the normalised input
    (``attention_zoo.extra_inputs``, e.g. PolaFormer's gate): the input projection is widened by one
    ``qkv_dim``-sized slice per name, and each slice reaches the attention as that keyword, in head layout.
    ``short_conv``: a depthwise convolution of that many positions on q, k and v (``lra.short_conv``).
    """

    def __init__(self, dim: int, num_heads: int, attention: nn.Module, dropout: float, qkv_dim: int | None = None,
                 short_conv: int | None = None, causal: bool = False):
        super().__init__()
        self.inner = qkv_dim or dim
        if self.inner % num_heads:
            raise ValueError(f"q/k/v width {self.inner} is not divisible by {num_heads} heads")
        self.num_heads = num_heads
        self.norm = nn.LayerNorm(dim)
        self.num_inputs = 3 + len(extra_inputs(attention))
        self.qkv = nn.Linear(dim, self.num_inputs * self.inner)
        self.attention = attention
        self.conv = None if short_conv is None else ShortConv(3 * self.inner, short_conv, causal)  # q, k, v
        self.out = nn.Linear(self.inner, dim)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor, packing: Packing | None = None) -> Tensor:
        """``x``: ``(B, N, dim)``, or with ``packing`` the real tokens ``(T, dim)`` (``lra.packing``)."""
        parts = norm_linear(x, self.norm, self.qkv)  # (B, N, width) or (T, width)
        if packing is not None:
            parts = packing.unpack(parts)  # (B, N, width), zeros at the pads
        if self.conv is not None:
            qkv = self.conv(parts[..., : 3 * self.inner], None if packing is not None else mask)  # unpacked: pads 0
            parts = qkv if self.num_inputs == 3 else torch.cat([qkv, parts[..., 3 * self.inner :]], dim=-1)
        q, k, v, *rest = split_heads(parts, self.num_inputs, self.num_heads)  # each (B, H, N, head_dim)
        extras = dict(zip(extra_inputs(self.attention), rest))
        y = self.attention(q, k, v, key_padding_mask=mask, **extras)  # (B, H, N, head_dim)
        y = pack_heads(y, packing)  # (B, N, inner) or (T, inner)
        return linear_dropout_add(x, y, self.out, self.dropout)  # x + dropout(out(y))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` ``(B, N, D)`` over positions where ``mask`` ``(B, N)`` is True."""
    w = mask.to(x.dtype).unsqueeze(-1)
    return (x * w).sum(1) / w.sum(1).clamp_min(1.0)


def padded_mean(x: Tensor, mask: Tensor, max_len: int) -> Tensor:
    """Sum of ``x`` ``(B, N, D)`` over real positions divided by ``max_len``: the PyTorch ports' pooling, which
    zeroes padded positions and averages over all ``max_len`` of them (Nystromformer LRA model.py)."""
    return (x * mask.to(x.dtype).unsqueeze(-1)).sum(1) / max_len


class Encoder(nn.Module):
    """Token + learned position embeddings, ``depth`` blocks, final norm, pooled ``(B, dim)`` output.

    ``pooling="none"`` returns every position ``(B, N, dim)`` (token-level tasks such as ``ar``);
    ``"padded_mean"`` is the ports' sum over real tokens divided by ``max_len``.
    ``embed_init_std`` draws token and position embeddings from N(0, std^2) (the ports: 0.02); None keeps
    ``nn.Embedding``'s N(0, 1). ``short_conv``: each block's q, k, v through a depthwise convolution of that
    many positions, causal when ``causal`` (``lra.short_conv``); None: none.
    Between the embeddings and the final norm only the real tokens are computed (``lra.packing``).
    ``checkpoint_blocks`` keeps only each block's input for backward and runs the block again there
    (``torch.utils.checkpoint``, the RNG state restored, so dropout draws the same masks): the same numbers
    in less memory, for about one more forward pass.
    """

    def __init__(self, *, vocab_size: int, max_len: int, dim: int, depth: int, num_heads: int,
                 ffn_dim: int, dropout: float, make_attention: Callable[[int], nn.Module],
                 pooling: str = "mean", qkv_dim: int | None = None, checkpoint_blocks: bool = False,
                 embed_init_std: float | None = None, short_conv: int | None = None, causal: bool = False):
        super().__init__()
        self.checkpoint_blocks = checkpoint_blocks
        if pooling not in get_args(Pooling):
            raise ValueError(f"pooling must be one of {', '.join(get_args(Pooling))}, got {pooling!r}")
        self.pooling, self.max_len = pooling, max_len
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Embedding(max_len + (pooling == "cls"), dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if pooling == "cls" else None
        if embed_init_std is not None:
            nn.init.normal_(self.tokens.weight, std=embed_init_std)
            nn.init.normal_(self.positions.weight, std=embed_init_std)
        self.dropout = Dropout(dropout)
        self.blocks = nn.ModuleList()
        for layer in range(depth):
            self.blocks.append(AttentionBlock(dim, num_heads, make_attention(layer), dropout, qkv_dim,
                                              short_conv, causal))
            self.blocks.append(FeedForward(dim, ffn_dim, dropout))
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        b, n = tokens.shape
        if n > self.max_len:
            raise ValueError(f"sequence length {n} exceeds the model's max_len {self.max_len}")
        mask = torch.arange(n, device=tokens.device)[None, :] < lengths[:, None]  # (B, N) from true lengths
        x = self.tokens(tokens)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1)
            mask = torch.cat([mask.new_ones(b, 1), mask], dim=1)
        packing = Packing(mask)
        x = self.dropout(packing.pack(x + self.positions.weight[: x.shape[1]]))  # (T, dim): real tokens only
        for block in self.blocks:
            inputs = (x, mask, packing) if isinstance(block, AttentionBlock) else (x,)
            if self.checkpoint_blocks and torch.is_grad_enabled():
                x = checkpoint(block, *inputs, use_reentrant=False, preserve_rng_state=True)
            else:
                x = block(*inputs)
        x = packing.unpack(self.norm(x))  # (B, N, dim), zeros at the pads
        if self.pooling == "none":
            return x
        if self.pooling == "padded_mean":
            return padded_mean(x, mask, self.max_len)
        return x[:, 0] if self.cls is not None else masked_mean(x, mask)


class ClassifierHead(nn.Sequential):
    """``Linear(dim, hidden) -> ReLU -> Linear(hidden, classes)`` (the ports' SCHead)."""

    def __init__(self, dim: int, hidden: int, num_classes: int):
        super().__init__(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
