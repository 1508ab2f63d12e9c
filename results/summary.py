"""Pivot the long table into attention x task summaries, and load published reference tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from results.collect import CLASSIC_TASKS, TASKS
from results.data_sections import is_data_part
from results.protocol import SECTION_SEP, base_tag, only_yours

REFERENCE_DIR = Path(__file__).parent / "reference"
MAJORITY = "(majority class)"
# rows below our attentions that no model earns, and their label in the tables: the test set's majority class
# (every run records it) and the rules of `results.rules` (row "(<rule>)")
REFERENCE_ROWS = {MAJORITY: "majority class", "(root-operator rule)": "root-operator rule"}
AVERAGE = "average"
STATS = ("mean", "std", "n")
REFERENCES = {  # file stem -> column label
    "lra_llops_table": "LLoPS paper", "lra_paper": "LRA paper", "nystromformer_port": "Nystromformer port",
    "skyformer_port": "Skyformer port", "xformers_port": "xFormers port",
}
# file stem -> the tag (or tags) of our runs that follow that table's protocol (a delta is printed only for those);
# None: a protocol of its own (shown beside the full-protocol runs for context, never subtracted)
PROTOCOLS = {
    # study_port: the port's four settings that run on a CPU (conf/experiment/study_port.yaml); `default` differs
    # from the port in lr, embedding init, attention dropout, schedule and pooling (docs/protocol.md section 9)
    # nystromformer_code: the port's own code on our data (analyses.nystromformer_code)
    "lra_llops_table": None, "lra_paper": "lra_original", "nystromformer_port": ("study_port", "nystromformer_code"),
    "skyformer_port": "skyformer_port",  # 50,000 steps, 3 seeds: conf/experiment/skyformer_port
    "xformers_port": None,  # xFormers: pre-norm GELU, 10k ListOps steps
}
# tag of runs made by a peer's own code -> the tag whose section names them too (they keep a section of their own)
PEER_CODE_BESIDE = {"nystromformer_code": "study_port"}
# tables with a protocol of their own that are also shown beside `default`, for context, without a delta
CONTEXT_BESIDE_DEFAULT = ("nystromformer_port", "skyformer_port")
DEFAULT_REFERENCES = ("nystromformer_port", "skyformer_port", "lra_llops_table")
FULL_PROTOCOL_TAG = "default"
DISPLAY_DECIMALS = 2


def task_order(tasks) -> list[str]:
    """The six LRA tasks in protocol order, then any other task names found, sorted."""
    return list(TASKS) + sorted(set(tasks) - set(TASKS))


def cell_stats(values: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean, sample std (ddof=1; NaN when n == 1) and n of `value` per `keys`."""
    grouped = values.groupby(keys, sort=True)["value"]
    return grouped.agg(mean="mean", std=lambda s: s.std(ddof=1), n="count").reset_index()


def is_reference(attention: pd.Series) -> pd.Series:
    """True on the reference rows (`REFERENCE_ROWS`), False on our attentions."""
    return attention.isin(list(REFERENCE_ROWS))


def rules_of_sections(rules: pd.DataFrame, ran: set[tuple[str, str]]) -> pd.DataFrame:
    """The rule rows of each (section, task) in ``ran``: the section's own rule, else, for a drift section whose
    differing settings leave the data alone (none is ``task.data.*``), its base tag's, fitted on the same data."""
    own = {(tag, task): row for tag, task, row in zip(rules["tag"], rules["task"], rules.to_dict("records"))}
    rows = []
    for tag, task in sorted(ran):
        parts = [part.lstrip() for part in tag.replace(SECTION_SEP, ",").split(",")]
        same_data = not any(part.startswith(("task.data.", "experiment=")) or is_data_part(part) for part in parts)
        row = own.get((tag, task)) or (own.get((base_tag(tag), task)) if same_data else None)
        if row is not None:
            rows.append({**row, "tag": tag})
    return pd.DataFrame(rows, columns=rules.columns)


def summarize(long: pd.DataFrame, rules: pd.DataFrame | None = None) -> pd.DataFrame:
    """Wide summary, one row per (tag, attention): `<task>_mean`, `<task>_std`, `<task>_n` in percent.

    Only completed runs count; each cell is test accuracy over seeds. Every LRA task has its three
    columns (NaN/blank when no run), so the csv layout is stable. `average_mean` is the mean of the
    five classic task means, only when all five are present; `average_n` is their smallest n and
    `average_std` is left blank. A `(majority class)` row per tag holds the mean majority-class accuracy, and
    `rules` (`results.rules.read_rules`: tag, task, rule, value) a `(<rule>)` row per tag that has runs of its task.
    """
    done = long[long["status"] == "completed"].assign(value=lambda d: d["value"] * 100.0)
    ours = cell_stats(done[done["metric"] == "test_acc"], ["tag", "attention", "task"])
    majority = cell_stats(done[done["metric"] == "majority_acc"], ["tag", "task"]).assign(attention=MAJORITY)
    cells = [ours, majority]
    if rules is not None and not rules.empty:
        mine = rules_of_sections(rules, set(zip(done["tag"], done["task"])))
        mine = mine.assign(value=mine["value"] * 100.0, attention="(" + mine["rule"] + ")")
        cells.append(cell_stats(mine, ["tag", "attention", "task"]))
    cells = pd.concat([c for c in cells if not c.empty] or [ours], ignore_index=True)
    tasks = task_order(long["task"].unique())
    columns = [f"{task}_{stat}" for task in tasks for stat in STATS]
    if cells.empty:
        wide = pd.DataFrame(columns=["tag", "attention", *columns])
    else:
        wide = cells.pivot(index=["tag", "attention"], columns="task", values=list(STATS))
        wide.columns = [f"{task}_{stat}" for stat, task in wide.columns]
        wide = wide.reindex(columns=columns).reset_index()
    for task in tasks:
        wide[f"{task}_mean"] = wide[f"{task}_mean"].astype("float64")
        wide[f"{task}_std"] = wide[f"{task}_std"].astype("float64")
        wide[f"{task}_n"] = wide[f"{task}_n"].astype("Int64")
    classic_means = wide[[f"{task}_mean" for task in CLASSIC_TASKS]]
    complete = classic_means.notna().all(axis=1)
    wide["average_mean"] = classic_means.mean(axis=1).where(complete)
    wide["average_std"] = np.nan
    classic_n = wide[[f"{task}_n" for task in CLASSIC_TASKS]]
    wide["average_n"] = classic_n.min(axis=1).where(complete).astype("Int64")
    wide = wide.assign(_last=is_reference(wide["attention"])).sort_values(["tag", "_last", "attention"], kind="stable")
    return wide.drop(columns="_last").reset_index(drop=True)


def load_reference(name: str = "lra_llops_table", index: str | None = "method") -> pd.DataFrame:
    """Published table `results/reference/<name>.csv` (indexed by `index` unless None), values as printed.

    The csv's first `#` line (its source) is kept in `frame.attrs["source"]`, further `#` lines (what differs from
    the tag that follows it) in `frame.attrs["notes"]`, the tag whose runs follow
    its protocol in `frame.attrs["protocol"]` (`PROTOCOLS`).
    """
    path = REFERENCE_DIR / f"{name}.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    comments = [line.lstrip("# ").strip() for line in lines if line.startswith("#")]
    frame = pd.read_csv(path, comment="#")
    frame = frame.set_index(index) if index else frame
    frame.attrs["source"] = comments[0] if comments else ""
    frame.attrs["notes"] = " ".join(comments[1:])  # how its protocol differs from the tag that follows it
    frame.attrs["protocol"] = PROTOCOLS.get(name)
    frame.attrs["beside_default"] = PROTOCOLS.get(name) is None or name in CONTEXT_BESIDE_DEFAULT
    return frame


def follows(tag: str, frame: pd.DataFrame) -> bool:
    """Whether runs of `tag` follow the protocol of the published table `frame` (so ours − published means
    something)."""
    protocol = frame.attrs.get("protocol")
    tags = protocol if isinstance(protocol, tuple) else (protocol,)
    return base_tag(tag) in tags and only_yours(tag)


def shown_beside(tag: str, frame: pd.DataFrame) -> bool:
    """Whether the published table `frame` is shown in `tag`'s section: its own protocol's runs, and the
    full-protocol runs for tables of a protocol of their own or in `CONTEXT_BESIDE_DEFAULT` (then without a delta)."""
    beside_default = frame.attrs.get("beside_default", frame.attrs.get("protocol") is None)
    full = base_tag(tag) == FULL_PROTOCOL_TAG and only_yours(tag)
    return follows(tag, frame) or (full and bool(beside_default))


def best_flags(summary: pd.DataFrame) -> pd.DataFrame:
    """True where a `<task>_mean` is its tag's highest among our attentions at the shown 2 decimals (ties: all),
    and above every reference row of that tag and column (the majority class, the rules): a best that no more than
    matches always answering the majority label is no best.

    The reference rows are never best. Columns: the summary's `*_mean` columns; index: the summary's.
    """
    means = summary[[column for column in summary.columns if column.endswith("_mean")]].round(DISPLAY_DECIMALS)
    ours = ~is_reference(summary["attention"])
    top = means.where(ours, axis=0).groupby(summary["tag"]).transform("max")
    floor = means.where(~ours, axis=0).groupby(summary["tag"]).transform("max")
    beats = means.gt(floor) | floor.isna()
    return (means.eq(top) & beats).where(ours, axis=0, other=False).astype(bool)


def add_published(summary: pd.DataFrame, references: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Append `<task>_<name>` (published, %) and `<task>_delta_<name>` (ours − published) per reference table.

    `references` maps a file stem to its `load_reference` frame; only tasks (and `average`) both sides have get
    columns; the reference rows stay blank. The published value is filled on rows whose tag is shown
    beside that table, the delta only on rows whose tag follows its protocol (`follows`).
    """
    extra = {}
    tasks = [column[: -len("_mean")] for column in summary.columns if column.endswith("_mean")]
    for name, frame in references.items():
        shown = summary["tag"].map({tag: shown_beside(tag, frame) for tag in summary["tag"].unique()}).astype(bool)
        same_protocol = summary["tag"].map({tag: follows(tag, frame) for tag in summary["tag"].unique()}).astype(bool)
        for task in [task for task in tasks if task in frame.columns]:
            values = summary["attention"].map(frame[task]).where(~is_reference(summary["attention"])).astype("float64")
            extra[f"{task}_{name}"] = values.where(shown)
            extra[f"{task}_delta_{name}"] = (summary[f"{task}_mean"] - values).where(same_protocol)
    return pd.concat([summary, pd.DataFrame(extra, index=summary.index)], axis=1)
