"""Find every run's `result.json` and turn them into one long table (one row per run x metric).

The fields a record has are `lra.run.record.RunRecord` (training) and `lra.run.record.AnalysisRecord` (analyses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lra.config import CONF_DIR
from lra.run.record import ANALYSIS_KIND, INTERRUPTED, RECORD_NAME, RunRecord
from lra.run.record_compat import recorded_experiment, whole_run_time
from lra.run.run_files import COMMITTED_RUNS, SET_ASIDE, is_set_aside
from lra.task_facts import averaged_tasks, lra_tasks
from results.data_sections import mark_other_data
from results.machines import device_kind, machine_summary
from results.protocol import (
    SECTION_SEP,
    UNCHECKED,
    YOURS,
    as_typed,
    drift_pairs,
    has_protocol,
    reference_config,
    tag_protocol,
)
from results.record_files import (
    MalformedRecord,
    analysis_problem,
    copy_key,
    find_records,
    finite_number,
    first_line,
    read_record,
)

TASKS, CLASSIC_TASKS = lra_tasks(), averaged_tasks()  # table columns, the average's (lra/tasks/<task>.py)
UNTAGGED = "untagged"
COLUMNS = [
    "task", "attention", "seed", "tag", "status", "metric", "value",
    "git_sha", "wall_time_s", "params", "tokens_per_s", "steps", "device", "machine", "protocol", "experiment", "path",
]
SHORT = "short"  # status and problem kind of a record that says completed after fewer steps than it was to train


@dataclass(frozen=True)
class Problem:
    """A record that is not averaged: unreadable, failed, superseded, lacking a value or holding a bad one.

    `kind` is one of "malformed", "failed", "unfinished" (interrupted, its last.ckpt saved: rerunning resumes it),
    "short" (recorded completed after fewer steps than its config asks: `short_of_steps`), "duplicate",
    "config drift", "missing test_acc", "bad value", "set aside" (a record ``rerun=true`` moved to
    ``<run folder>/replaced/<time>/``: never a row of the tables, listed only);
    `tag` and `run` ("task/attention/seed N") are None/"" when the record could not be read.
    """

    path: str
    kind: str
    message: str
    tag: str | None = None
    run: str = ""


def record_tag(record: dict) -> str:
    """The run's tag (top level, else `config.tag`), or "untagged"."""
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    tag = record.get("tag") or config.get("tag")
    return str(tag) if tag not in (None, "") else UNTAGGED


def clean_metrics(metrics: dict) -> tuple[dict[str, float], list[str]]:
    """Split metrics into (finite numbers kept, complaints); `*_acc` must be a fraction in [0, 1]. A null one was not
    measured (`val_acc` of a run that never validated: `lra.run.train` writes None) and is left out, not refused."""
    kept, complaints = {}, []
    for name, value in metrics.items():
        if value is None:
            continue
        if not finite_number(value):
            complaints.append(f"{name}={first_line(repr(value), 40)} is not a finite number")
        elif name.endswith("_acc") and not 0.0 <= value <= 1.0:
            complaints.append(f"{name}={value!r} is not a fraction in [0, 1]")
        else:
            kept[name] = float(value)
    return kept, complaints


def run_label(run: dict) -> str:
    """Short run name for problem lists, e.g. "listops/softmax/seed 0"."""
    return f"{run['task']}/{run['attention']}/seed {run['seed']}"


def short_of_steps(record: RunRecord) -> str | None:
    """Why a record that says ``completed`` is not: it trained fewer steps than its config bounds it by
    (``trainer.max_steps``, which is ``task.max_steps`` unless overridden; with no bound, none at all), as runs
    stopped by ``+trainer.max_epochs=0`` were recorded before ``lra.run.train`` refused them. None when it is whole, and
    for records that do not say (no ``steps`` or config) and debug runs (``trainer.fast_dev_run``)."""
    steps = record.get("steps")
    config = record.get("config")
    trainer = config.get("trainer") if isinstance(config, dict) else None
    bound = trainer.get("max_steps") if isinstance(trainer, dict) else None
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (steps, bound)) or trainer.get("fast_dev_run"):
        return None
    if steps >= bound if bound > 0 else steps > 0:
        return None
    trained = f"{steps} of its {bound} steps (trainer.max_steps)" if bound > 0 else "no step"
    return f"status completed, but it trained {trained}: not a run of its protocol"


def parse_run(path: Path, record: RunRecord) -> tuple[dict, list[Problem]]:
    """Turn a checked record into a run dict (fields + cleaned metrics) and its problems."""
    run = {
        "task": str(record["task"]), "attention": str(record["attention"]), "seed": record["seed"],
        "tag": record_tag(record), "status": str(record["status"]),
        "git_sha": record.get("git_sha"), "wall_time_s": whole_run_time(record),
        "params": record.get("params"), "tokens_per_s": record.get("tokens_per_s"),
        "steps": record.get("steps") if finite_number(record.get("steps")) else None,
        "device": device_kind(record.get("segments")), "machine": machine_summary(record.get("segments")),
        "path": path.as_posix(), "finished_at": str(record.get("finished_at") or ""),
        "config": record.get("config"), "protocol": "", "experiment": recorded_experiment(record),
        "data": record.get("data"),
    }
    run["metrics"], complaints = clean_metrics(record.get("metrics") or {})
    label, tag, where = run_label(run), run["tag"], run["path"]
    problems = [Problem(where, "bad value", text, tag, label) for text in complaints]
    if run["status"] == INTERRUPTED:
        resume = record.get("resumes_with")
        how = f"{resume} resumes it" if isinstance(resume, str) else "rerunning its command resumes it from last.ckpt"
        problems.append(Problem(where, "unfinished", f"stopped before its last step (status interrupted); {how}",
                                tag, label))
    elif run["status"] != "completed":
        message = first_line(record.get("error")) if record.get("error") else f"status {run['status']!r}"
        problems.append(Problem(where, "failed", message, tag, label))
    elif short := short_of_steps(record):
        run["status"] = SHORT
        problems.append(Problem(where, SHORT, short, tag, label))
    elif "test_acc" not in run["metrics"]:
        message = "completed run without a usable test_acc"
        problems.append(Problem(where, "missing test_acc", message, tag, label))
    if complaints and run["status"] == "completed":  # one non-finite metric (a diverged run): none is averaged
        run["status"] = "bad value"
    return run, problems


def set_aside_problem(path: Path, record: dict) -> Problem | None:
    """The "set aside" entry of a record that ``rerun=true`` moved to ``<run folder>/replaced/<time>/``: listed
    under its tag with its status, never with a number, and never averaged (the folder's own record, its redo's,
    is the run's result, whatever it says); None for an analysis's record."""
    if record.get("kind") == ANALYSIS_KIND or (record.get("config") or {}).get("analysis"):
        return None
    redo = (path.parent.parent.parent / RECORD_NAME).as_posix()
    message = (f"an earlier run's record (status {first_line(record['status'], 40)}) that rerun=true moved to "
               f"{SET_ASIDE}/{path.parent.name}/; not this run's result, which is `{redo}`")
    return Problem(path.as_posix(), "set aside", message, record_tag(record), run_label(record))


def mark_duplicates(runs: list[dict]) -> list[Problem]:
    """Keep the newest completed run per (tag, task, attention, seed); mark the others "superseded"."""
    newest: dict[tuple, dict] = {}
    for run in sorted(runs, key=lambda r: (r["finished_at"], r["path"])):
        if run["status"] != "completed":
            continue
        key = (run["tag"], run["task"], run["attention"], run["seed"])
        if key in newest:
            newest[key]["status"] = "superseded"
        newest[key] = run
    problems = []
    for run in runs:
        if run["status"] == "superseded":
            kept = newest[(run["tag"], run["task"], run["attention"], run["seed"])]["path"]
            message = f"same tag/task/attention/seed as newer `{kept}`"
            problems.append(Problem(run["path"], "duplicate", message, run["tag"], run_label(run)))
    return problems


def mark_drift(runs: list[dict], conf_dir: Path = CONF_DIR, committed: Path = COMMITTED_RUNS) -> list[Problem]:
    """Give completed runs whose settings differ from their (tag, task, experiment) reference a section of their
    own, `"<tag> · key=value, ..."` (the differing settings): runs that differ in the same way are averaged
    together, never with the protocol's. Runs of an experiment whose protocol differs from the tag's own
    (`tag_protocol`: `run.py experiment=X tag=Y`) start their section with `experiment=X`. Returns no problems (kept
    for the caller's shape).

    Each checked run's `protocol` says what it was checked against (see `results.protocol.reference_config`);
    completed runs without a recorded config are "unchecked". Committed runs and yours are grouped apart, and yours
    are checked against the committed runs' reference where there is one: where it is their most common config,
    your runs never outvote the committed ones.
    """
    groups: dict[tuple, list[dict]] = {}
    for run in [run for run in runs if run["status"] == "completed"]:
        if has_protocol(run["config"]):
            key = (run["tag"], run["task"], run["experiment"], is_committed(run["path"], committed))
            groups.setdefault(key, []).append(run)
        else:
            run["protocol"] = UNCHECKED
    problems = []
    references = {key: reference_config(*key[:2], [run["config"] for run in group], conf_dir, key[2])
                  for key, group in groups.items()}
    for (tag, task, experiment, inside) in references:  # yours are checked against the committed runs' reference
        if not inside and (tag, task, experiment, True) in references:
            references[(tag, task, experiment, False)] = references[(tag, task, experiment, True)]
    for key, group in sorted(groups.items(), key=lambda item: (*item[0][:2], str(item[0][2]), item[0][3])):
        (tag, task, experiment, inside), (reference, source) = key, references[key]
        own = tag_protocol(tag, task, experiment_references(groups, references, tag, task), conf_dir)
        apart = f"experiment={experiment or 'none'}" if own is not None and drift_pairs(reference, own) else ""
        for run in group:
            run["protocol"] = source
            differences = as_typed(drift_pairs(run["config"], reference), tag, task, conf_dir, experiment)
            settings = ([apart] if apart else []) + [f"{key}={mine}" for key, mine, _ in differences]
            if settings:  # another experiment under the same tag is never averaged with the tag's own either
                run["tag"] = f"{tag}{SECTION_SEP}{', '.join(settings)}"
    return problems


def is_committed(path: str | Path, committed: Path = COMMITTED_RUNS) -> bool:
    """Whether the record at `path` is one of the committed records (under `committed`)."""
    return Path(path).resolve().is_relative_to(committed.resolve())


def experiment_references(groups: dict[tuple, list[dict]], references: dict[tuple, tuple[dict, str]], tag: str,
                          task: str) -> dict[str | None, tuple[dict, int]]:
    """{experiment: (reference, how many runs)} of a (tag, task)'s committed runs, or of all of them when none is
    committed (`mark_drift`'s groups and references)."""
    keys = [key for key in groups if key[:2] == (tag, task)]
    keys = [key for key in keys if key[3]] or keys
    return {key[2]: (references[key][0], len(groups[key])) for key in keys}


def mark_yours(runs: list[dict], committed: Path = COMMITTED_RUNS) -> None:
    """When committed records (under `committed`) and others were read together, put the others in sections
    of their own (`"<tag> · yours"`): a run of yours never replaces or joins a committed number."""
    inside = [is_committed(run["path"], committed) for run in runs]
    if any(inside) and not all(inside):
        for run, committed_run in zip(runs, inside, strict=True):
            if not committed_run:
                run["tag"] = f"{run['tag']}{SECTION_SEP}{YOURS}"


def to_long(runs: list[dict]) -> pd.DataFrame:
    """One row per run x metric; a run without metrics keeps one row with an empty metric."""
    rows = []
    for run in runs:
        fields = {key: run[key] for key in COLUMNS if key not in ("metric", "value")}
        for name, value in sorted(run["metrics"].items()) or [(None, math.nan)]:
            rows.append({**fields, "metric": name, "value": value})
    long = pd.DataFrame(rows, columns=COLUMNS)
    long["seed"] = long["seed"].astype("int64")
    long["value"] = long["value"].astype("float64")
    long["params"] = pd.to_numeric(long["params"], errors="coerce").astype("Int64")
    for column in ("wall_time_s", "tokens_per_s"):
        long[column] = pd.to_numeric(long[column], errors="coerce")
    order = {task: i for i, task in enumerate(TASKS)}
    long = long.assign(_order=long["task"].map(order).fillna(len(TASKS)))
    long = long.sort_values(["tag", "_order", "task", "attention", "seed", "path", "metric"], kind="stable")
    return long.drop(columns="_order").reset_index(drop=True)


def collect(roots: list[str | Path], conf_dir: Path = CONF_DIR,
            committed: Path = COMMITTED_RUNS) -> tuple[pd.DataFrame, list[Problem]]:
    """Read every `result.json` under `roots`.

    A run found under two roots (an archived copy and its original) counts once: its committed copy (under
    `committed`) whatever the order of `roots`, so that it stays in the committed sections; else the first root's.
    Returns the long table (columns `COLUMNS`, accuracies as fractions) and the problems: malformed files,
    failed runs, superseded duplicates, completed runs without test_acc and rejected metric values. Runs off their
    tag's protocol (`conf_dir` composes it), runs on other data than the rest of their section's
    (`results.data_sections`) and, beside committed records (under `committed`), your own runs get sections of their
    own (`mark_drift`, `mark_other_data`, `mark_yours`). Only rows with status "completed" are meant to be averaged.
    """
    paths = sorted(find_records(roots), key=lambda path: not is_committed(path, committed))  # stable: roots' order
    runs, problems, seen = [], [], set()
    for path in paths:
        try:
            record = read_record(path)
        except MalformedRecord as err:
            if not is_set_aside(path):  # an unreadable set-aside record is nobody's result: not listed
                problems.append(Problem(path.as_posix(), "malformed", str(err)))
            continue
        if is_set_aside(path):  # replaced by rerun=true: listed, never tabulated
            if problem := set_aside_problem(path, record):
                problems.append(problem)
            continue
        key = copy_key(record)
        if record.get("finished_at") and key in seen:
            continue  # the same run found under two roots: its committed copy counts, else the first root's
        seen.add(key)
        if record.get("kind") == ANALYSIS_KIND and (problem := analysis_problem(record)):
            problems.append(Problem(path.as_posix(), "malformed", problem))
            continue
        if record.get("kind") == ANALYSIS_KIND or (record.get("config") or {}).get("analysis"):
            continue  # an analysis, or a training run made by one: results.analyses tabulates them
        run, found = parse_run(path, record)
        runs.append(run)
        problems.extend(found)
    problems.extend(mark_drift(runs, conf_dir, committed))
    mark_other_data(runs, lambda run: is_committed(run["path"], committed))
    mark_yours(runs, committed)
    problems.extend(mark_duplicates(runs))
    return to_long(runs), problems
