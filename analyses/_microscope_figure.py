"""The microscope's figures: heatmaps of mechanism vs softmax matrices, and approximation error vs size."""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from .plotting import pyplot, save


def trained_figure(drawn: dict[str, dict[int, tuple[Tensor, Tensor]]], path: Path, heads: int = 2) -> Path:
    """One row per attention: for the first and last layer and up to ``heads`` heads, its matrix beside softmax's.

    ``drawn[attention][layer] = (matrix, softmax)`` ``(H, L, L)`` of one validation sequence; colours run from 0
    to the larger 99th percentile of |weights| of the two panels of a pair, so both are on one scale.
    """
    plt = pyplot()
    panels = []
    for attention, layers in drawn.items():
        chosen = sorted({min(layers), max(layers)})
        row = []
        for layer in chosen:
            matrix, softmax = layers[layer]
            for head in range(min(heads, matrix.shape[0])):
                pair = matrix[head].abs().float(), softmax[head].abs().float()
                top = max(float(w.flatten().quantile(0.99)) for w in pair) or 1.0
                row.append((f"{attention} L{layer} h{head}", pair[0], top))
                row.append((f"softmax, same q,k L{layer} h{head}", pair[1], top))
        panels.append(row)
    cols = max(len(r) for r in panels)
    fig, axes = plt.subplots(len(panels), cols, figsize=(2.1 * cols, 2.2 * len(panels)), squeeze=False)
    for r, row in enumerate(panels):
        for c in range(cols):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(row):
                ax.axis("off")
                continue
            title, weights, top = row[c]
            ax.imshow(weights.numpy(), cmap="magma", vmin=0.0, vmax=top, interpolation="nearest")
            ax.set_title(title, fontsize=6)
    fig.suptitle(f"|attention weights| on one ListOps validation sequence ({drawn_length(drawn)} "
                 "tokens): mechanism vs softmax of the same q, k", fontsize=8)
    return save(fig, path)


def drawn_length(drawn: dict) -> int:
    first = next(iter(drawn.values()))
    return int(next(iter(first.values()))[0].shape[-1])


def approx_figure(rows: list[dict], path: Path) -> Path:
    """Held-out relative error to the softmax matrix against feature count, one line per mechanism and variant."""
    plt = pyplot()
    layers = sorted({r["layer"] for r in rows})
    fig, axes = plt.subplots(1, len(layers), figsize=(4.2 * len(layers), 3.4), squeeze=False)
    for ax, layer in zip(axes[0], layers):
        lines: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r["layer"] == layer:
                label = r["mechanism"] + (" (fitted)" if r["variant"] == "fitted" else "")
                lines.setdefault(label, []).append((r["features"], r["rel_error"]))
        mechanisms = sorted({label.split(" ")[0] for label in lines})
        colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(mechanisms)}
        for label, points in sorted(lines.items()):
            points.sort()
            style = "-" if "(fitted)" in label else "--"
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", markersize=3, label=label,
                    color=colours[label.split(" ")[0]])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("features per head m")
        ax.set_ylabel("||A - softmax||_F / ||softmax||_F")
        ax.set_title(f"softmax model, layer {layer}", fontsize=9)
    axes[0][-1].legend(fontsize=6, loc="best")
    return save(fig, path)
