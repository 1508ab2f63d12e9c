"""Plots of the LRA tables (matplotlib, PNG): accuracy per task and attention; accuracy vs wall time."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from results.curves import plot_learning_curves  # noqa: E402
from results.summary import MAJORITY, is_reference, task_order  # noqa: E402


def plot_accuracy(summary: pd.DataFrame, path: Path) -> None:
    """Grouped bars: test accuracy (mean, std as error bar) per task, one bar per attention; majority dashed."""
    tasks = [t for t in task_order([]) if f"{t}_mean" in summary and summary[f"{t}_mean"].notna().any()]
    ours = summary[~is_reference(summary["attention"])]
    majority = summary[summary["attention"] == MAJORITY]
    width = 0.8 / max(1, len(ours))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(tasks) * max(1, len(ours)) ** 0.5 + 3), 4.5))
    x = np.arange(len(tasks))
    for i, (_, row) in enumerate(ours.iterrows()):
        means = [row[f"{t}_mean"] for t in tasks]
        stds = [0 if pd.isna(row[f"{t}_std"]) else row[f"{t}_std"] for t in tasks]
        ax.bar(x - 0.4 + (i + 0.5) * width, means, width, yerr=stds, capsize=2, label=row["attention"])
    if not majority.empty:
        for j, t in enumerate(tasks):
            ax.hlines(majority.iloc[0][f"{t}_mean"], j - 0.45, j + 0.45, colors="k", linestyles="--", linewidth=1)
    ax.set_xticks(x, tasks)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("LRA test accuracy (dashed: majority class)")
    ax.legend(fontsize=7, ncol=2 if len(ours) > 8 else 1, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_accuracy_vs_time(long: pd.DataFrame, path: Path) -> None:
    """Each completed run: test accuracy against wall time (log), one colour per attention, marker per task."""
    runs = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    markers = dict(zip(task_order(runs["task"].unique()), "osD^vP*X"))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for attention, part in runs.groupby("attention"):
        color = None
        for task, sub in part.groupby("task"):
            points = ax.scatter(sub["wall_time_s"], 100 * sub["value"], marker=markers.get(task, "o"), color=color,
                                label=attention if color is None else None, alpha=0.8)
            color = points.get_facecolor()[0]
    ax.set_xscale("log")
    ax.set(xlabel="wall time per run (s)", ylabel="test accuracy (%)",
           title="accuracy vs wall time (" + ", ".join(f"{m} {t}" for t, m in markers.items()
                                                     if t in set(runs["task"])) + ")")
    ax.legend(fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_plots(summary: pd.DataFrame, long: pd.DataFrame, out: Path) -> list[Path]:
    """``lra_<tag>_accuracy.png``, ``lra_<tag>_time.png`` and, where runs kept their ``metrics.csv``,
    ``lra_<tag>_curves.png`` for every tag; returns the paths."""
    paths = []
    for tag in sorted(summary["tag"].unique()):
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(tag)).strip(".")  # a record's tag never leaves --out
        accuracy, timing, curves = (out / f"lra_{stem}_{kind}.png" for kind in ("accuracy", "time", "curves"))
        plot_accuracy(summary[summary["tag"] == tag], accuracy)
        plot_accuracy_vs_time(long[long["tag"] == tag], timing)
        paths += [accuracy, timing]
        if plot_learning_curves(long[long["tag"] == tag], curves):
            paths.append(curves)
    return paths
