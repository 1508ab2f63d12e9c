"""Capture each layer's attention inputs and materialise a mechanism's implicit attention matrix.

Every mechanism of ``attention_zoo`` has a quadratic oracle ``module.naive(q, k, v, mask)`` that builds the
explicit ``(B, H, N, N)`` weights ``W`` and returns ``W v``. Fed the identity as values it returns ``W`` itself
(``W I = W``), whatever the feature map, landmarks or sketch: that is the default form here. A mechanism whose
output is not one ``N x N`` matrix per head applied to ``v`` registers its own form with ``@matrix_form``;
``reproduction_error`` says, on the model's own batch, whether a form reproduces the real output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attention_zoo.softmax import naive_softmax
from lra.model import AttentionBlock

MatrixForm = Callable[[nn.Module, Tensor, Tensor, dict, "Tensor | None"], Tensor]
MATRIX_FORMS: dict[str, MatrixForm] = {}


@dataclass
class LayerCapture:
    """One attention layer's inputs and output on a batch: q, k, v, out ``(B, H, N, d)``, mask ``(B, N)``."""

    layer: int
    module: nn.Module
    q: Tensor
    k: Tensor
    v: Tensor
    mask: Tensor
    out: Tensor
    extras: dict[str, Tensor] = field(default_factory=dict)

    def lengths(self) -> list[int]:
        return self.mask.sum(-1).tolist()

    def sequence(self, i: int, *matrices: Tensor) -> tuple[Tensor, ...]:
        """q, k, v, out ``(1, H, L, d)`` of sequence ``i`` cut to its ``L`` real tokens, then each of ``matrices``
        ``(B, H, N, N)`` cut to ``(1, H, L, L)``."""
        n = int(self.mask[i].sum())
        cut = [t[i:i + 1, :, :n] for t in (self.q, self.k, self.v, self.out)]
        return (*cut, *(m[i:i + 1, :, :n, :n] for m in matrices))


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The attention module of every ``AttentionBlock`` of ``model``, in layer order."""
    return [m.attention for m in model.modules() if isinstance(m, AttentionBlock)]


@torch.no_grad()
def capture(model: nn.Module, batch: dict[str, Tensor]) -> list[LayerCapture]:
    """Run ``model`` on ``batch`` and return what reached each attention layer and what it returned."""
    layers = attention_modules(model)
    seen: dict[int, LayerCapture] = {}

    def keeper(index: int):
        def hook(module, args, kwargs, output):
            names = ("q", "k", "v", "key_padding_mask")
            given = {**dict(zip(names, args)), **kwargs}
            extras = {k: v for k, v in given.items() if k not in names}
            seen[index] = LayerCapture(index, module, given["q"], given["k"], given["v"],
                                       given["key_padding_mask"], output, extras)
        return hook

    handles = [m.register_forward_hook(keeper(i), with_kwargs=True) for i, m in enumerate(layers)]
    try:
        model(batch)
    finally:
        for handle in handles:
            handle.remove()
    return [seen[i] for i in range(len(layers))]


def matrix_form(name: str):
    """Register how mechanism ``name`` is materialised when the identity-value probe does not apply."""

    def decorator(form: MatrixForm) -> MatrixForm:
        MATRIX_FORMS[name] = form
        return form

    return decorator


def identity(q: Tensor, width: int = 1) -> Tensor:
    """``width`` identities side by side, ``(B, H, N, width N)``, in q's dtype."""
    n = q.shape[-2]
    eye = torch.eye(n, dtype=q.dtype, device=q.device).expand(*q.shape[:2], n, n)
    return torch.cat([eye] * width, dim=-1) if width > 1 else eye


def identity_probe(module: nn.Module, q: Tensor, k: Tensor, extras: dict, mask: Tensor | None) -> Tensor:
    """``module.naive(q, k, I, mask)`` ``(B, H, N, N)``: the oracle's weight matrix itself (padded keys' columns
    are zero)."""
    return module.naive(q, k, identity(q), mask, **extras).float()


def implicit_matrix(module: nn.Module, q: Tensor, k: Tensor, extras: dict | None = None,
                    mask: Tensor | None = None) -> Tensor:
    """The ``(B, H, N, N)`` matrix ``module`` applies to ``v`` for ``q, k`` ``(B, H, N, d)`` and key mask ``(B, N)``.

    Materialise on the batch the layer saw: some mechanisms couple its sequences (Nystromformer's ``original``
    pseudo-inverse starts from one scale for the whole batch).
    """
    form = MATRIX_FORMS.get(getattr(module, "registry_name", ""), identity_probe)
    return form(module, q, k, dict(extras or {}), mask)


@matrix_form("flatten")
def without_value_conv(module: nn.Module, q: Tensor, k: Tensor, extras: dict, mask: Tensor | None) -> Tensor:
    """FLatten: the attention weights alone; its per-channel value convolution is not one ``N x N`` matrix."""
    conv, module.dwc = module.dwc, None
    try:
        return identity_probe(module, q, k, {}, mask)
    finally:
        module.dwc = conv


@matrix_form("polaformer")
def same_polarity(module: nn.Module, q: Tensor, k: Tensor, extras: dict, mask: Tensor | None) -> Tensor:
    """PolaFormer: the same-sign weights (what the first half of each head's value channels sees); the
    opposite-sign half, the value convolution and the gate are left out."""
    conv, module.dwc = module.dwc, None
    try:
        return module.naive(q, k, identity(q, 2), mask)[..., :q.shape[-2]].float()
    finally:
        module.dwc = conv


def softmax_matrix(q: Tensor, k: Tensor, mask: Tensor | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(d))`` ``(B, H, N, N)`` on the same q, k (padded keys get no weight)."""
    q = q.float()
    return naive_softmax(q, k.float(), identity(q), mask)


def reproduction_error(matrix: Tensor, v: Tensor, out: Tensor) -> float:
    """``|matrix v - out| / |out|``: does the materialised matrix give the module's real output?"""
    rebuilt = matrix.detach().double() @ v.detach().double()
    out = out.detach().double()
    return float((rebuilt - out).norm() / out.norm().clamp_min(1e-30))
