"""Does a ListOps model know more than its tree's root operator? (the ListOps study, README "What the 36% bar asks")

``python -m analyses.listops_root RUN_DIR [RUN_DIR ...] [--split test] [--split val] [--data-dir DIR] [--out-root DIR]
[--add-to RECORD] [--tables DIR | --committed]``

Every ListOps run that left the plateau so far tests near the root-operator rule (``results.rules``). Accuracy
alone cannot say whether such a model is the rule or knows more and loses it elsewhere, so this loads each
finished run's best checkpoint (checkpoints are not committed: run it where the run trained), predicts every tree
of each split and compares the predictions with predictors that see the root operator alone
(``data_prep.listops_roots``). ``--add-to`` an earlier record (``results/runs/analyses/listops_root/result.json``)
keeps its rows of the runs not given, each with its own ``git_sha``: runs measured on a machine whose checkpoints
are gone stay in the table beside new ones. Columns, in % of a split's trees:

- ``acc``: the model's accuracy (``recorded_acc``: the run record's; a mismatch is printed as a warning, since
  data and code that agree give the same number); ``rule``: the root-operator rule, fitted on train;
  ``ceiling``: the most frequent label per root fitted on the split itself, the most any predictor of the root
  alone can score there;
- ``agree_rule``: trees on which the model gives the rule's label; ``own_mode``: trees on which it gives its own
  most frequent label for that tree's root (100: on that split the model is a function of the root alone, the
  rule's labels or others);
- ``mode_acc``: the accuracy of that function (the model's per-root mode); ``beyond_root = acc - mode_acc``, what
  the model's departures from its own root-level answer earn. > 0 shows knowledge beyond the root; <= 0 shows
  only that the departures do not pay on balance (some may still be informed);
- ``gains`` / ``losses``: trees the model gets right where its per-root mode is wrong / wrong where the mode is
  right (``beyond_root`` is their difference over the split), and ``sign_p``, the two-sided sign test of
  gains against losses (the chance of a split at least this uneven if a departure were as likely to lose as to
  gain);
- ``acc_rule_wrong``: accuracy on the ``n_rule_wrong`` trees the rule gets wrong (0 for the rule itself; a
  root-only model with other labels than the rule's scores there too).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from data_prep.listops_roots import first_tokens, fit_root_rule, label_per_root, predict_by_root
from lra.build import build_data
from lra.run.outputs import TABLES
from lra.run.record import RECORD_NAME
from lra.settings import Run
from lra_base.atomic import read_regular
from lra_base.errors import UserError

from ._microscope_models import load_model
from .plotting import pyplot, save
from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

NAME = "listops_root"
KEYS = ["attention", "tag", "seed", "split"]


def best_checkpoint(run_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The completed ListOps run's best checkpoint (where the record says, or in its folder's ``checkpoints/``)
    and its record; a ``UserError`` naming the folder otherwise."""
    if not (run_dir / RECORD_NAME).is_file():
        raise UserError(f"{run_dir}: no {RECORD_NAME}; give run folders, as outputs/listops/<attention>/seed<N>/<tag>")
    record = json.loads(read_regular(run_dir / RECORD_NAME))
    if not isinstance(record, dict) or record.get("task") != "listops" or record.get("status") != "completed":
        what = f"a {record.get('status')} {record.get('task')} run" if isinstance(record, dict) else "not a record"
        raise UserError(f"{run_dir / RECORD_NAME}: {what}; this analysis reads completed ListOps runs")
    best = record.get("best_checkpoint")
    if not best:
        raise UserError(f"{run_dir / RECORD_NAME} names no best checkpoint (a run without validation?)")
    for candidate in (Path(best), run_dir / "checkpoints" / Path(best).name):
        if candidate.is_file():
            return candidate, record
    raise UserError(f"{run_dir}: its best checkpoint ({best}) is not there; checkpoints are not committed, so run "
                    "this on the machine that trained the run")


def moved_data(run: Run, data_dir: str) -> Run:
    """``run`` reading its data from under ``data_dir`` instead of its own ``data_dir`` (the saved config is
    resolved: ``task.data.root`` moves, keeping any folder below the old ``data_dir``)."""
    root, old = Path(run.task.data.root), Path(run.data_dir)
    try:
        below = root.relative_to(old)
    except ValueError:
        raise UserError(f"the run's data root {root} is not under its data_dir {old}: --data-dir cannot move it; "
                        "run without --data-dir") from None
    data = replace(run.task.data, root=str(Path(data_dir) / below))
    return replace(run, data_dir=data_dir, task=replace(run.task, data=data))


@torch.no_grad()
def predict(model, datamodule, split: str) -> np.ndarray:
    """The model's predicted class for every example of ``split``, in file order (the loader's batches come
    longest first; their labels are checked against the file's)."""
    loader = datamodule.val_dataloader() if split == "val" else datamodule.test_dataloader()
    order = np.asarray(datamodule.eval_order(split))
    labels = datamodule.data[split].labels
    predicted, done = np.full(len(order), -1, np.int64), 0
    for batch in loader:
        rows = order[done:done + len(batch["labels"])]
        if not np.array_equal(batch["labels"].numpy(), labels[rows]):
            raise RuntimeError(f"{split}: the loader's batch {done // len(rows)} is not in eval_order")
        predicted[rows] = model(batch).argmax(-1).numpy()
        done += len(rows)
    if done != len(order):
        raise RuntimeError(f"{split}: the loader gave {done} of {len(order)} examples")
    return predicted


def percent(mask: np.ndarray) -> float | None:
    """Share of True in % (2 decimals); None for an empty mask."""
    return round(100 * float(mask.mean()), 2) if len(mask) else None


def sign_test(gains: int, losses: int) -> float:
    """Two-sided exact sign test: P(a Binomial(gains + losses, 1/2) count is at least as far from half)."""
    n, low = gains + losses, min(gains, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(low + 1)) / 2**n)


def root_columns(predicted: np.ndarray, first: np.ndarray, labels: np.ndarray, rule: np.ndarray) -> dict[str, Any]:
    """The module docstring's columns from predictions, roots, labels and the rule's predictions (% of trees)."""
    right = predicted == labels
    ceiling = predict_by_root(label_per_root(first, labels), first, 0) == labels
    mode = predict_by_root(label_per_root(first, predicted), first, 0)
    rule_wrong = rule != labels
    beyond = None if not len(right) else round(100 * float(right.mean() - (mode == labels).mean()), 2)
    gains, losses = int((right & (mode != labels)).sum()), int((~right & (mode == labels)).sum())
    return {"acc": percent(right), "rule": percent(~rule_wrong), "ceiling": percent(ceiling),
            "agree_rule": percent(predicted == rule), "own_mode": percent(predicted == mode),
            "mode_acc": percent(mode == labels), "beyond_root": beyond, "gains": gains, "losses": losses,
            "sign_p": round(sign_test(gains, losses), 4),
            "acc_rule_wrong": percent(right[rule_wrong]), "n_rule_wrong": int(rule_wrong.sum())}


def measure(run_dir: Path, splits: list[str], data_dir: str | None) -> list[dict[str, Any]]:
    """One run's rows, one per split: which run, then ``root_columns`` on that split."""
    checkpoint, record = best_checkpoint(run_dir)
    try:
        model, run = load_model(checkpoint)
    except (KeyError, RuntimeError, pickle.UnpicklingError) as err:
        raise UserError(f"{checkpoint}: not a checkpoint of this suite's ListOps model ({err})") from None
    datamodule = build_data(run if data_dir is None else moved_data(run, data_dir))
    train = datamodule.data["train"]
    table, fallback = fit_root_rule(first_tokens(train), train.labels)
    rows = []
    for split in splits:
        data = datamodule.data[split]
        predicted, first = predict(model, datamodule, split), first_tokens(data)
        recorded = (record.get("metrics") or {}).get(f"{split}_acc")
        row = {"attention": record.get("attention"), "tag": record.get("tag"), "seed": record.get("seed"),
               "split": split, "git_sha": str(record.get("git_sha") or "")[:7], "checkpoint": checkpoint.name,
               "recorded_acc": None if recorded is None else round(100 * recorded, 2),
               **root_columns(predicted, first, data.labels, predict_by_root(table, first, fallback))}
        if row["recorded_acc"] is not None and abs(row["acc"] - row["recorded_acc"]) > 0.01:
            print(f"warning: {run_dir} {split}: accuracy {row['acc']} here, {row['recorded_acc']} in its record: "
                  "other data or code than the run's", file=sys.stderr)
        rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], split: str, path: Path) -> Path:
    """Per run: its accuracy beside its own per-root mode's, and the rule and the root-only ceiling on its data
    (a segment across the run's pair of bars)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 3.8))
    x = np.arange(len(rows))
    bars = ax.bar(x - 0.2, [r["acc"] for r in rows], 0.4, label="model (text: own_mode %)")
    ax.bar_label(bars, [f"{r['own_mode']:.2f}" for r in rows], fontsize=7)
    ax.bar(x + 0.2, [r["mode_acc"] for r in rows], 0.4, label="its per-root mode")
    for key, style, label in (("rule", "--", "root-operator rule (train)"), ("ceiling", ":", "root-only ceiling")):
        ax.hlines([r[key] for r in rows], x - 0.45, x + 0.45, color="black", ls=style, lw=1, label=label)
    ax.set_xticks(x, [f"{r['attention']} s{r['seed']}\n{r['tag']}" for r in rows], fontsize=7)
    low = min(min(r["acc"], r["mode_acc"], r["rule"]) for r in rows)
    high = max(max(r["acc"], r["ceiling"]) for r in rows)
    ax.set(ylabel=f"{split} accuracy (%)", ylim=(max(0.0, low - 5), high + 3),
           title="ListOps: the model beside the root operator alone")
    ax.legend(fontsize=7, loc="lower right")
    return save(fig, path)


def notes() -> list[str]:
    return ["Every column in % of the split's trees. rule: the most frequent training label per root "
            "operator; ceiling: the same fitted on this split (no root-only predictor scores more); agree_rule: "
            "predictions equal to the rule's; own_mode: predictions equal to the model's own most frequent "
            "prediction for the tree's root (100: a function of the root alone); mode_acc: that per-root mode's "
            "accuracy; beyond_root = acc - mode_acc (> 0: the model's departures from its root-level answer know "
            "something beyond the root; <= 0: they do not pay on balance); gains / losses: trees right where the "
            "mode is wrong / wrong where it is right, sign_p their two-sided sign test; acc_rule_wrong: accuracy on "
            "the n_rule_wrong trees the rule gets wrong. recorded_acc: the run record's accuracy on the split. The "
            "figure shows the first split given."]


def earlier_record(path: Path) -> dict[str, Any]:
    """The listops_root record ``--add-to`` names; a ``UserError`` if it is not one."""
    try:
        record = json.loads(read_regular(path))
    except (OSError, ValueError) as err:
        raise UserError(f"--add-to {path}: not a readable record ({err})") from None
    if not isinstance(record, dict) or record.get("analysis") != NAME or not isinstance(record.get("rows"), list):
        raise UserError(f"--add-to {path}: not a {NAME} record; give results/runs/analyses/{NAME}/result.json")
    return record


def earlier_rows(record: dict[str, Any], path: Path, measured: list[dict[str, Any]], splits: list[str]) \
        -> tuple[list[dict], list[str]]:
    """The rows and run folders of the earlier ``record`` (read from ``path``) for runs not among ``measured`` (same
    attention, tag and seed); a ``UserError`` if its splits are not ``splits`` (one it lacks has no rows to keep;
    one not given would be dropped from the runs not measured again)."""
    had = record.get("config", {}).get("splits", [])
    missing, dropped = sorted(set(splits) - set(had)), sorted(set(had) - set(splits))
    if missing or dropped:
        said = f"it has no {', '.join(missing)} rows" if missing else \
            f"its {', '.join(dropped)} rows of the other runs would be dropped"
        raise UserError(f"--add-to {path}: {said}; measure with its splits "
                        f"({' '.join(f'--split {split}' for split in had)})")
    new = {(r["attention"], r["tag"], r["seed"]) for r in measured}
    kept = [r for r in record["rows"] if (r["attention"], r["tag"], r["seed"]) not in new and r["split"] in splits]
    ids = {(r["attention"], f"seed{r['seed']}", r["tag"]) for r in kept}
    runs = [run for run in record["config"].get("runs", []) if tuple(Path(run).parts[-3:]) in ids]
    return kept, runs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.listops_root", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished ListOps run folders (with their checkpoints)")
    parser.add_argument("--split", dest="splits", action="append", choices=("test", "val"),
                        help="test or val, repeat for both (default: test, or the --add-to record's splits)")
    parser.add_argument("--data-dir", help="as run.py's data_dir (default: the one the run's config names)")
    parser.add_argument("--add-to", type=Path, help="an earlier listops_root record: its rows of other runs stay")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="the record goes to OUT_ROOT/listops_root/")
    TABLES.add_to(parser)
    args = parser.parse_args(argv)
    try:  # read once, and before any measuring: a wrong --add-to fails at once
        args.earlier = earlier_record(args.add_to) if args.add_to else None
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    had = (args.earlier or {}).get("config", {}).get("splits")  # the default --split with --add-to
    had = [split for split in had if split in ("test", "val")] if isinstance(had, list) else []
    args.splits = list(dict.fromkeys(args.splits or had or ["test"]))
    args.tables = TABLES.choose(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    rows = []
    for run_dir in args.runs:
        try:
            rows += measure(run_dir, args.splits, args.data_dir)
        except (UserError, OSError, ValueError) as err:
            raise SystemExit(f"error: {err}") from None
        for row in rows[-len(args.splits):]:
            print(", ".join(f"{key} {value}" for key, value in row.items()), flush=True)
    runs = [str(r) for r in args.runs]
    if args.add_to:
        try:
            kept, kept_runs = earlier_rows(args.earlier, args.add_to, rows, args.splits)
        except UserError as err:
            raise SystemExit(f"error: {err}") from None
        rows, runs = kept + rows, kept_runs + runs
        print(f"kept {len(kept)} rows of {args.add_to}")
    path = write_analysis_record(NAME, rows, keys=KEYS, config={"splits": args.splits, "runs": runs},
                                 started=started, out_root=args.out_root, notes=notes())
    tables = tabulate(NAME, path, args.tables)
    split = args.splits[0]
    png = plot([row for row in rows if row["split"] == split], split, Path(args.tables) / f"{NAME}.png")
    print(Path(tables[1]).read_text(encoding="utf-8"))
    print(f"wrote {path}, {', '.join(map(str, tables))}, {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
