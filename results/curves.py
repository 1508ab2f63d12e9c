"""Learning curves of training runs: validation accuracy against step, from each run's ``metrics.csv``."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from lra.run.record import INTERRUPTED  # noqa: E402
from lra.run.run_files import metrics_path  # noqa: E402
from lra_base.atomic import save_figure  # noqa: E402
from results.collect import first_line  # noqa: E402
from results.plot_style import EDGE, attention_style, plain  # noqa: E402
from results.safe_read import CSV_LIMIT, UnsafeFile, read_limited  # noqa: E402

LINE_STYLES = ("-", "--", ":", "-.")  # seeds: the nth of an attention in a panel; across tags, seed number mod 4
RAN = ("completed", INTERRUPTED)  # statuses of runs with a curve (interrupted: unfinished so far)
UNFINISHED_ALPHA = 0.45  # an unfinished run's curve is drawn fainter, and its label says so


def drawn_runs(long: pd.DataFrame) -> pd.DataFrame:
    """The runs of `long` whose curves are drawn: completed and unfinished ones, one row per record."""
    return long[long["status"].isin(RAN)].drop_duplicates("path")


def run_line(run, name: str) -> tuple[str, float]:
    """The legend label (``<name> (seed <s>)``) and alpha of `run`'s curve: an unfinished run (status interrupted)
    fainter, and its label says so."""
    if getattr(run, "status", "completed") == "completed":
        return plain(f"{name} (seed {run.seed})"), 1.0
    return plain(f"{name} (seed {run.seed}, unfinished)"), UNFINISHED_ALPHA


def empty_curve() -> pd.DataFrame:
    return pd.DataFrame({"step": pd.Series(dtype="int64"), "val_acc": pd.Series(dtype="float64")})


def validation_curve(record_path: str | Path) -> pd.DataFrame:
    """``step`` and ``val_acc`` (fraction) of every validation a run logged; empty when there is no file.

    Raises ``ValueError`` naming the file for one that cannot be read as a curve: not a regular file below
    ``CSV_LIMIT``, not CSV, or a validation row whose step is not an integer or whose accuracy is not a number.
    """
    path = metrics_path(record_path)
    if path is None:
        return empty_curve()
    try:
        frame = pd.read_csv(io.StringIO(read_limited(path, CSV_LIMIT)))
    except (UnsafeFile, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise ValueError(f"{path}: {first_line(err)}") from None
    if "val/acc" not in frame or "step" not in frame:
        return empty_curve()
    rows = frame.dropna(subset=["val/acc"])
    step, acc = pd.to_numeric(rows["step"], errors="coerce"), pd.to_numeric(rows["val/acc"], errors="coerce")
    bad = rows[step.isna() | (step % 1 != 0) | (step.abs() >= 2**53) | acc.isna()]
    if not bad.empty:
        row = bad.iloc[0]
        raise ValueError(f"{path}: a validation row has step={row['step']!r}, val/acc={row['val/acc']!r} "
                         f"(an integer step and a number expected)")
    curve = pd.DataFrame({"step": step.astype("int64") + 1, "val_acc": acc.astype("float64")})
    return curve.drop_duplicates("step", keep="last").reset_index(drop=True)


def readable_curve(record_path: str | Path) -> pd.DataFrame:
    """``validation_curve``, or an empty one with a warning on stderr when the file is not a readable curve."""
    try:
        return validation_curve(record_path)
    except ValueError as err:
        print(f"warning: learning curve left out: {err}", file=sys.stderr)
        return empty_curve()


def curves_figure(curves: list[tuple[object, pd.DataFrame]]):
    """One panel per task: each run's validation accuracy (%) against step in its attention's colour and marker
    (`results.plot_style`), seeds of one attention told apart by the line style. `curves`: (run, curve) pairs, the
    run a row of the long table (`attention`, `seed`, `task`)."""
    tasks = sorted({run.task for run, _ in curves})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        shown = sorted([c for c in curves if c[0].task == task], key=lambda c: (str(c[0].attention), c[0].seed))
        seen: dict[str, int] = {}
        for run, curve in shown:
            colour, marker = attention_style(run.attention)
            nth = seen[str(run.attention)] = seen.get(str(run.attention), -1) + 1
            label, alpha = run_line(run, str(run.attention))
            ax.plot(curve["step"], 100 * curve["val_acc"], color=colour, marker=marker,
                    markevery=max(1, len(curve) // 8), markersize=4, markeredgecolor=EDGE, markeredgewidth=0.4,
                    linewidth=1.2, linestyle=LINE_STYLES[nth % len(LINE_STYLES)], alpha=alpha,
                    label=label)
        ax.set(title=plain(task), xlabel="training step", ylabel="validation accuracy (%)")
        ax.grid(True, alpha=0.3)
        if len(shown) > 6:  # many runs: the legend beside the panel, never over the curves
            ax.legend(fontsize=7, ncol=1 + (len(shown) - 1) // 16, bbox_to_anchor=(1.01, 1), loc="upper left")
        else:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_learning_curves(long: pd.DataFrame, path: Path) -> bool:
    """Validation accuracy (%) against step for every completed or unfinished run of `long` (`curves_figure`), one
    panel per task.

    Returns False (and writes nothing) when no run has a ``metrics.csv``.
    """
    curves = [(run, readable_curve(run.path)) for run in drawn_runs(long).itertuples()]
    curves = [(run, curve) for run, curve in curves if not curve.empty]
    if not curves:
        return False
    fig = curves_figure(curves)
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def across_tags_legend(curves: list[tuple[object, pd.DataFrame]]) -> list[Line2D]:
    """The figure's one legend: each attention's colour, each seed's line style, and the fainter unfinished runs."""
    attentions = sorted({str(run.attention) for run, _ in curves})
    seeds = sorted({int(run.seed) for run, _ in curves})
    handles = [Line2D([], [], color=attention_style(name)[0], label=plain(name)) for name in attentions]
    handles += [Line2D([], [], color="grey", linestyle=LINE_STYLES[seed % len(LINE_STYLES)], label=f"seed {seed}")
                for seed in seeds]
    if any(run.status != "completed" for run, _ in curves):
        handles.append(Line2D([], [], color="grey", alpha=UNFINISHED_ALPHA, label="unfinished"))
    return handles


def plot_curves_across_tags(long: pd.DataFrame, task: str, path: Path, threshold: float | None = None) -> bool:
    """Validation accuracy (%) against step of every completed or unfinished `task` run in `long`: one panel per tag
    (a study compares settings that are tags of their own), on shared axes, each attention in its colour
    (`results.plot_style`), seeds by line style, a dashed line at `threshold` (a fraction). Returns False (and
    writes nothing) when fewer than two tags have curves."""
    curves = [(run, readable_curve(run.path)) for run in drawn_runs(long[long["task"] == task]).itertuples()]
    curves = [(run, c) for run, c in curves if not c.empty]
    curves.sort(key=lambda rc: (rc[0].tag, rc[0].attention, rc[0].seed))
    tags = list(dict.fromkeys(run.tag for run, _ in curves))
    if len(tags) < 2:
        return False
    ncols = min(4, len(tags))
    nrows = -(-len(tags) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.3 * nrows), sharex=True, sharey=True,
                             squeeze=False)
    for ax, tag in zip(axes.flat, tags):
        for run, curve in ((run, c) for run, c in curves if run.tag == tag):
            label, alpha = run_line(run, str(run.attention))
            ax.plot(curve["step"], 100 * curve["val_acc"], color=attention_style(run.attention)[0],
                    linestyle=LINE_STYLES[int(run.seed) % len(LINE_STYLES)], linewidth=1.2, alpha=alpha, label=label)
        if threshold is not None:
            ax.axhline(100 * threshold, color="k", linestyle="--", linewidth=0.7)
        ax.set_title(plain(textwrap.fill(str(tag), 42)), fontsize=8)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(tags):]:
        ax.set_visible(False)
    for column in range(ncols):  # the lowest panel of each column carries the step axis
        lowest = axes[(len(tags) - 1 - column) // ncols, column]
        lowest.xaxis.set_tick_params(labelbottom=True)
        lowest.set_xlabel("training step")
    for ax in axes[:, 0]:
        ax.set_ylabel("validation accuracy (%)")
    escape = "" if threshold is None else f"; dashed: escape at {100 * threshold:.0f}%"
    fig.suptitle(plain(f"{task}: validation accuracy of every run, one panel per tag{escape}"), fontsize=10)
    handles = across_tags_legend(curves)
    fig.legend(handles=handles, loc="lower center", ncol=min(12, len(handles)), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True
