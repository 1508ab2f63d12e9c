"""Figures for the leaderboard page: accuracy against throughput, against sequence length, one run's curve."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

from lra_base.atomic import save_figure  # noqa: E402
from results.curves import plot_learning_curves  # noqa: E402
from results.plot_style import attention_legend, plain, scatter_attention  # noqa: E402
from results.protocol import compose_protocol  # noqa: E402
from results.summary import is_reference, task_order  # noqa: E402

SPREAD = 0.015  # octaves between neighbouring attentions' points at one length in the length plot


def save(fig: Figure, path: Path, dpi: int = 100) -> None:
    """Write a figure as PNG (trimmed to its contents, legends included) and close it."""
    save_figure(fig, path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)


def scatter_by_task(runs: pd.DataFrame, x: str, xlabel: str, title: str) -> Figure:
    """One panel per task (protocol order): each run's test accuracy (%) against its column `x` (log axis), in its
    attention's colour and marker (`results.plot_style`), with a legend of the attentions it shows."""
    present = set(runs["task"])
    tasks = [task for task in task_order(present) if task in present]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks) + 1.5, 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        part = runs[runs["task"] == task]
        names = sorted(part["attention"].unique(), key=str)
        for name in names:
            sub = part[part["attention"] == name]
            scatter_attention(ax, name, sub[x], 100 * sub["value"], s=36, alpha=0.9, label=plain(name))
        ax.set_xscale("log")
        ax.set(title=plain(f"{title}: {task}"), xlabel=xlabel, ylabel="test accuracy (%)")
        ax.grid(True, which="both", alpha=0.3)
        attention_legend(ax, names)
    fig.tight_layout()
    return fig


def throughput_figure(long: pd.DataFrame) -> Figure | None:
    """Each completed run with a throughput: test accuracy (%) against training tokens/s (log), one panel per task;
    None when no run has both numbers."""
    runs = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    runs = runs[runs["tokens_per_s"].notna() & (runs["tokens_per_s"] > 0)]
    if runs.empty:
        return None
    return scatter_by_task(runs, "tokens_per_s", "training tokens/s per run (log)", "accuracy vs throughput")


def plot_accuracy_vs_throughput(long: pd.DataFrame, path: Path) -> bool:
    """`throughput_figure` written to `path`; False (and nothing written) when there is none."""
    fig = throughput_figure(long)
    if fig is None:
        return False
    save(fig, path)
    return True


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


def length_ticks(ax, task: str, lengths: dict[tuple[str, str], float]) -> None:
    """x ticks at each sequence length of `task`, labelled with the length and the tags run at it."""
    tags_at: dict[float, list[str]] = {}
    for (tag, t), length in sorted(lengths.items()):
        if t == task:
            tags_at.setdefault(length, []).append(textwrap.shorten(plain(tag), 30, placeholder="…"))
    ax.set_xticks(sorted(tags_at), [f"{length:g}\n" + "\n".join(tags_at[length]) for length in sorted(tags_at)],
                  fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())


def length_figure(summary: pd.DataFrame, lengths: dict[tuple[str, str], float]) -> Figure | None:
    """Per task, mean test accuracy (%, the summary's ``<task>_mean``) against the sequence length of each tag's
    protocol: one point per (attention, tag) in the attention's colour and marker, never a line (tags are protocols
    of their own: a quick and a full-protocol run differ in more than the length); the x ticks name the tags, and
    the attentions stand side by side around each length (in name order, within ±SPREAD·n/2 octaves).

    Only tasks whose runs come at two or more lengths; None when there is none.
    """
    ours = summary[~is_reference(summary["attention"])]
    tasks = [task for task in task_order({task for _, task in lengths})
             if len({length for (_, t), length in lengths.items() if t == task}) > 1]
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks) + 1.5, 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        points = {attention: [(lengths[(tag, task)], mean) for tag, mean in zip(part["tag"], part[f"{task}_mean"])
                              if (tag, task) in lengths and pd.notna(mean)]
                  for attention, part in ours.groupby("attention", sort=True)}
        shown = [attention for attention, found in points.items() if found]
        for rank, attention in enumerate(shown):
            spread = 2 ** (SPREAD * (rank - (len(shown) - 1) / 2))  # side by side around the length, not on top
            for length, mean in points[attention]:  # one series per (attention, tag): nothing joins two protocols
                scatter_attention(ax, attention, [length * spread], [mean], s=36, alpha=0.9, zorder=3,
                                  label=plain(attention))
        ax.set_xscale("log")
        length_ticks(ax, task, lengths)
        ax.set(title=plain(task), xlabel="sequence length (task.max_len, log) and tag", ylabel="mean test accuracy (%)")
        ax.grid(True, which="both", alpha=0.3)
        attention_legend(ax, shown)
    fig.tight_layout()
    return fig


def plot_accuracy_vs_length(summary: pd.DataFrame, lengths: dict[tuple[str, str], float], path: Path) -> bool:
    """`length_figure` written to `path`; False (and nothing written) when no task has two lengths."""
    fig = length_figure(summary, lengths)
    if fig is None:
        return False
    save(fig, path)
    return True


def plot_run_curve(long: pd.DataFrame, record_path: str, path: Path) -> bool:
    """One run's validation accuracy against step (``results.curves``); False when it kept no ``metrics.csv``."""
    return plot_learning_curves(long[long["path"] == record_path], path)
