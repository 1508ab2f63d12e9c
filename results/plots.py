"""Plots of the LRA tables (matplotlib, PNG): accuracy per task and attention; accuracy vs wall time."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lra_base.atomic import save_figure  # noqa: E402
from results.curves import plot_curves_across_tags, plot_learning_curves  # noqa: E402
from results.escapes import ESCAPE_AT  # noqa: E402
from results.plot_style import attention_legend, attention_style, plain, scatter_attention  # noqa: E402
from results.plots_extra import scatter_by_task  # noqa: E402
from results.protocol import quick_scale, section_experiments  # noqa: E402
from results.summary import MAJORITY, is_reference, task_order  # noqa: E402

# characters of a name part kept as they are: with `lra_`, `_curves_by_tag.png` and the atomic writer's
# `.<name>.<random>.tmp`, a name stays under the 255 bytes a file system takes; every committed name is shorter
STEM_LIMIT = 160


def file_stem(name: object) -> str:
    """`name` (a tag, section or task from records) as one plain file-name part: characters other than letters,
    digits, `_`, `.` and `-` become `_` (so it never leaves the output folder). A part over `STEM_LIMIT` characters
    (a config-drift section of many settings) keeps a readable prefix and ends in `-` and 12 hex digits of the
    SHA-256 of `name`, so that two long names stay two files and no name is too long to write."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip(".")
    if len(stem) <= STEM_LIMIT:
        return stem
    digest = hashlib.sha256(str(name).encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{stem[:STEM_LIMIT - 13]}-{digest}"


def figure_name(name: object, kind: str) -> str:
    """The file name of the figure `kind` of a tag or task: ``lra_<file_stem(name)>_<kind>.png``."""
    return f"lra_{file_stem(name)}_{kind}.png"


def accuracy_figure(summary: pd.DataFrame) -> Figure:
    """Grouped bars: test accuracy (mean, std as error bar) per task, one bar per attention in its colour with its
    marker on top (`results.plot_style`); majority class dashed."""
    tasks = [t for t in task_order([]) if f"{t}_mean" in summary and summary[f"{t}_mean"].notna().any()]
    ours = summary[~is_reference(summary["attention"])]
    majority = summary[summary["attention"] == MAJORITY]
    width = 0.8 / max(1, len(ours))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(tasks) * max(1, len(ours)) ** 0.5 + 3), 4.5))
    x = np.arange(len(tasks))
    for i, (_, row) in enumerate(ours.iterrows()):
        means = [row[f"{t}_mean"] for t in tasks]
        stds = [0 if pd.isna(row[f"{t}_std"]) else row[f"{t}_std"] for t in tasks]
        where = x - 0.4 + (i + 0.5) * width
        colour, _ = attention_style(row["attention"])
        ax.bar(where, means, width, yerr=stds, capsize=2, color=colour, label=plain(row["attention"]))
        scatter_attention(ax, row["attention"], where, means, s=14, zorder=3, label=plain(row["attention"]))
    if not majority.empty:
        for j, t in enumerate(tasks):
            ax.hlines(majority.iloc[0][f"{t}_mean"], j - 0.45, j + 0.45, colors="k", linestyles="--", linewidth=1)
    ax.set_xticks(x, tasks)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("LRA test accuracy (dashed: majority class)")
    attention_legend(ax, list(ours["attention"]))
    fig.tight_layout()
    return fig


def plot_accuracy(summary: pd.DataFrame, path: Path) -> None:
    """`accuracy_figure` written to `path`."""
    fig = accuracy_figure(summary)
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def time_figure(long: pd.DataFrame) -> Figure:
    """Each completed run: test accuracy against wall time (log), one panel per task, each attention in its colour
    and marker."""
    runs = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    runs = runs[runs["wall_time_s"].notna() & (runs["wall_time_s"] > 0)]
    if runs.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.set(title="accuracy vs wall time: no completed run records a wall time")
        return fig
    return scatter_by_task(runs, "wall_time_s", "wall time per run (s, log)", "accuracy vs wall time")


def plot_accuracy_vs_time(long: pd.DataFrame, path: Path) -> None:
    """`time_figure` written to `path`."""
    fig = time_figure(long)
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def write_plots(summary: pd.DataFrame, long: pd.DataFrame, out: Path) -> list[Path]:
    """``lra_<tag>_accuracy.png``, ``lra_<tag>_time.png`` and, where runs kept their ``metrics.csv``,
    ``lra_<tag>_curves.png`` for every tag, and ``lra_<task>_curves_by_tag.png`` for a task whose runs (quick
    aside) span several tags (names by `figure_name`); returns the paths."""
    paths = []
    for tag in sorted(summary["tag"].unique()):
        accuracy, timing, curves = (out / figure_name(tag, kind) for kind in ("accuracy", "time", "curves"))
        plot_accuracy(summary[summary["tag"] == tag], accuracy)
        plot_accuracy_vs_time(long[long["tag"] == tag], timing)
        paths += [accuracy, timing]
        if plot_learning_curves(long[long["tag"] == tag], curves):
            paths.append(curves)
    full = {tag for tag in long["tag"].unique() if not quick_scale(tag, section_experiments(long, tag))}
    protocol_scale = long[long["tag"].isin(full)]
    for task in sorted(protocol_scale["task"].unique()):
        path = out / figure_name(task, "curves_by_tag")
        if plot_curves_across_tags(protocol_scale, task, path, ESCAPE_AT.get(task)):
            paths.append(path)
    return paths
