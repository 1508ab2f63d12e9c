"""Escapes from a plateau: the first validation at which a run's accuracy reaches its task's threshold.

On ListOps a Transformer either stays at the majority-class plateau (~17-20%) or leaves it for the
root-operator level (~35-37%, `results.rules`); which one happens varies with the seed, so a mean over seeds says
little without the count of runs that left. A run "escapes" at its first validation >= `ESCAPE_AT[task]`.
"""

from __future__ import annotations

import pandas as pd

from results.curves import readable_curve

ESCAPE_AT = {"listops": 0.30}  # validation accuracy (fraction) between the plateau and the root-operator level


def escape_step(curve: pd.DataFrame, threshold: float) -> int | None:
    """The first step whose validation accuracy is >= `threshold`, or None when there is none."""
    reached = curve[curve["val_acc"] >= threshold]
    return None if reached.empty else int(reached["step"].min())


def escape_steps(long: pd.DataFrame, statuses: tuple[str, ...] = ("completed",)) -> pd.DataFrame:
    """One row per run of a task with a threshold whose status is one of `statuses`: tag, attention, task, seed,
    path, escape_step (Int64, <NA> = never, or not yet for an unfinished run), last_step and best_val (its curve's
    last validation step and best accuracy); a run without a readable curve is left out."""
    columns = ["tag", "attention", "task", "seed", "path", "escape_step", "last_step", "best_val"]
    runs = long[long["status"].isin(statuses) & long["task"].isin(list(ESCAPE_AT))].drop_duplicates("path")
    rows = []
    for run in runs.itertuples():
        curve = readable_curve(run.path)
        if curve.empty:
            continue
        rows.append([run.tag, run.attention, run.task, run.seed, run.path, escape_step(curve, ESCAPE_AT[run.task]),
                     int(curve["step"].max()), float(curve["val_acc"].max())])
    frame = pd.DataFrame(rows, columns=columns)
    for column, dtype in (("escape_step", "Int64"), ("last_step", "int64"), ("best_val", "float64")):
        frame[column] = frame[column].astype(dtype)
    return frame


def add_escapes(summary: pd.DataFrame, long: pd.DataFrame) -> pd.DataFrame:
    """`<task>_escaped` (Int64): how many of the runs averaged in a cell (completed, with a test accuracy:
    `results.summary.summarize`) escaped, for the tasks of `ESCAPE_AT` that have runs. Blank where one of those runs
    has no readable curve (a count of the others would read as k of n), and on the reference rows."""
    averaged = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    steps = escape_steps(averaged)
    if steps.empty:
        return summary
    keys = ["tag", "attention", "task"]
    counts = steps.assign(escaped=steps["escape_step"].notna()).groupby(keys)["escaped"].sum()
    with_curve = steps.groupby(keys)["path"].nunique()
    runs = averaged.groupby(keys)["path"].nunique().reindex(with_curve.index)
    counts = counts.astype("Int64").where(with_curve == runs)
    extra = {}
    for task in sorted(steps["task"].unique()):
        cells = pd.MultiIndex.from_arrays([summary["tag"], summary["attention"], [task] * len(summary)])
        extra[f"{task}_escaped"] = pd.array(counts.reindex(cells).to_numpy(), dtype="Int64")
    return summary.assign(**extra)
