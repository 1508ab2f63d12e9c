"""Approximation mode: how well each mechanism's matrix approximates the softmax matrix of the SAME q, k.

The question of LLoPS (Qin et al., arXiv 2610.14219): at an equal feature count m, do polynomial sketches
(PolySketchFormer, arXiv 2310.01655, random; LLoPS, learned) approximate softmax-like attention better than
random features (Performer FAVOR+, arXiv 2009.14794; SLAY)? Nystromformer (arXiv 2102.03902, m landmarks),
BASED (arXiv 2402.18668, 1 + r + r^2 Taylor features) and Hedgehog (arXiv 2402.04347, 2f features) are
measured beside them. Mechanisms with learned maps are also fitted to the softmax matrices of ``fit``
sequences (relative Frobenius error, Adam) and, like the others, measured on held-out sequences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch
from torch import Tensor, nn

import attention_zoo

from ._microscope_capture import implicit_matrix, softmax_matrix
from ._microscope_metrics import relative_frobenius


def _based_r(m: int) -> int:
    return max(1, max(r for r in range(1, m + 1) if 1 + r + r * r <= m) if m >= 3 else 1)


def _slay_split(m: int) -> dict[str, int]:
    nodes = 2 if m >= 32 else 1
    poly = 4 if m >= 4 * nodes else 1
    return {"num_quadrature_nodes": nodes, "num_poly_features": poly, "num_prf_features": max(1, m // (nodes * poly))}


# options giving about m features per head, and the count they give
SIZED: dict[str, Callable[[int], tuple[dict, int]]] = {
    "performer": lambda m: ({"features": m, "redraw_interval": 0, "seed": 0}, m),
    "polysketch": lambda m: ({"sketch_size": math.isqrt(m), "seed": 0}, math.isqrt(m) ** 2),
    "llops": lambda m: ({"features": m}, m),
    "nystrom": lambda m: ({"num_landmarks": m, "conv_kernel_size": 0}, m),
    "based": lambda m: ({"feature_dim": _based_r(m)}, 1 + _based_r(m) + _based_r(m) ** 2),
    "hedgehog": lambda m: ({"feature_dim": max(1, m // 2)}, 2 * max(1, m // 2)),
    "slay": lambda m: (_slay_split(m), math.prod(_slay_split(m).values())),
}
FIXED_SIZE = ("linear",)  # no size option: phi = elu + 1 has d features
DEFAULT_APPROXIMATORS = ("performer", "slay", "polysketch", "llops", "nystrom", "based", "hedgehog", "linear")


def approximator(name: str, m: int, head_dim: int, num_heads: int) -> tuple[nn.Module, int]:
    """The mechanism ``name`` sized to about ``m`` features per head, and its actual feature count."""
    if name in FIXED_SIZE:
        return attention_zoo.build(name, head_dim=head_dim, num_heads=num_heads), head_dim
    if name not in SIZED:
        raise ValueError(f"no matched-size rule for {name!r}; approximators: {', '.join([*SIZED, *FIXED_SIZE])}")
    options, count = SIZED[name](m)
    return attention_zoo.build(name, head_dim=head_dim, num_heads=num_heads, **options), count


def fit(module: nn.Module, pairs: list[tuple[Tensor, Tensor, Tensor]], steps: int, lr: float) -> float:
    """Adam on ``mean ||A - S||_F^2 / ||S||_F^2`` over ``pairs`` of (q, k, softmax matrix); returns the last loss."""
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        optimizer.zero_grad()
        loss = sum(relative_frobenius(implicit_matrix(module, q, k), s).square().mean() for q, k, s in pairs)
        loss = loss / len(pairs)
        loss.backward()
        optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def errors(module: nn.Module, pairs: list[tuple[Tensor, Tensor, Tensor]]) -> list[float]:
    """Relative Frobenius error of ``module``'s matrix to the softmax matrix, per (sequence, head)."""
    return [float(e) for q, k, s in pairs for e in relative_frobenius(implicit_matrix(module, q, k), s)[0]]


def approximation_rows(layers: list[list[tuple[Tensor, Tensor]]], names: list[str], sizes: list[int], *,
                       fit_sequences: int, steps: int, lr: float, log=print) -> list[dict]:
    """One row per (mechanism, variant, size, layer): the held-out error to the softmax matrix.

    ``size`` is the m asked for, ``features`` the count the mechanism's nearest shape gives (BASED: 1 + r + r^2).

    ``layers[l]`` holds the unpadded ``(1, H, L, d)`` q, k of each captured sequence of layer ``l``;
    the first ``fit_sequences`` fit the learned maps, the others are held out for every mechanism.
    """
    rows = []
    for layer, sequences in enumerate(layers):
        with torch.no_grad():
            pairs = [(q.float(), k.float(), softmax_matrix(q, k)) for q, k in sequences]
        fit_pairs, held_out = pairs[:fit_sequences], pairs[fit_sequences:]
        _, num_heads, _, head_dim = pairs[0][0].shape
        for name in names:
            for m in ([head_dim] if name in FIXED_SIZE else sizes):
                torch.manual_seed(0)
                module, count = approximator(name, m, head_dim, num_heads)
                learnable = any(p.requires_grad for p in module.parameters())
                variants = ["no fit", "fitted"] if learnable else ["no fit"]
                for variant in variants:
                    final = fit(module, fit_pairs, steps, lr) if variant == "fitted" else None
                    errs = errors(module, held_out)
                    rows.append({"mode": "approx", "mechanism": name, "variant": variant, "size": m, "features": count,
                                 "layer": layer, "rel_error": statistics.fmean(errs),
                                 "rel_error_std": statistics.pstdev(errs), "fit_loss": final,
                                 "sequences": len(held_out)})
                    log(f"approx layer {layer} {name} m={count} {variant}: rel_error {rows[-1]['rel_error']:.4f}")
    return rows
