"""LLoPS associative-recall ablations at CPU scale (LLoPS paper, arXiv 2610.14219, AR ablation table).

``python -m analyses.ar_ablation [--seeds 1] [--features 64 256] [--lrs 1e-3 3e-3 1e-2] [--jobs 2] [--settings ...]
[--quick]``
trains ``task=ar`` models (it prints the expected time first, then one line per run and validation, and reuses
finished runs when run again):

- degree: LLoPS ``p in {2, 4, 6}`` at fixed ``m`` (``attention.degree``, ``attention.features``);
- width: BASED (``r = 16``) against LLoPS (``p = 4``, same ``m``) at a narrow and a wide model.

The paper's widths are 128 and 192 at m = 256; ours are narrower (``--widths``), m is 64 and training is
1500 steps by default (``--features``, ``--steps``), so that the whole command fits in about 15 minutes on 2
CPU cores. The rows keep the paper's setting names (``width128`` = our narrow, ``width192`` = our wide) so the
published accuracy sits beside ours. Each run is an ordinary ``run.py`` run (own folder,
``result.json``, checkpoints, resumable), reused or trained by ``analyses._runs``: its folder is named by its
whole config, so a repeated command reuses it and a changed setting (``--steps``, ``--lr``, an override) trains
its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from lra.config import compose_run
from lra.run.outputs import TABLES
from lra.run.record import RECORD_NAME
from lra.run.run_files import metrics_path
from lra.settings import Run

from ._runs import expected_minutes, run_folder, train_all
from .plotting import pyplot, save
from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

NAME = "ar_ablation"
QUICK = ["task.max_steps=20", "task.eval_every=10", "task.data.train=256", "task.data.val=64",
         "task.data.test=64"]


SETTINGS = ("degree", "width128", "width192")

KEYS = ("setting", "method", "p", "m")  # a published row sits beside ours only at its own m (the paper: 256)

def settings(features: tuple[int, ...], widths: tuple[int, int], degrees: tuple[int, ...],
             only: tuple[str, ...] = SETTINGS) -> list[dict[str, Any]]:
    """The table's rows: setting name, method, its attention overrides and the model width; LLoPS rows once per
    m in ``features``, BASED rows (no m) once; only the settings named in ``only``."""
    narrow, wide = widths
    rows = []
    for m in features:
        llops = {"features": m, "square": True}
        rows += [{"setting": "degree", "method": "llops", "p": p, "m": m, "d": narrow,
                  "options": {**llops, "degree": p}} for p in degrees]
    for name, width in (("width128", narrow), ("width192", wide)):
        rows.append({"setting": name, "method": "based", "r": 16, "d": width, "options": {"feature_dim": 16}})
        rows += [{"setting": name, "method": "llops", "p": 4, "m": m, "d": width,
                  "options": {"features": m, "square": True, "degree": 4}} for m in features]
    return [row for row in rows if row["setting"] in only]


def run_label(row: dict[str, Any], seed: int, lr: float) -> str:
    """Name of one training run; the same (method, options, width, lr, seed) shares one run."""
    options = "_".join(f"{k}{v}" for k, v in sorted(row["options"].items()))
    return f"{row['method']}_{options}_d{row['d']}_lr{lr:g}_seed{seed}"


def run_config(row: dict[str, Any], seed: int, lr: float, extra: list[str]) -> Run:
    """The run, composed from ``conf/`` and checked as ``run.py task=ar ...`` would."""
    overrides = ["task=ar", f"attention={row['method']}", f"seed={seed}", f"model.dim={row['d']}",
                 f"model.ffn_dim={2 * row['d']}", "tag=ar_ablation", "trainer.enable_progress_bar=false",
                 f"task.optim.lr={lr}", *(f"attention.{k}={v}" for k, v in row["options"].items()), *extra]
    return compose_run(overrides).asked_by(NAME)  # results.collect leaves runs of an analysis to its own table


def crossing_step(record: dict[str, Any], threshold: float = 0.5) -> int | None:
    """The training steps done at the first validation whose query accuracy reached ``threshold`` (the MQAR
    transition), or None. ``metrics.csv`` logs a validation at its last step's 0-based index (499 after 500 steps)."""
    metrics = metrics_path(Path(record["run_dir"]) / RECORD_NAME) if record.get("run_dir") else None
    if metrics is None:  # a run folder's csv/metrics.csv, or an archived copy's metrics.csv
        return None
    frame = pd.read_csv(metrics)
    if "val/acc" not in frame:
        return None
    passed = frame.loc[frame["val/acc"] >= threshold, "step"]
    return int(passed.min()) + 1 if len(passed) else None


def best_lr(records: dict[float, list[dict[str, Any]]]) -> float:
    """The learning rate whose completed seeds have the best mean validation accuracy (the paper tunes)."""
    def score(lr: float) -> float:
        accs = [r["metrics"]["val_acc"] for r in records[lr] if r.get("status") == "completed"]
        return statistics.fmean(accs) if accs else float("-inf")
    return max(records, key=score)


def summarise(rows: list[dict[str, Any]], records: dict[str, dict[float, list[dict[str, Any]]]]) -> list[dict]:
    """Table rows at each row's best learning rate: accuracy on queries (%), mean and std over its completed
    seeds, and the steps at which each seed crossed 50% (``-`` for a seed that did not)."""
    table = []
    for row in rows:
        lr = best_lr(records[row["key"]])
        done = [r for r in records[row["key"]][lr] if r.get("status") == "completed"]
        accs = [100 * r["metrics"]["test_acc"] for r in done]
        crossings = [crossing_step(r) for r in done]
        table.append({
            "setting": row["setting"], "method": row["method"], "p": row.get("p"), "m": row.get("m"),
            "d": row["d"], "r": row.get("r"), "lr": lr,
            "accuracy": statistics.fmean(accs) if accs else None,
            "std": statistics.stdev(accs) if len(accs) > 1 else None, "seeds": len(accs),
            "crossing_steps": " ".join("-" if c is None else str(c) for c in crossings),
            "majority": 100 * done[0]["metrics"]["majority_acc"] if done else None,
            "wall_s": round(sum(r.get("wall_time_s", 0) for lr_runs in records[row["key"]].values()
                                for r in lr_runs), 1),
        })
    return table


def plot(table: list[dict[str, Any]], path: Path) -> Path:
    """Accuracy (mean, std over seeds) per LLoPS degree and m, and BASED vs LLoPS per width: a panel each, for
    the kinds of row that have completed runs."""
    plt = pyplot()
    panels = [(part, title) for part, title in (
        ([r for r in table if r["setting"] == "degree" and r["accuracy"] is not None], "LLoPS degree"),
        ([r for r in table if r["setting"] != "degree" and r["accuracy"] is not None], "BASED (r=16) vs LLoPS (p=4)"))
        if part] or [([], "no completed runs")]  # only the panels of rows that were run
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (part, title) in zip(axes[0], panels):
        labels = [f"{r['method']} d={r['d']}" + (f"\np={r['p']} m={r['m']}" if r["m"] else "") for r in part]
        colors = ["tab:orange" if r["method"] == "based" else "tab:blue" for r in part]
        ax.bar(labels, [r["accuracy"] for r in part], yerr=[r["std"] or 0 for r in part], color=colors, capsize=3)
        ax.set(title=title, ylabel="query accuracy (%)", ylim=(0, 100))
        ax.tick_params(axis="x", labelsize=7)
    return save(fig, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.ar_ablation", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="seeds per run (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default 2)")
    parser.add_argument("--features", type=int, nargs="+", default=[64],
                        help="LLoPS m, one row each (default 64; the paper's 256 is slower)")
    parser.add_argument("--steps", type=int, default=1500, help="training steps per run (default 1500)")
    parser.add_argument("--lrs", type=float, nargs="+", default=[3e-3],
                        help="peak learning rates; each row reports its best by validation (default 3e-3)")
    parser.add_argument("--widths", type=int, nargs=2, default=(64, 96), help="narrow and wide model width")
    parser.add_argument("--degrees", type=int, nargs="+", default=(2, 4, 6))
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS,
                        help="rows to train: degree (LLoPS p), width128 (narrow), width192 (wide); default all")
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke version (tests)")
    parser.add_argument("--estimate", action="store_true", help="print the runs and the expected time, train nothing")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="records go to OUT_ROOT/ar_ablation/")
    TABLES.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="extra run.py overrides, e.g. task.eval_every=100")
    args = parser.parse_args(argv)
    args.tables = TABLES.choose(parser, args)
    return args


def plan(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str], dict[str, tuple[dict, Path]]]:
    """The table's rows, the overrides every run shares, and each training run: ``label: (config, folder)``."""
    extra = [f"task.max_steps={args.steps}", "task.optim.warmup_steps=100", *(QUICK if args.quick else []),
             *args.overrides]
    rows = settings(tuple(args.features), tuple(args.widths), tuple(args.degrees), tuple(args.settings))
    runs_dir = Path(args.out_root) / NAME / "runs"
    jobs: dict[str, tuple[dict, Path]] = {}
    for row in rows:
        row["key"] = run_label(row, 0, 0.0)
        for lr in args.lrs:
            for seed in range(args.seeds):
                label = run_label(row, seed, lr)
                if label not in jobs:
                    run = run_config(row, seed, lr, extra)
                    jobs[label] = (run, run_folder(runs_dir, label, run))
    return rows, extra, jobs


def claims(table: list[dict[str, Any]]) -> list[str]:
    """The seed paper's two claims, checked on this table: LLoPS >= BASED at equal width, and p = 4 best."""
    found = []
    for m in sorted({r["m"] for r in table if r["m"] is not None}):
        degree = {r["p"]: r["accuracy"] for r in table if r["setting"] == "degree" and r["m"] == m}
        if degree and None not in degree.values():
            best = max(degree, key=degree.get)
            found.append(f"m = {m}: p = 4 best? {'yes' if best == 4 else f'no, p = {best}'} "
                         f"({', '.join(f'p={p} {a:.1f}' for p, a in sorted(degree.items()))}).")
        for width in ("width128", "width192"):
            llops = next((r for r in table if r["setting"] == width and r["method"] == "llops" and r["m"] == m), None)
            based = next((r for r in table if r["setting"] == width and r["method"] == "based"), None)
            if llops and based and llops["accuracy"] is not None and based["accuracy"] is not None:
                verdict = "yes" if llops["accuracy"] >= based["accuracy"] else "no"
                found.append(f"m = {m}, {width} (d = {llops['d']}): LLoPS >= BASED? {verdict} "
                             f"({llops['accuracy']:.1f} vs {based['accuracy']:.1f}).")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    rows, extra, jobs = plan(args)
    minutes, todo = expected_minutes(jobs, args.jobs)
    print(f"{len(jobs)} training runs under {Path(args.out_root) / NAME / 'runs'} ({len(jobs) - todo} already "
          f"completed, reused), {args.jobs} at a time with one thread each: expected ~{minutes:.0f} min on idle "
          "cores (a probe of each model's step; a busy machine is slower). One line per run and validation:",
          file=sys.stderr, flush=True)
    if args.estimate:
        return 0
    done = train_all(jobs, args.jobs)
    records = {row["key"]: {lr: [done[run_label(row, s, lr)] for s in range(args.seeds)] for lr in args.lrs}
               for row in rows}
    table = summarise(rows, records)
    steps = next(iter(jobs.values()))[0].task.max_steps
    failed = sorted(label for label, record in done.items() if record.get("status") != "completed")
    notes = [f"Ours: CPU scale, seq_len/pairs/vocab of conf/task/ar.yaml, widths {args.widths[0]} (row width128) "
             f"and {args.widths[1]} (row width192), m in {args.features}, {steps} steps, lr the best of "
             f"{args.lrs} by mean validation accuracy, {args.seeds} seed(s); test accuracy on query positions (%), "
             "mean and std over seeds; crossing_steps: per seed, the training steps done at the first validation "
             "with query accuracy >= 50% (- : never).", *claims(table)]
    notes += [f"failed run: {label}" for label in failed]
    config = {"seeds": args.seeds, "features": list(args.features), "lrs": list(args.lrs),
              "widths": list(args.widths), "degrees": list(args.degrees), "settings": list(args.settings),
              "overrides": extra, "runs": sorted(jobs)}
    path = write_analysis_record(NAME, table, keys=list(KEYS), config=config, started=started,
                                 published="llops_ar_ablation", out_root=args.out_root, notes=notes)
    written = tabulate(NAME, path, args.tables)
    written.append(plot(table, Path(args.tables) / f"{NAME}.png"))
    print(Path(written[1]).read_text())
    print(f"record: {path}\nwrote {', '.join(map(str, written))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
