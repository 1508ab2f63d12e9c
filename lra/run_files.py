"""Where a run's files are: its curve in its own folder, and its committed copy under ``results/runs/``.

``lra.train`` writes a run folder (``result.json``, ``csv/metrics.csv`` from Lightning's CSVLogger, checkpoints);
``python -m results.archive`` commits its record and curve to ``results/runs/<path of the folder below
outputs/>/`` (``metrics.csv`` there). Both the tables (``results``) and the analyses that reuse committed runs
(``analyses._runs``) find files by these rules, so they live here, below both.
"""

from __future__ import annotations

import os
from pathlib import Path

COMMITTED_RUNS = Path(__file__).resolve().parents[1] / "results" / "runs"
METRICS_NAMES = ("csv/metrics.csv", "metrics.csv")  # a run folder (Lightning's CSVLogger), an archived run


def metrics_path(record_path: str | Path) -> Path | None:
    """The ``metrics.csv`` beside a ``result.json`` (in a run folder or an archived copy), or None."""
    folder = Path(record_path).parent
    return next((folder / name for name in METRICS_NAMES if (folder / name).is_file()), None)


def name_part(value: object, field: str) -> str:
    """`value` as one folder name; ValueError naming `field` for `..`, `.`, an empty or absolute name or a `/`."""
    text = str(value)
    if text in ("", ".", "..") or "/" in text or "\0" in text or (os.sep != "/" and os.sep in text):
        raise ValueError(f"{field} {text!r} is not a plain folder name, so the archive path would leave the "
                         f"destination; fix the record's {field} (or archive the run from below an outputs/ folder)")
    return text


def archive_path(run_dir: Path, record: dict, dest_root: Path) -> Path:
    """Where a run folder goes: its path below an `outputs` folder, else task/attention/seed/tag; always a folder
    under `dest_root` (ValueError otherwise)."""
    parts = run_dir.resolve().parts
    if "outputs" in parts:
        below = [name_part(part, "folder name") for part in parts[len(parts) - parts[::-1].index("outputs"):]]
    else:
        seed = record["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed {seed!r} is not an integer; fix the record's seed")
        below = [name_part(record["task"], "task"), name_part(record["attention"], "attention"), f"seed{seed}",
                 name_part(record.get("tag"), "tag")]
    if not below:
        raise ValueError(f"{run_dir} is an outputs folder itself, not a run folder below it")
    dest = dest_root.joinpath(*below)
    root = dest_root.resolve()
    if not dest.resolve().is_relative_to(root):
        raise ValueError(f"{dest} leads outside {root} (through a link); archive into a folder without links")
    return dest
