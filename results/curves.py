"""Learning curves of training runs: validation accuracy against step, from each run's ``metrics.csv``."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

METRICS_NAMES = ("csv/metrics.csv", "metrics.csv")  # a run folder (Lightning's CSVLogger), an archived run


def metrics_path(record_path: str | Path) -> Path | None:
    """The ``metrics.csv`` beside a ``result.json``, or None."""
    folder = Path(record_path).parent
    return next((folder / name for name in METRICS_NAMES if (folder / name).is_file()), None)


def validation_curve(record_path: str | Path) -> pd.DataFrame:
    """``step`` and ``val_acc`` (fraction) of every validation a run logged; empty when there is no file."""
    path = metrics_path(record_path)
    if path is None:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "val_acc": pd.Series(dtype="float64")})
    frame = pd.read_csv(path)
    if "val/acc" not in frame or "step" not in frame:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "val_acc": pd.Series(dtype="float64")})
    rows = frame.dropna(subset=["val/acc"])
    curve = pd.DataFrame({"step": rows["step"].astype("int64") + 1, "val_acc": rows["val/acc"].astype("float64")})
    return curve.drop_duplicates("step", keep="last").reset_index(drop=True)


def plot_learning_curves(long: pd.DataFrame, path: Path) -> bool:
    """Validation accuracy (%) against step for every completed run of one tag, one panel per task.

    Returns False (and writes nothing) when no run has a ``metrics.csv``.
    """
    runs = long[(long["status"] == "completed")].drop_duplicates("path")
    curves = [(run, validation_curve(run.path)) for run in runs.itertuples()]
    curves = [(run, curve) for run, curve in curves if not curve.empty]
    if not curves:
        return False
    tasks = sorted({run.task for run, _ in curves})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for run, curve in sorted([c for c in curves if c[0].task == task], key=lambda c: (c[0].attention, c[0].seed)):
            ax.plot(curve["step"], 100 * curve["val_acc"], label=f"{run.attention} (seed {run.seed})", linewidth=1.2)
        ax.set(title=task, xlabel="training step", ylabel="validation accuracy (%)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
