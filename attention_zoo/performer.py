"""Performer, FAVOR+ (Choromanski et al., arXiv 2009.14794): positive orthogonal random features.

Softmax kernel ``exp(q . k / sqrt(d)) = E_w[phi(q) . phi(k)]`` with ``x' = x d^(-1/4)`` and
``phi(x) = m^(-1/2) [exp(w_i . x' - |x'|^2 / 2)]_{i=1..m}``; the rows ``w_i`` are stacked blocks of
orthogonal directions with chi_d norms (``ortho_scaling=0``) or sqrt(d) norms (``ortho_scaling=1``).
Normalised linear attention on these features, O(n m d). Stabiliser, as lucidrains/performer-pytorch
(``softmax_kernel``, transcribed from google-research's fast_attention): before the exponential, a query's
features are shifted by the max of its projections ``max_i w_i . q'`` and the keys' by the max of all
real keys' projections ``max_{j,i} w_i . k'_j``; then ``+1e-4`` is added to every feature. The shifts
would cancel in the normalisation, the ``+1e-4`` does not: it weighs more for a query whose
``|q'|^2 / 2`` is large, so the shift is part of the kernel. Deliberate differences on padded input: the
key shift is a max over real keys only and masked keys are removed from the denominator (the reference
only zeroes their values). The denominator has no ``eps`` by default (``eps=0``), as the reference's
non-causal ``linear_attention``: every feature is at least ``1e-4 / sqrt(m)``, so it is positive, and it
can be small enough that an ``eps`` of 1e-6 moves the output by percents. Causal: the key shift is the
data-free bound ``|w|^2 / 2`` on the log-feature ``w . k' - |k'|^2 / 2`` instead, so the future cannot
leak in through a max over the sequence.

Non-causal attention (the LRA setting) runs on ``_chunked_attention``: the features of a chunk of tokens
are made, used and dropped, and backward makes them again (``FavorChunkMap``), so autograd keeps
``q, k, [v, 1]`` and the ``(m, D + 1)`` state instead of four ``(B, H, N, m)`` tensors (features and
exponentials of queries and keys). The key shift, a max over all real keys, comes from a first pass over
key chunks (``key_shift_chunked``) that stores nothing. Same numbers as the features of
``performer_features`` (to float rounding); causal attention and float64 inputs keep that path.

``kernel="relu"`` is the generalized kernel of the LRA Performer: ``phi(x) = relu(w . x') + 1e-3``,
whose expectation is the arc-cosine kernel (Cho & Saul 2009). The projection is a buffer drawn from
``seed``; in training it is redrawn every ``redraw_interval`` calls, in evaluation it never changes.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn

from ._chunked_attention import chunked_kernel_attention
from ._sketch import CHUNK_BYTES, Workspace, token_chunks
from .kernel import float32_region, kernel_attention, naive_kernel_attention, values_and_ones
from .registry import register

KERNELS = ("softmax", "relu")
SOFTMAX_FEATURE_EPS = 1e-4
RELU_FEATURE_EPS = 1e-3
CAUSAL_KEY_HEADROOM = 60.0  # exp(60) * 16k keys still fits in float32


def orthogonal_gaussian_projection(features: int, dim: int, scaling: int = 0,
                                   generator: torch.Generator | None = None) -> Tensor:
    """``(features, dim)`` rows: blocks of ``dim`` orthogonal Haar directions, chi_d or sqrt(d) norms."""
    gauss = torch.randn(math.ceil(features / dim), dim, dim, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gauss)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]  # sign fix makes Q Haar (Mezzadri 2007)
    directions = q.transpose(-1, -2).reshape(-1, dim)[:features]  # rows of each block are orthogonal
    if scaling == 0:
        norms = torch.randn(features, dim, generator=generator, dtype=torch.float64).norm(dim=1)
    else:
        norms = torch.full((features,), math.sqrt(dim), dtype=torch.float64)
    return (directions * norms[:, None]).float()


def softmax_log_features(x: Tensor, projection: Tensor) -> tuple[Tensor, Tensor]:
    """``(w_i . x' - |x'|^2 / 2, w_i . x')`` with ``x' = x d^(-1/4)``: the log of the unnormalised positive
    feature and the projection alone (whose max is the stabiliser), each ``(B, H, N, m)``."""
    x = x.float() * x.shape[-1] ** -0.25
    projected = x @ projection.float().T
    return projected - x.square().sum(-1, keepdim=True) / 2, projected


def relu_features(x: Tensor, projection: Tensor) -> Tensor:
    """Generalized-kernel features ``relu(w . x') + 1e-3`` with ``x' = x d^(-1/4)``, float32."""
    x = x.float() * x.shape[-1] ** -0.25
    return torch.relu(x @ projection.float().T) + RELU_FEATURE_EPS  # (B, H, N, m)


def key_shift(projected_k: Tensor, key_padding_mask: Tensor | None, projection: Tensor, causal: bool) -> Tensor:
    """Stabiliser for the keys: max of ``w . k'`` over real keys, or (causal) a data-free bound."""
    if causal:  # w . x' - |x'|^2 / 2 <= |w|^2 / 2
        bound = projection.float().square().sum(-1).max() / 2
        return (bound - CAUSAL_KEY_HEADROOM).clamp_min(0.0)
    if key_padding_mask is not None:
        projected_k = projected_k.masked_fill(~key_padding_mask[:, None, :, None], float("-inf"))
    shift = projected_k.amax(dim=(-1, -2), keepdim=True)  # (B, H, 1, 1)
    return torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift)).detach()


def performer_features(q: Tensor, k: Tensor, projection: Tensor, key_padding_mask: Tensor | None = None,
                       *, kernel: str = "softmax", causal: bool = False) -> tuple[Tensor, Tensor]:
    """``(phi(q), phi(k))`` ``(B, H, N, m)`` in float32, stabilised as in the module docstring."""
    with float32_region(q):
        if kernel == "relu":
            return relu_features(q, projection), relu_features(k, projection)
        ratio = projection.shape[0] ** -0.5
        (log_q, projected_q), (log_k, projected_k) = (softmax_log_features(x, projection) for x in (q, k))
        shift_q = projected_q.amax(-1, keepdim=True).detach()
        shift_k = key_shift(projected_k, key_padding_mask, projection, causal)
        phi_q = ratio * (torch.exp(log_q - shift_q) + SOFTMAX_FEATURE_EPS)
        phi_k = ratio * (torch.exp(log_k - shift_k) + SOFTMAX_FEATURE_EPS)
        return phi_q, phi_k


@torch.no_grad()
def key_shift_chunked(k: Tensor, projection: Tensor, key_padding_mask: Tensor | None,
                      chunk_bytes: int = CHUNK_BYTES) -> Tensor:
    """``key_shift`` (non-causal) without the ``(B, H, N, m)`` projections: a running max over key chunks.

    ``k`` ``(B, H, N, d)`` float32; returns ``(B H, 1, 1)``, 0 where a sequence has no real key.
    """
    b, h, n, d = k.shape
    w_t = projection.float().T
    shift = k.new_full((b, h), float("-inf"))
    for sl in token_chunks(n, b * h, projection.shape[0], k.element_size(), chunk_bytes):
        projected = (k[:, :, sl] * d**-0.25) @ w_t  # (B, H, C, m), as softmax_log_features
        if key_padding_mask is not None:
            projected.masked_fill_(~key_padding_mask[:, None, sl, None], float("-inf"))
        torch.maximum(shift, projected.amax(dim=(-1, -2)), out=shift)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    return shift.view(b * h, 1, 1)


class FavorChunkMap:
    """FAVOR+ (or ReLU) features of token chunks ``x_c`` ``(B H, C, d)``, a ``ChunkMap`` of ``_chunked_attention``.

    ``shift`` ``(B H, 1, 1)``: the keys' stabiliser; None: each token is shifted by its own max projection
    (queries). Softmax: ``phi = r (exp(l - c) + 1e-4)`` with ``l = w . x' - |x'|^2 / 2``, ``x' = s x``,
    ``s = d^(-1/4)``, ``r = m^(-1/2)``; the shift ``c`` is a constant (detached, as performer-pytorch), so with
    ``G = d loss / d phi * r exp(l - c)``:  ``d loss / d x = s (G W - x' sum_i G_i)``.
    ReLU: ``phi = relu(w . x') + 1e-3`` and ``d loss / d x = s ((d loss / d phi) [w . x' > 0]) W``.
    The projection is a buffer: it gets no gradient.
    """

    def __init__(self, shift: Tensor | None, like: Tensor, need_grad: bool, *, projection: Tensor, kernel: str):
        self.shift, self.kernel = shift, kernel
        self.w = projection.float()  # (m, d)
        self.w_t = self.w.T.contiguous()  # (d, m)
        self.features, self.d = self.w.shape
        self.scale, self.ratio = self.d**-0.25, self.features**-0.5
        self.work = Workspace(like)

    def width(self) -> int:
        return self.features

    def _project(self, x_c: Tensor) -> Tensor:
        """``w . x'`` of the chunk into the buffer ``proj``; ``x'`` kept in ``xs``."""
        rows, c, d = x_c.shape
        self.xs = torch.mul(x_c, self.scale, out=self.work.get("xs", (rows, c, d)))
        proj = self.work.get("proj", (rows, c, self.features))
        torch.mm(self.xs.view(rows * c, d), self.w_t, out=proj.view(rows * c, self.features))
        return proj

    def _exp(self, x_c: Tensor) -> Tensor:
        """Softmax: ``exp(l - c)`` in the buffer ``proj``; ReLU: the projection."""
        proj = self._project(x_c)
        if self.kernel == "relu":
            return proj
        shift = proj.amax(-1, keepdim=True) if self.shift is None else self.shift
        return proj.sub_(self.xs.square().sum(-1, keepdim=True) / 2).sub_(shift).exp_()

    def _finish(self, e: Tensor, out: Tensor) -> Tensor:
        if self.kernel == "relu":
            return torch.clamp(e, min=0, out=out).add_(RELU_FEATURE_EPS)
        return torch.add(e, SOFTMAX_FEATURE_EPS, out=out).mul_(self.ratio)

    def forward(self, x_c: Tensor) -> Tensor:
        e = self._exp(x_c)
        return self._finish(e, e)

    def recompute(self, x_c: Tensor) -> Tensor:
        self.e = self._exp(x_c)  # kept for backprop
        return self._finish(self.e, self.work.get("phi", self.e.shape))

    def backprop(self, x_c: Tensor, grad_phi: Tensor) -> Tensor:
        if self.kernel == "relu":
            grad = grad_phi.masked_fill_(self.e <= 0, 0)
        else:
            grad = grad_phi.mul_(self.e).mul_(self.ratio)
        rows, c, d = x_c.shape
        grad_x = self.work.get("grad_x", (rows, c, d))
        torch.mm(grad.view(rows * c, self.features), self.w, out=grad_x.view(rows * c, d))
        if self.kernel != "relu":
            grad_x.addcmul_(self.xs, grad.sum(-1, keepdim=True), value=-1)
        return grad_x.mul_(self.scale)

    def grad_param(self) -> None:
        return None


def chunked_performer(q: Tensor, k: Tensor, v: Tensor, projection: Tensor, key_padding_mask: Tensor | None = None,
                      *, kernel: str = "softmax", eps: float = 0.0, chunk_bytes: int = CHUNK_BYTES) -> Tensor:
    """Non-causal performer attention, ``kernel_attention(*performer_features(...), v)``, with chunked features
    recomputed in backward (no ``(B, H, N, m)`` tensor kept). ``q, k, v`` ``(B, H, N, d)``; float32 inside."""
    out_dtype = v.dtype
    with float32_region(q):
        q, k, v = q.float(), k.float(), v.float()
        v1 = values_and_ones(v, key_padding_mask)  # (B, H, N, D + 1), padded rows zero
        shift = None if kernel == "relu" else key_shift_chunked(k.detach(), projection, key_padding_mask,
                                                                 chunk_bytes)
        make_map = functools.partial(FavorChunkMap, projection=projection, kernel=kernel)
        out = chunked_kernel_attention(q, k, v1, None, shift, make_map, eps=eps, chunk_bytes=chunk_bytes)
    return out.to(out_dtype)


def naive_performer(q: Tensor, k: Tensor, v: Tensor, projection: Tensor,
                    key_padding_mask: Tensor | None = None, *, kernel: str = "softmax", eps: float = 1e-6,
                    causal: bool = False) -> Tensor:
    """Oracle: the explicit ``(B, H, N, N)`` weights ``phi(q_i) . phi(k_j)`` of the same features."""
    phi_q, phi_k = performer_features(q, k, projection, key_padding_mask, kernel=kernel, causal=causal)
    return naive_kernel_attention(phi_q, phi_k, v, key_padding_mask, eps=eps, causal=causal)


def exact_softmax_kernel(q: Tensor, k: Tensor) -> Tensor:
    """The kernel FAVOR+ estimates: ``exp(q_i . k_j / sqrt(d))`` ``(B, H, N, N)``, float64."""
    return torch.exp(q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1]))


def exact_arccos_kernel(q: Tensor, k: Tensor, eps: float = RELU_FEATURE_EPS) -> Tensor:
    """Per-feature expectation of ``(relu(w . q') + eps)(relu(w . k') + eps)`` for ``w ~ N(0, I)``.

    ``|a||b| (sin t + (pi - t) cos t) / (2 pi) + eps (|a| + |b|) / sqrt(2 pi) + eps^2`` with ``a = q'``,
    ``b = k'``, ``t`` their angle (order-1 arc-cosine kernel); float64, ``(B, H, N, N)``.
    """
    scale = q.shape[-1] ** -0.25
    a, b = scale * q.double(), scale * k.double()
    na, nb = a.norm(dim=-1, keepdim=True), b.norm(dim=-1, keepdim=True).transpose(-1, -2)
    cos = ((a @ b.transpose(-1, -2)) / (na * nb).clamp_min(1e-300)).clamp(-1.0, 1.0)
    angle = torch.arccos(cos)
    relu_relu = na * nb * (torch.sin(angle) + (math.pi - angle) * cos) / (2 * math.pi)
    return relu_relu + eps * (na + nb) / math.sqrt(2 * math.pi) + eps**2


def exact_kernel_attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None,
                           *, kernel: str = "softmax", causal: bool = False) -> Tensor:
    """Normalised attention with the exact kernel the random features approximate, computed in float64."""
    weights = exact_softmax_kernel(q, k) if kernel == "softmax" else exact_arccos_kernel(q, k)
    if key_padding_mask is not None:
        weights = weights * key_padding_mask[:, None, None, :]
    if causal:
        weights = weights.tril()
    return ((weights @ v.double()) / weights.sum(-1, keepdim=True)).to(v.dtype)


@register("performer")
class PerformerAttention(nn.Module):
    """FAVOR+ (or the generalized ReLU kernel) with a seeded, periodically redrawn projection."""

    supports_causal = True
    quadratic = False

    def __init__(self, *, head_dim: int, features: int = 256, kernel: str = "softmax", ortho_scaling: int = 0,
                 redraw_interval: int = 1000, seed: int | None = None, eps: float = 0.0,
                 causal: bool = False, chunk_size: int = 256):
        super().__init__()
        if kernel not in KERNELS:
            raise ValueError(f"performer kernel must be one of {KERNELS}, got {kernel!r}")
        if ortho_scaling not in (0, 1):
            raise ValueError(f"performer ortho_scaling must be one of (0, 1), got {ortho_scaling!r}")
        if features < 1 or redraw_interval < 0:
            raise ValueError("performer needs features >= 1 and redraw_interval >= 0 (0: never redraw)")
        self.head_dim, self.features, self.kernel = head_dim, features, kernel
        self.ortho_scaling, self.redraw_interval = ortho_scaling, redraw_interval
        self.eps, self.causal, self.chunk_size = eps, causal, chunk_size
        self.seed = int(torch.randint(2**31 - 1, ())) if seed is None else int(seed)
        self.draws, self.calls_since_draw = 0, 0
        self.register_buffer("projection", self.draw_projection(0))  # (m, d)

    def draw_projection(self, draw: int) -> Tensor:
        """The ``draw``-th projection of this module's seed (reproducible)."""
        generator = torch.Generator().manual_seed(self.seed * 100_003 + draw)
        return orthogonal_gaussian_projection(self.features, self.head_dim, self.ortho_scaling, generator)

    @torch.no_grad()
    def redraw(self) -> None:
        """Replace (not overwrite) the projection, so graphs still holding the old one stay valid."""
        self.draws += 1
        self.calls_since_draw = 0
        self.projection = self.draw_projection(self.draws).to(self.projection.device)

    def get_extra_state(self) -> dict:
        return {"seed": self.seed, "draws": self.draws, "calls_since_draw": self.calls_since_draw}

    def set_extra_state(self, state: dict) -> None:
        self.seed, self.draws = state["seed"], state["draws"]
        self.calls_since_draw = state["calls_since_draw"]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if self.training and self.redraw_interval:
            if self.calls_since_draw >= self.redraw_interval:
                self.redraw()
            self.calls_since_draw += 1
        if not self.causal and q.dtype != torch.float64 and q.shape[-2] == k.shape[-2]:
            return chunked_performer(q, k, v, self.projection, key_padding_mask, kernel=self.kernel, eps=self.eps)
        phi_q, phi_k = performer_features(q, k, self.projection, key_padding_mask, kernel=self.kernel,
                                          causal=self.causal)
        return kernel_attention(phi_q, phi_k, v, key_padding_mask, eps=self.eps, causal=self.causal,
                                chunk_size=self.chunk_size)

    def naive(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """The quadratic oracle with this module's current projection."""
        return naive_performer(q, k, v, self.projection, key_padding_mask, kernel=self.kernel, eps=self.eps,
                               causal=self.causal)
