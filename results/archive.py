"""`python -m results.archive RUN_DIR ...`: copy finished runs' records into `results/runs/` to be committed.

Checkpoints stay behind; `result.json` and the learning curve (`csv/metrics.csv`, stored as `metrics.csv`) are
copied to `results/runs/<path of the run folder below outputs/>/`, so the committed tables and curves can be
rebuilt on a fresh clone (`python -m results --committed`). Only completed runs are archived, unless
`--unfinished`: then also a run stopped by SIGTERM or Ctrl-C (status `interrupted`), so that its curve so far
outlives the machine its checkpoint is on. The tables list such a run as unfinished, never average it, and its
completed record, archived later, takes its place.

The destination is built from name parts that are each one plain folder name (a record's task, attention or
tag of `..` or `/etc` is refused) and must stay under `--to` once links are resolved. Files are read only when
they are regular files (never through a link) and written atomically, never through a link, so a failed or cut
write (a full disk, `ulimit -f`) leaves an earlier archive whole.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lra.atomic import read_regular, write_atomic
from lra.record import INTERRUPTED, completed_record
from lra.run_files import COMMITTED_RUNS, METRICS_NAMES, archive_path


def metrics_file(run_dir: Path) -> Path | None:
    """The run's `metrics.csv` (as `results.curves` finds it), a link or FIFO there included; None when absent."""
    return next((run_dir / name for name in METRICS_NAMES if os.path.lexists(run_dir / name)), None)


def archive(run_dir: Path, dest_root: Path = COMMITTED_RUNS, *, unfinished: bool = False) -> Path:
    """Copy one completed run's record and metrics (with `unfinished`, an interrupted run's too); returns the
    destination folder."""
    record_file = run_dir / "result.json"
    if unfinished and not os.path.lexists(record_file):
        raise ValueError(f"{record_file} is missing: a run still training writes it when it stops; stop it with "
                         f"SIGTERM (it saves last.ckpt and records status {INTERRUPTED!r}), then archive it")
    record_bytes = read_regular(record_file)
    record = json.loads(record_bytes)
    allowed = ("completed", INTERRUPTED) if unfinished else ("completed",)
    if not isinstance(record, dict) or record.get("status") not in allowed:
        status = record.get("status") if isinstance(record, dict) else None
        hint = " and, with --unfinished, interrupted ones" if unfinished else ""
        raise ValueError(f"{record_file}: status {status!r}; only completed runs{hint} are archived")
    dest = archive_path(run_dir, record, dest_root)
    if record["status"] == INTERRUPTED and completed_record(dest) is not None:
        raise ValueError(f"{dest} holds this run's completed record; an unfinished one does not replace it")
    metrics = metrics_file(run_dir)
    files = {"result.json": record_bytes, **({"metrics.csv": read_regular(metrics)} if metrics else {})}
    for name, data in files.items():  # everything is read (and a link refused) before anything is written
        write_atomic(dest / name, data)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m results.archive", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run folders holding result.json")
    parser.add_argument("--to", type=Path, default=COMMITTED_RUNS, help="destination (default: results/runs)")
    parser.add_argument("--unfinished", action="store_true",
                        help="also archive interrupted runs (listed as unfinished, never averaged)")
    args = parser.parse_args(argv)
    status = 0
    for run_dir in args.run_dirs:
        try:
            print(f"{run_dir} -> {archive(run_dir, args.to, unfinished=args.unfinished)}")
        except (OSError, ValueError, KeyError) as err:
            print(f"error: {run_dir}: {err}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
