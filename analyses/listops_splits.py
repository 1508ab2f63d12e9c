"""How far can the test split alone move a ListOps number? ``python -m analyses.listops_splits [--splits N]
[--data-dir DIR] [--out-root DIR] [--tables DIR | --committed]``

Our test split is one draw of 2,000 trees by LRA's generator rules (docs/protocol.md section 3), the ports' (the
official release) another. This draws ``N`` fresh test splits of the protocol's size and rules (lengths 500-2,000,
depth <= 10, <= 10 arguments; generator seeds 1..N, ours is seed 0's last 2,000 trees) and scores on each what
needs no training, so the spread is the split's alone:

- ``rule``: the root-operator rule fitted on our train split (``results.rules``; 34.70% on our test split);
- ``ceiling``: the most frequent label per root fitted on the split itself, the most any predictor of the root
  alone can score there (36.80% on ours);
- ``majority``: the split's most frequent label.

Rows: mean, sample std, min, 5th / 50th / 95th percentile and max over the fresh splits, then our committed split
(``ours``) and its percentile among them. Every fresh split's values go to ``splits.csv`` beside the record. A
fresh split may share a tree with our train split (a few in a million at these lengths): it is kept, as a new draw
of the official generator would keep it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from data_prep.compact import load_manifest, load_split
from data_prep.listops import sample_trees
from data_prep.listops_roots import fit_root_rule, label_per_root, predict_by_root
from lra.run.outputs import TABLES
from lra_base.atomic import write_atomic

from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

NAME = "listops_splits"
COLUMNS = ("rule", "ceiling", "majority")
RULES = {"min_length": 500, "max_length": 2000, "max_depth": 10, "max_args": 10}  # data_prep listops's defaults
STATISTICS = ("mean", "std", "min", "p5", "p50", "p95", "max")


def scores(first: np.ndarray, labels: np.ndarray, rule: tuple[dict[int, int], int]) -> dict[str, float]:
    """The rule's, the ceiling's and the majority's accuracy (%) on one split (first tokens and labels)."""
    table, fallback = rule
    own = label_per_root(first, labels)
    return {"rule": 100 * float((predict_by_root(table, first, fallback) == labels).mean()),
            "ceiling": 100 * float((predict_by_root(own, first, fallback) == labels).mean()),
            "majority": 100 * float(np.bincount(labels).max() / labels.size)}


def fresh_split(seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """First tokens and labels of ``size`` trees drawn by the protocol's rules with generator seed ``seed``."""
    tokens, offsets, labels, _ = sample_trees(size, seed=seed, log=lambda _: None, **RULES)
    return tokens[offsets[:-1]].astype(np.int64), labels


def summary_rows(frame: pd.DataFrame, ours: dict[str, float]) -> list[dict]:
    """One row per statistic over the fresh splits, then ours and its percentile (the share of fresh splits that
    score below it, ties counted half)."""
    described = {"mean": frame.mean(), "std": frame.std(ddof=1), "min": frame.min(), "max": frame.max(),
                 **{f"p{q}": frame.quantile(q / 100) for q in (5, 50, 95)}}
    rows = [{"statistic": name, **{c: round(float(described[name][c]), 4) for c in COLUMNS}} for name in STATISTICS]
    rows.append({"statistic": "ours", **{c: round(ours[c], 4) for c in COLUMNS}})
    below = {c: float(((frame[c] < ours[c]).sum() + 0.5 * (frame[c] == ours[c]).sum()) / len(frame)) for c in COLUMNS}
    rows.append({"statistic": "ours: percentile", **{c: round(100 * below[c], 1) for c in COLUMNS}})
    return rows


def measure(data_dir: Path, count: int) -> tuple[list[dict], pd.DataFrame, dict]:
    """The summary rows, every fresh split's scores, and the config (data digests, sizes, seeds)."""
    task_dir = data_dir / "listops"
    rebuild = f"python -m data_prep listops --out {data_dir}"
    train, test = (load_split(task_dir, split, rebuild_cmd=rebuild) for split in ("train", "test"))
    rule = fit_root_rule(train.tokens[train.offsets[:-1]].astype(np.int64), train.labels)
    ours = scores(test.tokens[test.offsets[:-1]].astype(np.int64), np.asarray(test.labels, np.int64), rule)
    fresh = pd.DataFrame([{"seed": seed, **scores(*fresh_split(seed, len(test)), rule)}
                          for seed in range(1, count + 1)])
    manifest = load_manifest(task_dir, rebuild_cmd=rebuild)
    config = {"splits": count, "split_size": len(test), "seeds": [1, count], **RULES,
              "data": {split: manifest["splits"][split]["sha256"] for split in ("train", "test")}}
    return summary_rows(fresh[list(COLUMNS)], ours), fresh, config


def notes(rows: list[dict], count: int, size: int) -> list[str]:
    by = {row["statistic"]: row for row in rows}
    spread = ", ".join(f"{c} {by['mean'][c]:.2f} ± {by['std'][c]:.2f} (range {by['min'][c]:.2f}-{by['max'][c]:.2f}; "
                       f"ours {by['ours'][c]:.2f}, percentile {by['ours: percentile'][c]:.0f})" for c in COLUMNS)
    return [f"{count} fresh test splits of {size} trees by the protocol's generator rules (seeds 1-{count}), in % "
            f"of a split: {spread}.",
            "rule: the root-operator rule fitted on our train split; ceiling: the best root-only predictor, fitted "
            "on each split itself; majority: each split's most frequent label. No model is trained: the spread is "
            "the split's alone."]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.listops_splits", description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=200, help="fresh test splits to draw (default 200)")
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="our generated ListOps (train, test)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="the record goes to OUT_ROOT/listops_splits/")
    TABLES.add_to(parser)
    args = parser.parse_args(argv)
    if args.splits < 2:
        parser.error("--splits must be at least 2 (a spread needs two)")
    args.tables = TABLES.choose(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    rows, fresh, config = measure(args.data_dir, args.splits)
    path = write_analysis_record(NAME, rows, keys=["statistic"], config=config, started=started,
                                 out_root=args.out_root, notes=notes(rows, args.splits, config["split_size"]))
    write_atomic(path.parent / "splits.csv", fresh.to_csv(index=False, float_format="%.4f"))
    tables = tabulate(NAME, path, args.tables)
    print(Path(tables[1]).read_text(encoding="utf-8"))
    print(f"wrote {path}, {path.parent / 'splits.csv'}, {', '.join(map(str, tables))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
