"""Shared matplotlib setup for analysis figures (headless, one PNG per analysis)."""

from __future__ import annotations

from pathlib import Path

from lra_base.atomic import save_figure


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str | Path) -> Path:
    """Save ``fig`` as PNG atomically (folders made), close it, return the path."""
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    fig.canvas.figure.clf()
    return Path(path)
