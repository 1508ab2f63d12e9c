"""PolySketchFormer (Kacham, Mirrokni, Zhong; arXiv 2310.01655): sketched polynomial attention.

Target: degree-p polynomial attention on LayerNorm'd queries and keys (one shared LN, eps 1e-5),

    out_i = sum_j (q_i . k_j)^p v_j / (1 + sum_j (q_i . k_j)^p)        (p even, default 4)

where the 1 is the paper's stabilising normalisation constant. A degree-p/2 sketch ``x' in R^r`` with
``E[q' . k'] = (q . k)^(p/2)`` is squared for non-negativity, ``w_ij = (q'_i . k'_j)^2``, computed as
linear attention on ``phi(x) = vec(x' x'^T)``, ``phi(a) . phi(b) = (a . b)^2``, O(n r^2 d). Non-causal, the
sketch and phi (r^2 features, as the reference) are fused into the attention (``_chunked_attention``):
made per token chunk and recomputed in backward, never stored. Causal, phi is restricted to its upper
triangle (off-diagonal entries times sqrt 2, r(r+1)/2 features, the same kernel).

``sketch="random"``: ``x' = prod_{j<p/2} (x G_j) / sqrt(r)`` with ``G_j`` i.i.d. N(0, 1) ``(d, r)``
per head, a fixed buffer drawn from ``seed`` (the paper's Gaussian sketch; it is LLoPS' polynomial
sketch with fixed random Theta). ``sketch="learned"`` (degree 4): two branches of two levels of
``LN -> Linear(8r, no bias) -> GELU -> Linear(r, no bias)``, ``x' = tanh(x1 * x2 / sqrt r) sqrt r``,
shared by q, k and the heads (google-research polysketchformer/sketch_layer.py).

Deviation from google-research polysketchformer/polysketch_attention.py: it scales each Gaussian sketch
by ``1/sqrt(r)``, so ``E[q' . k'] = (q . k)^2 / r`` and its weights are ``(q . k)^4 / r^2`` against the
constant 1; here the sketch is unbiased (the paper's ``1/sqrt(r)`` on the product), so it approximates
``(q . k)^4``, checked against ``exact_polynomial_attention``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._chunk_maps import square_map
from ._chunked_attention import chunked_kernel_attention
from ._sketch import naive_polynomial_sketch, polynomial_sketch
from .kernel import at_least_float32, float32_region, kernel_attention, naive_normalized_attention, values_and_ones
from .registry import register

SKETCHES = ("random", "learned")
LEARNED_EXPANSION = 8  # hidden width of each learned sketch level, in units of r (reference value)


def exact_polynomial_attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                               degree: int = 4, normalization: float = 1.0, causal: bool = False) -> Tensor:
    """The kernel the random sketch approximates: weights ``(q_i . k_j)^p`` on (already normalised) q, k."""
    weights = (q.double() @ k.double().transpose(-1, -2)) ** degree  # (B, H, N, N)
    return naive_normalized_attention(weights, v, key_padding_mask, eps=normalization, causal=causal)


def symmetric_square_features(x: Tensor) -> Tensor:
    """Upper triangle of ``x x^T`` (off-diagonal times sqrt 2): ``(..., r) -> (..., r (r + 1) / 2)``."""
    r = x.shape[-1]
    i, j = torch.triu_indices(r, r, device=x.device)
    coef = x.new_full((len(i),), math.sqrt(2.0)).masked_fill_(i == j, 1.0)
    return x[..., i] * x[..., j] * coef


def naive_polysketch(q_sketch: Tensor, k_sketch: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, *,
                     normalization: float = 1.0, causal: bool = False) -> Tensor:
    """Oracle: explicit weights ``(q'_i . k'_j)^2`` from sketches ``q', k'`` ``(B, H, N, r)``, normalised."""
    weights = (q_sketch.double() @ k_sketch.double().transpose(-1, -2)) ** 2  # (B, H, N, N)
    return naive_normalized_attention(weights, v, key_padding_mask, eps=normalization, causal=causal)


def gaussian_sketch(num_heads: int, head_dim: int, sketch_size: int, degree: int, seed: int) -> Tensor:
    """Theta ``(H, 1, p/2, d, r)`` for ``polynomial_sketch``: N(0, 1) scaled so the product has 1/sqrt(r)."""
    gen = torch.Generator().manual_seed(seed)
    factors = degree // 2
    theta = torch.randn(num_heads, 1, factors, head_dim, sketch_size, generator=gen)
    return theta * sketch_size ** (-1 / (2 * factors))


def sketch_level(in_dim: int, sketch_size: int) -> nn.Sequential:
    """One learned sketch level: ``LN -> Linear(8r, no bias) -> GELU -> Linear(r, no bias)``."""
    hidden = LEARNED_EXPANSION * sketch_size
    level = nn.Sequential(nn.LayerNorm(in_dim, eps=1e-5), nn.Linear(in_dim, hidden, bias=False), nn.GELU(),
                          nn.Linear(hidden, sketch_size, bias=False))
    for layer in (level[1], level[3]):  # flax Dense default: variance 1 / fan_in
        nn.init.normal_(layer.weight, std=1 / math.sqrt(layer.in_features))
    return level


@register("polysketch")
class PolySketchAttention(nn.Module):
    """Sketched degree-p polynomial attention, random or learned sketch (see module docstring)."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, num_heads: int, sketch: str = "random", sketch_size: int = 32,
                 degree: int = 4, seed: int = 0, normalization: float = 1.0, causal: bool = False,
                 chunk_size: int = 256):
        super().__init__()
        if sketch not in SKETCHES:
            raise ValueError(f"polysketch sketch must be one of {', '.join(SKETCHES)}; got {sketch!r}")
        if degree < 2 or degree % 2:
            raise ValueError(f"polysketch degree must be even and >= 2, got {degree}")
        if sketch == "learned" and degree != 4:
            raise ValueError(f"polysketch learned sketch is degree 4, got degree={degree}")
        if sketch_size < 1 or normalization <= 0:
            raise ValueError("polysketch needs sketch_size >= 1 and normalization > 0")
        self.sketch, self.sketch_size, self.degree, self.seed = sketch, sketch_size, degree, seed
        self.normalization, self.causal, self.chunk_size = normalization, causal, chunk_size
        if sketch == "random":
            self.norm = nn.LayerNorm(head_dim, eps=1e-5)
            self.register_buffer("theta", gaussian_sketch(num_heads, head_dim, sketch_size, degree, seed))
        else:
            self.branches = nn.ModuleList(
                nn.Sequential(sketch_level(head_dim, sketch_size), sketch_level(sketch_size, sketch_size))
                for _ in range(2))

    def normalized(self, x: Tensor) -> Tensor:
        """The shared LayerNorm of the random sketch, float32 (float64 kept)."""
        x = at_least_float32(x)
        return F.layer_norm(x, self.norm.normalized_shape, self.norm.weight.to(x.dtype),
                            self.norm.bias.to(x.dtype), self.norm.eps)

    def sketched(self, x: Tensor, sketch=polynomial_sketch) -> Tensor:
        """``x'`` ``(B, H, N, r)`` in float32 (``sketch`` is swapped for the oracle's per-factor form)."""
        with float32_region(x):
            x = at_least_float32(x)
            if self.sketch == "random":
                return sketch(self.normalized(x), self.theta.to(x.dtype), False).to(x.dtype)
            x1, x2 = (branch(x) for branch in self.branches)
            root = math.sqrt(self.sketch_size)
            return torch.tanh(x1 * x2 / root) * root

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if not self.causal:  # fused: no (N, r^2) tensor at all
            with float32_region(v):
                v1 = values_and_ones(at_least_float32(v), key_padding_mask)
                if self.sketch == "random":  # the sketch too is made per chunk
                    x_q, x_k, theta = self.normalized(q), self.normalized(k), self.theta.to(v1.dtype)
                else:
                    x_q, x_k, theta = self.sketched(q), self.sketched(k), None
                out = chunked_kernel_attention(x_q, x_k, v1, theta, theta, square_map, eps=self.normalization,
                                               key_padding_mask=key_padding_mask)
            return out.to(v.dtype)
        with float32_region(v):
            phi_q = symmetric_square_features(self.sketched(q))  # (B, H, N, r (r + 1) / 2)
            phi_k = symmetric_square_features(self.sketched(k))
        return kernel_attention(phi_q, phi_k, v, key_padding_mask, eps=self.normalization, causal=self.causal,
                                chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Quadratic oracle: per-factor sketches, the explicit ``(q' . k')^2`` matrix, normalised."""
        q_sketch, k_sketch = (self.sketched(x, naive_polynomial_sketch) for x in (q, k))
        return naive_polysketch(q_sketch, k_sketch, v, key_padding_mask, normalization=self.normalization,
                                causal=self.causal)

    def exact(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The exact polynomial attention the random sketch approximates (same LayerNorm)."""
        if self.sketch != "random":
            raise ValueError("polysketch exact() is the target of the random sketch only")
        return exact_polynomial_attention(self.normalized(q), self.normalized(k), v, key_padding_mask,
                                          degree=self.degree, normalization=self.normalization,
                                          causal=self.causal)
