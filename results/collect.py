"""Find every run's `result.json` and turn them into one long table (one row per run x metric).

The fields a record has are `lra.run.record.RunRecord` (training) and `lra.run.record.AnalysisRecord` (analyses).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lra.config import CONF_DIR
from lra.run.record import ANALYSIS_KIND, INTERRUPTED, RECORD_NAME, REQUIRED_FIELDS, AnalysisRecord, RunRecord
from lra.run.record_compat import recorded_experiment, whole_run_time
from lra.run.run_files import COMMITTED_RUNS, SET_ASIDE, is_set_aside
from lra.settings import MAX_SEED
from lra.task_facts import averaged_tasks, lra_tasks
from results.data_sections import mark_other_data
from results.machines import device_kind, machine_summary
from results.protocol import (
    SECTION_SEP,
    SECTIONS,
    UNCHECKED,
    YOURS,
    as_typed,
    drift_pairs,
    has_protocol,
    reference_config,
    tag_protocol,
)
from results.safe_read import UnsafeFile, read_limited

TASKS, CLASSIC_TASKS = lra_tasks(), averaged_tasks()  # table columns, the average's (lra/tasks/<task>.py)
UNTAGGED = "untagged"
COLUMNS = [
    "task", "attention", "seed", "tag", "status", "metric", "value",
    "git_sha", "wall_time_s", "params", "tokens_per_s", "steps", "device", "machine", "protocol", "path",
]
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # an analysis or published-table name: one plain file stem
REFERENCE_DIR = Path(__file__).with_name("reference")
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


class MalformedRecord(ValueError):
    """Raised for a `result.json` that is not valid JSON or lacks a required field."""


def records_under(root: Path) -> list[Path]:
    """`result.json` paths in `root` and its folders, except hidden ones (a name starting with "."): a writer's
    staging folder (`results.archive` builds a record and its curve there before they replace the old pair)."""
    under = []
    for dirpath, folders, names in os.walk(root):
        folders[:] = [name for name in folders if not name.startswith(".")]
        if RECORD_NAME in names:
            under.append(Path(dirpath) / RECORD_NAME)
    return under


def find_records(roots: list[str | Path]) -> list[Path]:
    """`result.json` paths under `roots` (`records_under`), root by root (sorted within each), each file once; a
    root that is a file counts as itself."""
    found: dict[Path, Path] = {}
    for root in map(Path, roots):
        if root.is_file():
            found.setdefault(Path(os.path.realpath(root)), root)
        elif root.is_dir():
            under = records_under(root)
            for path in sorted(under):
                found.setdefault(Path(os.path.realpath(path)), path)
    return list(found.values())


def copy_key(record: dict) -> tuple:
    """What a copy of a record (results/runs) shares with its original (outputs), and no other record does."""
    return tuple(str(record.get(key)) for key in ("analysis", "task", "attention", "seed", "tag", "started_at",
                                                      "finished_at"))


def load_json(path: Path) -> object:
    """The JSON value in ``path`` (a regular file below ``RECORD_LIMIT``); MalformedRecord otherwise."""
    try:
        return json.loads(read_limited(path))
    except UnsafeFile as err:
        raise MalformedRecord(f"not read: {err}") from None
    except RecursionError:
        raise MalformedRecord("unreadable JSON: nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, or an integer literal over Python's digit limit
        raise MalformedRecord(f"unreadable JSON: {err}") from None


def config_problem(config: object) -> str | None:
    """Why a record's ``config`` cannot be compared with its protocol: not an object, or a section that is not."""
    if config is None:
        return None
    if not isinstance(config, dict):
        return f"config is {type(config).__name__}, expected an object"
    for section in SECTIONS:
        if config.get(section) is not None and not isinstance(config[section], dict):
            return f"config.{section} is {type(config[section]).__name__}, expected an object"
    return None


def finite_number(value: object) -> bool:
    """Whether ``value`` is an int or float that a float column holds finitely (not bool, nan, inf or 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def number_problem(record: dict) -> str | None:
    """Why ``params``, ``wall_time_s`` or ``tokens_per_s`` cannot go in a table column (a number out of range)."""
    for key in ("params", "wall_time_s", "tokens_per_s"):
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # null or text: an empty cell
        if not finite_number(value) or (key == "params" and not 0 <= value < 2**63):
            return f"{key}={first_line(value, 40)} is out of range"
    return None


def read_record(path: Path) -> RunRecord | AnalysisRecord:
    """Load one record and check its required fields; raise MalformedRecord otherwise."""
    record = load_json(path)
    if not isinstance(record, dict):
        raise MalformedRecord(f"top level is {type(record).__name__}, expected an object")
    if problem := config_problem(record.get("config")):
        raise MalformedRecord(problem)
    if record.get("kind") == ANALYSIS_KIND:
        return record  # an analysis record (analyses): tabulated by results.analyses, not here
    absent = [key for key in REQUIRED_FIELDS if record.get(key) in (None, "")]
    if absent:
        raise MalformedRecord(f"missing field(s): {', '.join(absent)}")
    try:
        record["seed"] = int(record["seed"])
    except (TypeError, ValueError, OverflowError) as err:
        raise MalformedRecord(f"seed is not an integer: {first_line(record['seed'], 40)}") from err
    if not 0 <= record["seed"] <= MAX_SEED:
        raise MalformedRecord(f"seed={first_line(record['seed'], 40)} is outside [0, {MAX_SEED}]")
    if not isinstance(record.get("metrics") or {}, dict):
        raise MalformedRecord("metrics is not an object")
    if problem := number_problem(record):
        raise MalformedRecord(problem)
    return record


def analysis_problem(record: AnalysisRecord) -> str | None:
    """Why an analysis record cannot be tabulated (its name would leave the output folder, no rows, ...)."""
    name, published, rows = record.get("analysis"), record.get("published"), record.get("rows")
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        return f"analysis name {name!r} is not a plain name (letters, digits, '_', '-', '.')"
    if not isinstance(rows, list) or not rows or not all(isinstance(row, dict) for row in rows):
        return "rows is not a non-empty list of objects"
    if any(isinstance(value, (dict, list)) for row in rows for value in row.values()):
        return "a row holds a nested value; every cell must be a number, a string or null"
    for field in ("keys", "columns", "notes"):
        value = record.get(field)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{field} is not a list of strings"
    if published is not None and not record.get("keys"):
        return "published is set but keys (the columns to join the published table on) is missing or empty"
    if published is not None and (not isinstance(published, str) or not NAME.fullmatch(published)
                                  or not (REFERENCE_DIR / f"{published}.csv").is_file()):
        return f"published table {published!r} is not one of {REFERENCE_DIR}/*.csv"
    return None


def record_tag(record: dict) -> str:
    """The run's tag (top level, else `config.tag`), or "untagged"."""
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    tag = record.get("tag") or config.get("tag")
    return str(tag) if tag not in (None, "") else UNTAGGED


def first_line(text: object, limit: int = 200) -> str:
    """First non-empty line of an error message, cut to `limit` characters."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    line = lines[0] if lines else "(no error message)"
    return line if len(line) <= limit else line[: limit - 1] + "…"


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
