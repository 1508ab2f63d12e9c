"""`python -m results.archive RUN_DIR ...`: copy finished runs' records into `results/runs/` to be committed.

Checkpoints stay behind; `result.json` and the learning curve (`csv/metrics.csv`, stored as `metrics.csv`) are
copied to `results/runs/<path of the run folder below outputs/>/`, so the committed tables and curves can be
rebuilt on a fresh clone (`python -m results --committed`). Only completed runs are archived.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from results.curves import metrics_path

COMMITTED_RUNS = Path(__file__).resolve().parent / "runs"


def archive_path(run_dir: Path, record: dict, dest_root: Path) -> Path:
    """Where a run folder goes: its path below an `outputs` folder, else task/attention/seed/tag."""
    parts = run_dir.resolve().parts
    if "outputs" in parts:
        below = parts[len(parts) - parts[::-1].index("outputs"):]
        return dest_root.joinpath(*below)
    return dest_root / record["task"] / record["attention"] / f"seed{record['seed']}" / str(record.get("tag"))


def archive(run_dir: Path, dest_root: Path = COMMITTED_RUNS) -> Path:
    """Copy one completed run's record and metrics; returns the destination folder."""
    record_file = run_dir / "result.json"
    record = json.loads(record_file.read_text(encoding="utf-8"))
    if record.get("status") != "completed":
        raise ValueError(f"{record_file}: status {record.get('status')!r}; only completed runs are archived")
    dest = archive_path(run_dir, record, dest_root)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(record_file, dest / "result.json")
    if (metrics := metrics_path(record_file)) is not None:
        shutil.copyfile(metrics, dest / "metrics.csv")
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m results.archive", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders holding result.json")
    parser.add_argument("--to", type=Path, default=COMMITTED_RUNS, help="destination (default: results/runs)")
    args = parser.parse_args(argv)
    status = 0
    for run_dir in args.run_dirs:
        try:
            print(f"{run_dir} -> {archive(run_dir, args.to)}")
        except (OSError, ValueError, KeyError) as err:
            print(f"error: {run_dir}: {err}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
