"""`python -m results.archive RUN_DIR ...`: copy finished runs' records into `results/runs/` to be committed.

Checkpoints stay behind; `result.json` and the learning curve (`csv/metrics.csv`, stored as `metrics.csv`) are
copied to `results/runs/<path of the run folder below outputs/>/`, so the committed tables and curves can be
rebuilt on a fresh clone (`python -m results --committed`). Only completed runs are archived, unless
`--unfinished`: then also a run stopped by SIGTERM or Ctrl-C (status `interrupted`), so that its curve so far
outlives the machine its checkpoint is on. The tables list such a run as unfinished, never average it, and its
completed record, archived later, takes its place.

The destination is built from name parts that are each one plain folder name (a record's task, attention or
tag of `..` or `/etc` is refused) and must stay under `--to` once links are resolved. Files are read only when
they are regular files (never through a link), and the record and its curve change together or not at all
(`replace_pair`): a failed or cut write (a full disk, `ulimit -f`) leaves an earlier archive whole, never a new
record beside an old curve. A run that `rerun=true` set aside (`<run folder>/replaced/<time>/`) is not archived:
the tables never count it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lra.run.record import INTERRUPTED, RECORD_NAME, completed_record
from lra.run.run_files import COMMITTED_RUNS, METRICS_NAMES, SET_ASIDE, archive_path, is_set_aside
from lra_base.atomic import read_regular, refuse_link, write_atomic

CURVE = "metrics.csv"
PAIR = (CURVE, RECORD_NAME)  # the order they are written and moved in: the curve first, the record last


def metrics_file(run_dir: Path) -> Path | None:
    """The run's `metrics.csv` (as `results.curves` finds it), a link or FIFO there included; None when absent."""
    return next((run_dir / name for name in METRICS_NAMES if os.path.lexists(run_dir / name)), None)


def move_in(stage: Path, dest: Path) -> None:
    """Move the pair written in `stage` into `dest` by renames (no new space needed): the old record leaves first
    (into `stage/old`), then the curve is replaced (or removed when `stage` has none), the record comes in last; a
    rename that fails puts the old files back."""
    old = stage / "old"
    old.mkdir()
    dest.mkdir(exist_ok=True)
    moved, placed = [], []
    try:
        for name in reversed(PAIR):
            if os.path.lexists(dest / name):
                os.rename(dest / name, old / name)
                moved.append(name)
        for name in PAIR:
            if os.path.lexists(stage / name):
                os.rename(stage / name, dest / name)
                placed.append(name)
    except BaseException:
        for name in placed:
            (dest / name).unlink(missing_ok=True)
        for name in reversed(moved):  # the curve back before the record
            os.rename(old / name, dest / name)
        raise


def replace_pair(dest: Path, files: dict[str, bytes]) -> None:
    """Make `files` (name in `PAIR` -> bytes) the record and curve in `dest`, together or not at all; a name of
    `PAIR` absent from `files` is removed from `dest`, so a new record never keeps an old curve.

    Both are written in full, the curve first and the record last, to a hidden staging folder beside `dest` (the
    same file system; `results.collect` searches no hidden folder), so a write that fails (a full disk, `ulimit
    -f`) leaves `dest` as it was; then `move_in` swaps them in. A reader finds the old pair, for a moment no record
    (the run absent, never half of it), or the new pair. Files in `dest` that are links are refused by name."""
    for name in PAIR:
        refuse_link(dest / name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".staging", dir=dest.parent))  # data_prep's form
    try:
        for name in [name for name in PAIR if name in files]:
            write_atomic(stage / name, files[name])
        move_in(stage, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def archive(run_dir: Path, dest_root: Path = COMMITTED_RUNS, *, unfinished: bool = False) -> Path:
    """Copy one completed run's record and metrics (with `unfinished`, an interrupted run's too); returns the
    destination folder."""
    record_file = run_dir / RECORD_NAME
    if is_set_aside(record_file):
        raise ValueError(f"{run_dir} holds a run that rerun=true set aside ({SET_ASIDE}/<time>/): the tables never "
                         f"count it, so it is not archived; archive its run folder {run_dir.parent.parent} instead")
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
    files = {RECORD_NAME: record_bytes, **({CURVE: read_regular(metrics)} if metrics else {})}
    replace_pair(dest, files)  # everything is read (and a link refused) before anything is written
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
