"""Figures for the leaderboard page: accuracy against throughput, against sequence length, one run's curve."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from results.curves import plot_learning_curves  # noqa: E402
from results.protocol import compose_protocol  # noqa: E402
from results.summary import is_reference, task_order  # noqa: E402

MARKERS = "osD^vP*X"


def plot_accuracy_vs_throughput(long: pd.DataFrame, path: Path) -> bool:
    """Each completed run with a throughput: test accuracy (%) against training tokens/s (log), one colour per
    attention, one marker per task. Returns False (and writes nothing) when no run has both numbers."""
    runs = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    runs = runs[runs["tokens_per_s"].notna() & (runs["tokens_per_s"] > 0)]
    if runs.empty:
        return False
    markers = dict(zip(task_order(runs["task"].unique()), MARKERS * 2))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {}
    for attention, part in runs.groupby("attention"):
        for task, sub in part.groupby("task"):
            points = ax.scatter(sub["tokens_per_s"], 100 * sub["value"], marker=markers.get(task, "o"),
                                color=colors.get(attention), alpha=0.8)
            colors.setdefault(attention, points.get_facecolor()[0])
    ax.set_xscale("log")
    ax.set(xlabel="training tokens/s per run (log)", ylabel="test accuracy (%)", title="accuracy vs throughput")
    present = set(runs["task"])
    key_legend(ax, colors, {task: marker for task, marker in markers.items() if task in present}, "task")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True


def key_legend(ax, colors: dict[str, object], markers: dict[str, str], what: str) -> None:
    """One legend right of the axes: a colour per attention, then a grey marker per task or tag (`what`)."""
    handles = [plt.Line2D([], [], marker="o", color=color, linestyle="", label=name) for name, color in colors.items()]
    handles += [plt.Line2D([], [], marker=marker, color="0.4", linestyle="", label=f"{what}: {name}")
                for name, marker in markers.items()]
    ax.legend(handles=handles, fontsize=7, ncol=1 + len(handles) // 16, bbox_to_anchor=(1.01, 1), loc="upper left")


def recorded_length(config: object) -> float | None:
    """``task.max_len`` of a run's recorded config, when it is a positive number."""
    task = config.get("task") if isinstance(config, dict) else None
    value = task.get("max_len") if isinstance(task, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def sequence_lengths(long: pd.DataFrame, configs: dict[str, object]) -> dict[tuple[str, str], float]:
    """(tag, task) -> the task's sequence length (``task.max_len``) under that tag's protocol.

    The most common value among the completed runs' recorded configs (``configs``: record path -> config);
    for a (tag, task) whose runs record none, the config composed from ``conf/`` for the tag, when it has one.
    """
    runs = long[long["status"] == "completed"].drop_duplicates("path")
    lengths = {}
    for (tag, task), part in runs.groupby(["tag", "task"], sort=True):
        found = pd.Series([recorded_length(configs.get(path)) for path in part["path"]], dtype="float64").dropna()
        if found.empty:
            found = pd.Series([recorded_length(compose_protocol(str(tag), str(task)))], dtype="float64").dropna()
        if not found.empty:
            lengths[(str(tag), str(task))] = float(found.mode().iloc[0])
    return lengths


def plot_accuracy_vs_length(summary: pd.DataFrame, lengths: dict[tuple[str, str], float], path: Path) -> bool:
    """Per task, mean test accuracy (%, the summary's ``<task>_mean``) against the sequence length of each tag's
    protocol, one line per attention joining its tags (quick -> full protocol); one marker per tag.

    Drawn only for tasks whose runs come at two or more lengths; returns False (and writes nothing) otherwise.
    """
    ours = summary[~is_reference(summary["attention"])]
    tasks = [task for task in task_order({task for _, task in lengths})
             if len({length for (_, t), length in lengths.items() if t == task}) > 1]
    if not tasks:
        return False
    tags = sorted({tag for tag, _ in lengths})
    markers = dict(zip(tags, MARKERS * 2))
    fig, axes = plt.subplots(1, len(tasks), figsize=(7.5 * len(tasks), 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        colors = {}
        for attention, part in ours.groupby("attention"):
            points = [(lengths[(tag, task)], mean, tag) for tag, mean in zip(part["tag"], part[f"{task}_mean"])
                      if (tag, task) in lengths and pd.notna(mean)]
            if not points:
                continue
            points.sort()
            line, = ax.plot([p[0] for p in points], [p[1] for p in points], linewidth=1, alpha=0.7)
            colors[attention] = line.get_color()
            for length, mean, tag in points:
                ax.scatter([length], [mean], marker=markers.get(tag, "o"), color=line.get_color(), zorder=3)
        ax.set_xscale("log")
        ax.set(title=task, xlabel="sequence length (task.max_len, log)", ylabel="mean test accuracy (%)")
        ax.grid(True, which="both", alpha=0.3)
        key_legend(ax, colors, markers, "tag")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return True


def plot_run_curve(long: pd.DataFrame, record_path: str, path: Path) -> bool:
    """One run's validation accuracy against step (``results.curves``); False when it kept no ``metrics.csv``."""
    return plot_learning_curves(long[long["path"] == record_path], path)
