"""Hedgehog (Zhang et al., arXiv 2402.04347): linear attention with learnable softmax-like feature maps.

Per head, separate maps for queries and keys, each a learned affine map to ``f`` features followed by a
softmax over the feature dim of both signs ("fullspace", m = 2f):

    phi(x) = [softmax(x W + b), softmax(-(x W + b))]            W (H, d, f), b (H, f)
    out_i = phi_q(q_i)^T sum_j phi_k(k_j) v_j^T / (phi_q(q_i)^T sum_j phi_k(k_j) + eps)

The maps are spiky (low entropy) and monotonic in ``x W`` like ``exp(q . k)``; the paper trains them by
distillation, here they are trained end to end (its from-scratch setting). O(n 2f d).

Defaults follow HazyResearch/lolcats (src/model/feature_map.py ``SoftmaxDim``, ``FeatureMapMLP``):
f = 64, untied q/k maps, Kaiming-uniform ``W``, features clamped at 1e-12, denominator eps 1e-12.
The bias ``b`` is per head and feature (zero init); lolcats' optional bias is one scalar per head,
which a softmax cancels. ``init="identity"`` follows fla's HedgehogFeatureMap (``W`` = identity).
Non-causal fast path: the shared chunked engine (``_chunked_attention``) with this map as its chunk map,
``HedgehogChunkMap``: features are made per token chunk and made again in backward, never stored, so
autograd keeps O(N d) per layer instead of the (N, 2f) features and their softmax and clamp copies.
Checked against HazyResearch/lolcats@375df84 (``FeatureMapMLP`` + ``SoftmaxDim`` in src/model/feature_map.py,
``quadratic_attention`` in src/model/linear_attention/linear_attention.py) with a per-head constant bias
in ``tests/attention_zoo/test_parity_papers.py``; a bias that varies over features (trained) is the paper's
and fla's, not lolcats'; ``bias=False`` is lolcats' default.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor, nn

from ._chunked_attention import chunked_kernel_attention
from .kernel import float32_region, kernel_attention, naive_kernel_attention, values_and_ones
from .registry import register

INITS = ("kaiming", "identity", "normal")


def hedgehog_feature_map(x: Tensor, weight: Tensor, bias: Tensor | None, clamp: float = 1e-12) -> Tensor:
    """``[softmax(x W + b), softmax(-(x W + b))]``, clamped; ``x`` ``(B, H, N, d)``, ``W`` ``(H, d, f)``."""
    y = x.float() @ weight.float()  # (B, H, N, f)
    if bias is not None:
        y = y + bias.float()[:, None, :]
    return torch.cat([y.softmax(dim=-1), (-y).softmax(dim=-1)], dim=-1).clamp(min=clamp)


def naive_hedgehog(q: Tensor, k: Tensor, v: Tensor, w_q: Tensor, w_k: Tensor, b_q: Tensor | None,
                   b_k: Tensor | None, key_padding_mask: Tensor | None = None, *, eps: float = 1e-12,
                   causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weights ``phi_q(q_i) . phi_k(k_j)``, row-normalised."""
    return naive_kernel_attention(hedgehog_feature_map(q, w_q, b_q), hedgehog_feature_map(k, w_k, b_k), v,
                                  key_padding_mask, eps=eps, causal=causal)


class HedgehogChunkMap:
    """``hedgehog_feature_map`` as a chunk map of ``chunked_kernel_attention`` (``ChunkMap`` there).

    ``param`` is ``W`` ``(H, d, f)``, or ``[W; b]`` ``(H, d + 1, f)`` with ``bias``. Per chunk ``x_c``
    ``(B H, C, d)``: ``y = x_c W + b``, ``s = [softmax(y), softmax(-y)]``, ``phi = max(s, clamp)``, the same
    operations as ``hedgehog_feature_map``. Backward: clamp passes the gradient where ``s >= clamp``, each
    softmax gives ``s (g - sum(g s))`` (torch's softmax backward), and ``grad_y`` is the first minus the second.
    """

    def __init__(self, param: Tensor, like: Tensor, need_grad: bool, *, bias: bool, clamp: float = 1e-12):
        h, rows_w, f = param.shape
        self.batch, self.f, self.features, self.clamp = like.shape[0], f, 2 * f, clamp
        self.d = rows_w - int(bias)
        self.rows = self.batch * h
        weight = param[:, : self.d].expand(self.batch, h, self.d, f)
        self.weight = weight.reshape(self.rows, self.d, f)  # (B H, d, f)
        self.bias = param[:, self.d :].expand(self.batch, h, 1, f).reshape(self.rows, 1, f) if bias else None
        self.grad_weight = torch.zeros_like(self.weight) if need_grad else None
        self.grad_bias = torch.zeros_like(self.bias) if need_grad and bias else None

    def width(self) -> int:
        return self.features

    def _softmaxes(self, x_c: Tensor) -> Tensor:
        y = torch.bmm(x_c, self.weight)  # (B H, C, f)
        if self.bias is not None:
            y.add_(self.bias)
        return torch.cat([y.softmax(dim=-1), y.neg_().softmax(dim=-1)], dim=-1)

    def forward(self, x_c: Tensor) -> Tensor:
        return self._softmaxes(x_c).clamp_(min=self.clamp)

    def recompute(self, x_c: Tensor) -> Tensor:
        self.s = self._softmaxes(x_c)  # before the clamp: what both backward steps read
        return self.s.clamp(min=self.clamp)

    def backprop(self, x_c: Tensor, grad_phi: Tensor) -> Tensor:
        s, f = self.s, self.f
        grad_s = grad_phi.masked_fill_(s < self.clamp, 0)
        grad_pos = torch._softmax_backward_data(grad_s[..., :f], s[..., :f], -1, s.dtype)
        grad_y = grad_pos.sub_(torch._softmax_backward_data(grad_s[..., f:], s[..., f:], -1, s.dtype))
        if self.grad_weight is not None:
            self.grad_weight.baddbmm_(x_c.transpose(1, 2), grad_y)
            if self.grad_bias is not None:
                self.grad_bias.add_(grad_y.sum(dim=1, keepdim=True))
        return torch.bmm(grad_y, self.weight.transpose(1, 2))

    def grad_param(self) -> Tensor:
        """The gradient of ``param``: summed over the batch, in its shape."""
        h = self.rows // self.batch
        grad = self.grad_weight.view(self.batch, h, self.d, self.f).sum(0)
        if self.grad_bias is None:
            return grad
        return torch.cat([grad, self.grad_bias.view(self.batch, h, 1, self.f).sum(0)], dim=1)


def hedgehog_projection(num_heads: int, head_dim: int, feature_dim: int, init: str) -> Tensor:
    """An initial ``(H, d, f)`` projection: lolcats' Kaiming uniform, fla's identity, or ``N(0, 1/d)``."""
    w = torch.empty(num_heads, head_dim, feature_dim)
    if init == "kaiming":
        nn.init.kaiming_uniform_(w)
    elif init == "identity":
        w.copy_(torch.eye(head_dim, feature_dim).expand_as(w))
    else:
        nn.init.normal_(w, std=1 / math.sqrt(head_dim))
    return w


@register("hedgehog")
class HedgehogAttention(nn.Module):
    """Linear attention with learned two-sided softmax feature maps (see module docstring)."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, num_heads: int, feature_dim: int = 64, bias: bool = True,
                 init: str = "kaiming", eps: float = 1e-12, causal: bool = False, chunk_size: int = 256):
        super().__init__()
        if feature_dim < 1:
            raise ValueError(f"hedgehog feature_dim must be >= 1, got {feature_dim}")
        if init not in INITS:
            raise ValueError(f"hedgehog init must be one of {', '.join(INITS)}; got {init!r}")
        self.feature_dim, self.eps, self.causal, self.chunk_size = feature_dim, eps, causal, chunk_size
        self.w_q = nn.Parameter(hedgehog_projection(num_heads, head_dim, feature_dim, init))  # (H, d, f)
        self.w_k = nn.Parameter(hedgehog_projection(num_heads, head_dim, feature_dim, init))
        self.b_q = nn.Parameter(torch.zeros(num_heads, feature_dim)) if bias else None  # (H, f)
        self.b_k = nn.Parameter(torch.zeros(num_heads, feature_dim)) if bias else None

    def map_param(self, which: str) -> Tensor:
        """``W`` ``(H, d, f)``, with ``b`` appended as row ``d`` when there is a bias: ``(H, d + 1, f)``, float32."""
        weight, bias = (self.w_q, self.b_q) if which == "q" else (self.w_k, self.b_k)
        return weight.float() if bias is None else torch.cat([weight.float(), bias.float()[:, None]], dim=1)

    def features(self, x: Tensor, which: str) -> Tensor:
        """``phi_q`` or ``phi_k`` (``which`` in {"q", "k"}) of ``x``: ``(B, H, N, 2f)`` in float32."""
        weight, bias = (self.w_q, self.b_q) if which == "q" else (self.w_k, self.b_k)
        with float32_region(x):
            return hedgehog_feature_map(x, weight, bias)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if not self.causal:  # fused: no (N, 2f) tensor, forward or backward
            with float32_region(v):
                q, k = q.float(), k.float()
                v1 = values_and_ones(v.float(), key_padding_mask)
                out = chunked_kernel_attention(q, k, v1, self.map_param("q"), self.map_param("k"),
                                               partial(HedgehogChunkMap, bias=self.b_q is not None),
                                               eps=self.eps, key_padding_mask=key_padding_mask)
            return out.to(v.dtype)
        return kernel_attention(self.features(q, "q"), self.features(k, "k"), v, key_padding_mask,
                                eps=self.eps, causal=self.causal, chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's parameters."""
        return naive_hedgehog(q, k, v, self.w_q, self.w_k, self.b_q, self.b_k, key_padding_mask,
                              eps=self.eps, causal=self.causal)
