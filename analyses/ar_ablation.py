"""LLoPS associative-recall ablations at CPU scale (LLoPS paper, arXiv 2610.14219, AR ablation table).

``python -m analyses.ar_ablation [--seeds 1] [--jobs 2] [--quick]`` trains ``task=ar`` models:

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

from lra.config import compose

from ._runs import run_folder, train_all
from .plotting import pyplot, save
from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

NAME = "ar_ablation"
QUICK = ["task.max_steps=20", "task.eval_every=10", "task.data.train=256", "task.data.val=64",
         "task.data.test=64"]


def settings(features: int, widths: tuple[int, int], degrees: tuple[int, ...]) -> list[dict[str, Any]]:
    """The table's rows: setting name, method, its attention overrides and the model width."""
    narrow, wide = widths
    llops = {"features": features, "square": True}
    rows = [{"setting": "degree", "method": "llops", "p": p, "d": narrow, "options": {**llops, "degree": p}}
            for p in degrees]
    for name, width in (("width128", narrow), ("width192", wide)):
        rows.append({"setting": name, "method": "based", "r": 16, "d": width, "options": {"feature_dim": 16}})
        rows.append({"setting": name, "method": "llops", "p": 4, "d": width, "options": {**llops, "degree": 4}})
    return rows


def run_label(row: dict[str, Any], seed: int) -> str:
    """Name of one training run; the same (method, options, width, seed) shares one run."""
    options = "_".join(f"{k}{v}" for k, v in sorted(row["options"].items()))
    return f"{row['method']}_{options}_d{row['d']}_seed{seed}"


def run_config(row: dict[str, Any], seed: int, extra: list[str]) -> dict[str, Any]:
    """The resolved run config, composed from ``conf/`` as ``run.py task=ar ...`` would."""
    overrides = ["task=ar", f"attention={row['method']}", f"seed={seed}", f"model.dim={row['d']}",
                 f"model.ffn_dim={2 * row['d']}", "tag=ar_ablation", "trainer.enable_progress_bar=false",
                 *(f"attention.{k}={v}" for k, v in row["options"].items()), *extra]
    cfg = compose(overrides)
    cfg["analysis"] = NAME  # results.collect leaves runs of an analysis to its own table
    return cfg


def summarise(rows: list[dict[str, Any]], records: dict[str, list[dict[str, Any]]], m: int) -> list[dict]:
    """Table rows: accuracy on queries (%), mean over the seeds that completed."""
    table = []
    for row in rows:
        done = [r for r in records[row["key"]] if r.get("status") == "completed"]
        accs = [100 * r["metrics"]["test_acc"] for r in done]
        table.append({
            "setting": row["setting"], "method": row["method"], "p": row.get("p"),
            "m": m if row["method"] == "llops" else None, "d": row["d"], "r": row.get("r"),
            "accuracy": statistics.fmean(accs) if accs else None,
            "std": statistics.stdev(accs) if len(accs) > 1 else None, "seeds": len(accs),
            "majority": 100 * done[0]["metrics"]["majority_acc"] if done else None,
            "wall_s": round(sum(r.get("wall_time_s", 0) for r in done), 1),
        })
    return table


def plot(table: list[dict[str, Any]], path: Path) -> Path:
    """Accuracy per LLoPS degree (left) and BASED vs LLoPS per width (right)."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    degree = [r for r in table if r["setting"] == "degree" and r["accuracy"] is not None]
    left.bar([f"p={r['p']}" for r in degree], [r["accuracy"] for r in degree], color="tab:blue")
    left.set(title=f"LLoPS degree (d={degree[0]['d'] if degree else '?'})", ylabel="query accuracy (%)")
    width = [r for r in table if r["setting"] != "degree" and r["accuracy"] is not None]
    labels = [f"{r['method']}\nd={r['d']}" for r in width]
    colors = ["tab:orange" if r["method"] == "based" else "tab:blue" for r in width]
    right.bar(labels, [r["accuracy"] for r in width], color=colors)
    right.set(title="BASED (r=16) vs LLoPS (p=4)")
    for ax in (left, right):
        ax.set_ylim(0, 100)
    return save(fig, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.ar_ablation", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="seeds per run (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default 2)")
    parser.add_argument("--features", type=int, default=64, help="LLoPS m (default 64; the paper's 256 is 4x slower)")
    parser.add_argument("--steps", type=int, default=1500, help="training steps per run (default 1500)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3)")
    parser.add_argument("--widths", type=int, nargs=2, default=(64, 96), help="narrow and wide model width")
    parser.add_argument("--degrees", type=int, nargs="+", default=(2, 4, 6))
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke version (tests)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="records go to OUT_ROOT/ar_ablation/")
    parser.add_argument("--tables", default="results/tables", help="where the table and PNG go")
    parser.add_argument("overrides", nargs="*", help="extra run.py overrides, e.g. task.max_steps=4000")
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str], dict[str, tuple[dict, Path]]]:
    """The table's rows, the overrides every run shares, and each training run: ``label: (config, folder)``."""
    schedule = [f"task.max_steps={args.steps}", f"task.optim.lr={args.lr}", "task.optim.warmup_steps=100"]
    extra = [*schedule, *(QUICK if args.quick else []), *args.overrides]
    rows = settings(args.features, tuple(args.widths), tuple(args.degrees))
    runs_dir = Path(args.out_root) / NAME / "runs"
    jobs: dict[str, tuple[dict, Path]] = {}
    for row in rows:
        row["key"] = run_label(row, 0)
        for seed in range(args.seeds):
            label = run_label(row, seed)
            if label not in jobs:
                cfg = run_config(row, seed, extra)
                jobs[label] = (cfg, run_folder(runs_dir, label, cfg))
    return rows, extra, jobs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    rows, extra, jobs = plan(args)
    print(f"{len(jobs)} training runs under {Path(args.out_root) / NAME / 'runs'}, {args.jobs} at a time",
          file=sys.stderr)
    done = train_all(jobs, args.jobs)
    records = {row["key"]: [done[run_label(row, s)] for s in range(args.seeds)] for row in rows}
    table = summarise(rows, records, args.features)
    failed = sorted(label for label, record in done.items() if record.get("status") != "completed")
    notes = [f"Ours: CPU scale, seq_len/pairs/vocab of conf/task/ar.yaml, widths {args.widths[0]} (row width128) "
             f"and {args.widths[1]} (row width192), m = {args.features}, {args.steps} steps at lr {args.lr}, "
             f"{args.seeds} seed(s); test accuracy on query positions (%)."]
    notes += [f"failed run: {label}" for label in failed]
    config = {"seeds": args.seeds, "features": args.features, "widths": list(args.widths),
              "degrees": list(args.degrees), "overrides": extra, "runs": sorted(jobs)}
    path = write_analysis_record(NAME, table, keys=["setting", "method", "p"], config=config, started=started,
                                 published="llops_ar_ablation", out_root=args.out_root, notes=notes)
    written = tabulate(NAME, path, args.tables)
    written.append(plot(table, Path(args.tables) / f"{NAME}.png"))
    print(Path(written[1]).read_text())
    print(f"record: {path}\nwrote {', '.join(map(str, written))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
