"""`python -m results.rules [--tag TAG ...] [--committed]`: reference rules fitted on a task's data, for the tables.

A rule is a baseline that needs no model: it says what an accuracy means. `majority class` comes with every run
record; the rules here are computed from the prepared data once per (task, tag) and written as small records,
`<root>/rules/<task>/<tag>.json`, which `python -m results` shows as a row below our attentions:

- ListOps `root-operator rule`: predict, for each root operator (MIN, MAX, MED, SM: the first token of every
  tree), the label most frequent among training trees with that root; scored on test, and on validation
  (`val_acc`, for the runs' best validation accuracy: the two splits' rule accuracies differ by sampling alone,
  34.70 against 36.80% on ours). A model at this level has found the root operator and nothing more (the PyTorch
  ports' ~37%); one below it has not. `test_ceiling` is the most any predictor that sees only the root operator
  can score on test (the rule fitted on test itself; `val_ceiling` the same on validation): a model above it has learnt
  more than the root.

The record names the data it was fitted on (the splits' sha256 from the manifest) and the command that made it.
Written under `outputs/rules/` unless `--committed` (then `results/runs/rules/`, committed with the run records).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from data_prep.compact import DataError, load_manifest, load_split
from data_prep.listops_roots import first_tokens, root_operator_rule
from lra.run.run_files import COMMITTED_RUNS_NAME
from lra_base.atomic import write_atomic
from results.safe_read import UnsafeFile, read_limited

RULES = {"listops": "root-operator rule"}
COMMITTED_ROOT, USER_ROOT = Path(COMMITTED_RUNS_NAME), Path("outputs")


def listops_rule(task_dir: Path, tag: str, command: str) -> dict:
    """The root-operator rule record of the ListOps data in `task_dir`."""
    rebuild = f"python -m data_prep listops --out {task_dir.parent}"
    manifest = load_manifest(task_dir, rebuild_cmd=rebuild)
    splits = {split: load_split(task_dir, split, rebuild_cmd=rebuild) for split in ("train", "val", "test")}
    roots = {name: (first_tokens(split), split.labels) for name, split in splits.items()}

    def fitted(on: str, scored: str) -> tuple[float, dict[int, int]]:
        return root_operator_rule(*roots[on], *roots[scored])

    accuracy, best = fitted("train", "test")
    vocab = manifest["vocab"]
    return {
        "kind": "rule", "task": "listops", "tag": tag, "rule": RULES["listops"], "test_acc": accuracy,
        "val_acc": fitted("train", "val")[0], "test_ceiling": fitted("test", "test")[0],
        "val_ceiling": fitted("val", "val")[0],
        "label_per_root": {vocab[token]: label for token, label in sorted(best.items())},
        "fitted_on": "train", "scored_on": "test",
        "data": {split: manifest["splits"][split]["sha256"] for split in ("train", "val", "test")},
        "command": command,
    }


def data_dir_for(tag: str, task: str, data_dir: str | None) -> Path:
    """`<task.data.root>/<task>` of the config `run.py task=<task> [experiment=<tag>]` composes; for a tag of no
    experiment (runs made by a peer's own code, `nystromformer_code`) `data_dir` names the data itself."""
    from lra.config import CONF_DIR, compose

    if tag != "default" and not (CONF_DIR / "experiment" / f"{tag}.yaml").is_file():
        if data_dir:
            return Path(data_dir) / task
        raise ValueError(f"tag {tag!r} has no experiment (conf/experiment/{tag}.yaml): give --data-dir, the data its "
                         f"runs trained on")
    overrides = [f"task={task}"] + ([] if tag == "default" else [f"experiment={tag}"])
    overrides += [f"data_dir={data_dir}"] if data_dir else []
    config = compose(overrides)
    if config.get("tag") != tag:
        raise ValueError(f"tag {tag!r} is not an experiment's tag (conf/experiment/{tag}.yaml); use default or one")
    return Path(config["task"]["data"]["root"]) / task


def read_rules(roots) -> pd.DataFrame:
    """Every rule record under `<root>/rules/*/*.json`, first root first: tag, task, rule (the row's label), value
    (test accuracy, a fraction), val (validation accuracy; NaN in records from before it) and test_data (the test
    split's SHA-256, or None); a later record of the same (tag, task) is left out."""
    rows, seen = [], set()
    for root in roots:
        for path in sorted(Path(root).glob("rules/*/*.json")):
            try:
                record = json.loads(read_limited(path))
                key = (str(record["tag"]), str(record["task"]))
                value = float(record["test_acc"])
                val = math.nan if record.get("val_acc") is None else float(record["val_acc"])
                label = str(record["rule"])
            except (UnsafeFile, ValueError, KeyError, TypeError) as err:
                print(f"warning: rule record {path} left out: {err}", file=sys.stderr)
                continue
            if label not in RULES.values() or not 0.0 <= value <= 1.0 or not (math.isnan(val) or 0.0 <= val <= 1.0):
                print(f"warning: rule record {path} left out: rule {label!r}, test_acc {value!r} or val_acc "
                      f"{val!r} unknown", file=sys.stderr)
                continue
            if key not in seen:
                seen.add(key)
                test_data = (record.get("data") or {}).get("test") if isinstance(record.get("data"), dict) else None
                rows.append({"tag": key[0], "task": key[1], "rule": label, "value": value, "val": val,
                             "test_data": test_data})
    return pd.DataFrame(rows, columns=["tag", "task", "rule", "value", "val", "test_data"])


def split_spread_note(record: dict) -> str | None:
    """The note under a ListOps table from an ``analyses.listops_splits`` record: how far a fresh test split moves
    the root-operator rule and its ceiling, and where the section's own split falls; None for a malformed one."""
    try:
        by = {str(row["statistic"]): row for row in record["rows"]}
        rule, ceiling, ours = by["mean"]["rule"], by["mean"]["ceiling"], by["ours"]
        text = (f"Split spread (`python -m analyses.listops_splits`, `listops_splits.md`): over "
                f"{int(record['config']['splits'])} fresh test splits of {int(record['config']['split_size']):,} trees "
                f"drawn by the same generator rules, the root-operator rule scores {rule:.2f} ± {by['std']['rule']:.2f}"
                f" (5th-95th percentile {by['p5']['rule']:.2f}-{by['p95']['rule']:.2f}) and its ceiling "
                f"{ceiling:.2f} ± {by['std']['ceiling']:.2f}; this table's test split gives the rule "
                f"{ours['rule']:.2f} (percentile {by['ours: percentile']['rule']:.0f}) and the ceiling "
                f"{ours['ceiling']:.2f}. A number on another split (a port's, on the official one) can differ from "
                f"ours by this much with no difference in training.")
    except (KeyError, TypeError, ValueError):
        return None
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m results.rules", description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="listops", choices=sorted(RULES))
    parser.add_argument("--tag", action="append", default=None,
                        help="the runs' tag whose data to fit on (default, or an experiment's tag); repeatable")
    parser.add_argument("--data-dir", default=None, help="as run.py's data_dir (default: the config's)")
    parser.add_argument("--committed", action="store_true", help=f"write under {COMMITTED_ROOT}/rules")
    args = parser.parse_args(argv)
    root = COMMITTED_ROOT if args.committed else USER_ROOT
    status = 0
    for tag in args.tag or ["default"]:
        command = f"python -m results.rules --task {args.task} --tag {tag}"
        command += f" --data-dir {args.data_dir}" if args.data_dir else ""
        try:
            record = listops_rule(data_dir_for(tag, args.task, args.data_dir), tag, command)
        except (DataError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            status = 2
            continue
        path = root / "rules" / args.task / f"{tag}.json"
        write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"{args.task} {tag}: {record['rule']} test {100 * record['test_acc']:.2f}%, validation "
              f"{100 * record['val_acc']:.2f}%; root-only ceilings test {100 * record['test_ceiling']:.2f}%, "
              f"validation {100 * record['val_ceiling']:.2f}% -> {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())

