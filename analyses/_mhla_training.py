"""Gradient-trained students for the MHLA learning analysis (Yau et al., arXiv 2410.10101, Sec. 4).

Every student reads a sequence only through ``G = Z Z^T`` and the last token ``z_n``, which is exact for MHLA:
one layer predicts ``sum_h V_h G Q_h z_n``; a residual layer ``Z' = (I + M) Z`` with ``M = sum_h V_h G Q_h``
maps ``G -> (I + M) G (I + M)^T`` and ``z_n -> (I + M) z_n``. Training then costs nothing per token.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from analyses._mhla_data import DTYPE, random_mhla


class Summary(NamedTuple):
    """What an MHLA sees of a batch of sequences: ``gram`` ``(B, d, d)`` and ``last`` ``(B, d)``."""

    gram: Tensor
    last: Tensor

    @classmethod
    def of(cls, z: Tensor) -> Summary:
        return cls(z @ z.transpose(-1, -2), z[..., -1])

    def __getitem__(self, index):  # rows of both tensors; NamedTuple's own indexing is by field
        if isinstance(index, int):
            return tuple.__getitem__(self, index)
        return Summary(self.gram[index], self.last[index])


def mixing(layer, gram: Tensor) -> Tensor:
    """``sum_h V_h G Q_h`` ``(B, d, d)`` of an ``MHLA`` layer, as two matmuls over the stacked heads."""
    heads, d, _ = layer.values.shape
    values = layer.values.transpose(0, 1).reshape(d, heads * d)  # (d, H d): [V_1 .. V_H]
    queries = layer.queries.transpose(0, 1).reshape(d, heads * d)  # (d, H d): [Q_1 .. Q_H]
    right = (gram @ queries).unflatten(-1, (heads, d)).transpose(-3, -2).flatten(-3, -2)  # (B, H d, d)
    return values @ right


def apply_to_last(layer, gram: Tensor, last: Tensor) -> Tensor:
    """``sum_h V_h G (Q_h z_n)`` ``(B, d)`` without forming the ``d x d`` mixing matrix."""
    heads, d, _ = layer.values.shape
    keys = (last @ layer.queries.flatten(0, 1).t()).unflatten(-1, (heads, d))  # (B, H, d): Q_h z_n
    read = (keys @ gram).flatten(-2)  # (B, H d): (G Q_h z_n)^T, G symmetric
    return read @ layer.values.transpose(0, 1).reshape(d, heads * d).t()


class MHLAStack(nn.Module):
    """``layers`` MHLA layers of ``heads`` heads; hidden layers are residual, the last one's output is predicted.

    With one layer this is the paper's MHLA (Def. 2.1); more layers give the "multi-layer single-head" baseline.
    """

    def __init__(self, dim: int, heads: int, layers: int, generator: torch.Generator):
        super().__init__()
        self.layers = nn.ModuleList(random_mhla(dim, heads, generator) for _ in range(layers))

    def predict(self, seq: Summary) -> Tensor:
        gram, last = seq
        eye = torch.eye(gram.shape[-1], dtype=gram.dtype)
        for layer in self.layers[:-1]:
            step = eye + mixing(layer, gram)  # (B, d, d)
            gram = step @ gram @ step.transpose(-1, -2)
            last = (step @ last.unsqueeze(-1)).squeeze(-1)
        return apply_to_last(self.layers[-1], gram, last)  # (B, d)

    def coefficients(self) -> Tensor:
        """``W = sum_h vec(V_h) vec(Q_h)^T`` of a one-layer stack."""
        if len(self.layers) != 1:
            raise ValueError("function coefficients are defined for one MHLA layer only")
        return self.layers[0].coefficients()


class CoefficientModel(nn.Module):
    """Algorithm 1's linear model ``y_hat_a = <W, X_a>`` with ``W`` ``(d^2, d^2)`` learned by gradient steps."""

    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(dim * dim, dim * dim, dtype=DTYPE))

    def predict(self, seq: Summary) -> Tensor:
        d = seq.last.shape[-1]
        return torch.einsum("ajkl,bjk,bl->ba", self.w.reshape(d, d, d, d), seq.gram, seq.last)

    def coefficients(self) -> Tensor:
        return self.w.detach()


def normalised_mse(model: nn.Module, seq: Summary, y: Tensor, power: float) -> float:
    """``mean |y_hat - y|^2 / power`` (``power`` = mean squared training target) without gradients."""
    with torch.no_grad():
        return float((model.predict(seq) - y).pow(2).mean() / power)


def train_adamw(model: nn.Module, seq: Summary, y: Tensor, *, epochs: int, batch: int, lr: float,
                generator: torch.Generator) -> list[float]:
    """AdamW (no weight decay), cosine-decayed ``lr``, shuffled minibatches; train MSE after each epoch.

    The loss is the MSE divided by the mean squared target; entry 0 of the curve is the initial model.
    """
    count = y.shape[0]
    power = float(y.pow(2).mean())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    steps = epochs * math.ceil(count / batch)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / steps)))
    curve = [normalised_mse(model, seq, y, power)]
    for _ in range(epochs):
        order = torch.randperm(count, generator=generator)
        for start in range(0, count, batch):
            rows = order[start:start + batch]
            loss = (model.predict(seq[rows]) - y[rows]).pow(2).mean() / power
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        curve.append(normalised_mse(model, seq, y, power))
    return curve
