"""Where runs stand: ``python -m results.progress [RUN_ROOT ...]`` (default ``outputs``).

One line per run folder (a folder with Hydra's ``.hydra/config.yaml``): its state (completed, training now,
or stopped: rerunning its command resumes it from ``last.ckpt``), the step it has reached against its
``task.max_steps`` (a stopped run's: the step ``last.ckpt`` resumes from; else its last validation), best and last
validation accuracy, the step it escaped the plateau at (``results.escapes``; ``never`` for a completed run that
did not, ``not yet`` for one still going), and the pace of its last segment: validated steps per hour between the
first and last validation that segment's TensorBoard file records (validation and checkpoint time included), and the
hours of training left at that pace.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lra.run.record import RECORD_NAME
from lra_base.lock import live_holder
from results.collect import first_line
from results.curves import readable_curve
from results.escapes import ESCAPE_AT, escape_step
from results.markdown import markdown_table
from results.safe_read import read_limited

COLUMNS = ["run", "state", "step", "best val", "last val", "escaped at", "steps/h", "hours left"]


def run_folders(roots: list[str | Path]) -> list[Path]:
    """Folders below ``roots`` that hold a run's ``.hydra/config.yaml``, sorted."""
    found = {path.parent.parent for root in roots for path in Path(root).rglob("config.yaml")
             if path.parent.name == ".hydra" and path.is_file()}
    return sorted(found)


def setting(config, key: str):
    """``key`` of the saved (unresolved) config, or None when absent or an interpolation."""
    return OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)


def state(run_dir: Path) -> str:
    """``completed``, ``training (pid N)``, the record's status (interrupted, failed, diverged), ``stopped``
    (a checkpoint and no record: killed) or ``not started`` (neither)."""
    try:
        record = json.loads(read_limited(run_dir / RECORD_NAME))
    except ValueError:  # no record, or not a readable one (UnsafeFile is a ValueError)
        record = None
    status = record.get("status") if isinstance(record, dict) else None
    if status == "completed":
        return status
    if (pid := live_holder(run_dir)) is not None:
        return f"training (pid {pid})"
    if status:
        return str(status)
    return "stopped" if (run_dir / "checkpoints" / "last.ckpt").is_file() else "not started"


def segment_pace(run_dir: Path) -> float | None:
    """Steps per hour between the first and last validation of the newest TensorBoard file, or None."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"), key=lambda path: path.stat().st_mtime)
    if not files:
        return None
    events = EventAccumulator(str(files[-1]), size_guidance={"scalars": 0}).Reload()
    if "val/acc" not in events.Tags()["scalars"]:
        return None
    scalars = events.Scalars("val/acc")
    seconds, steps = scalars[-1].wall_time - scalars[0].wall_time, scalars[-1].step - scalars[0].step
    return 3600.0 * steps / seconds if seconds > 0 and steps > 0 else None


def resume_step(run_dir: Path) -> int | None:
    """The step a rerun resumes from: ``global_step`` of ``checkpoints/last.ckpt`` (a regular file), else None."""
    path = run_dir / "checkpoints" / "last.ckpt"
    if path.is_symlink() or not path.is_file():
        return None
    import torch

    try:
        step = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("global_step")
    except Exception as err:  # noqa: BLE001 - a torn or foreign file: say so, show the validated step
        print(f"warning: {path}: not a readable checkpoint ({first_line(err)})", file=sys.stderr)
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def progress_row(run_dir: Path, root: Path) -> dict:
    """One folder's line (see the module docstring)."""
    row = dict.fromkeys(COLUMNS, "")
    row.update(run=run_dir.relative_to(root).as_posix(), state=state(run_dir))
    path = run_dir / ".hydra" / "config.yaml"
    try:
        config = OmegaConf.load(path)
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as err:
        print(f"warning: {path}: not a readable config ({first_line(err)}); its task and max_steps are unknown",
              file=sys.stderr)
        config = OmegaConf.create()
    task, max_steps = setting(config, "task.name"), setting(config, "task.max_steps")
    curve = readable_curve(run_dir / RECORD_NAME)
    if not curve.empty:
        step = int(curve["step"].max())
        resumes = resume_step(run_dir) if row["state"] != "completed" else None
        step = max(step, resumes) if resumes is not None else step  # where a rerun continues, not the last validation
        row.update({"step": f"{step:,}" + (f" / {int(max_steps):,}" if isinstance(max_steps, int) else ""),
                    "best val": f"{100 * curve['val_acc'].max():.2f}",
                    "last val": f"{100 * curve['val_acc'].iloc[-1]:.2f}"})
        if task in ESCAPE_AT:
            escaped = escape_step(curve, ESCAPE_AT[task])
            never = "never" if row["state"] == "completed" else "not yet"
            row["escaped at"] = never if escaped is None else f"{escaped:,}"
        pace = segment_pace(run_dir) if row["state"] != "completed" else None
        if pace:
            row["steps/h"] = f"{pace:,.0f}"
            if isinstance(max_steps, int) and max_steps > step:
                row["hours left"] = f"{(max_steps - step) / pace:.2f}"
    return row


def progress_table(roots: list[str | Path]) -> pd.DataFrame:
    """Every run folder below ``roots``, one row each (``COLUMNS``)."""
    rows = [progress_row(folder, Path(root)) for root in roots for folder in run_folders([root])]
    return pd.DataFrame(rows, columns=COLUMNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m results.progress", description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=["outputs"], metavar="RUN_ROOT",
                        help="directories searched recursively for run folders (default: outputs)")
    args = parser.parse_args(argv)
    missing = [root for root in args.roots if not Path(root).is_dir()]
    if missing:
        print(f"error: no such directory: {', '.join(missing)} (runs write below outputs/ by default)",
              file=sys.stderr)
        return 2
    table = progress_table(args.roots)
    if table.empty:
        print(f"No run folders (with .hydra/config.yaml) under {', '.join(args.roots)}.")
        return 0
    print(markdown_table(COLUMNS, table.astype(str).values.tolist()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
