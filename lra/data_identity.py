"""Which data a run trains on: the SHA-256 of each split file, as the data folder's ``manifest.json`` records them.

A run's settings say where its data lives (``data_dir`` is where-or-how, ``lra.identity``), not what that folder
holds: two folders prepared with the same settings can hold other examples (an import of other files, a folder
prepared again by another version). So a run keeps the identity of its data in its checkpoints and its record,
and a resume or a completed folder asked for on other data is refused by name (``lra.run.same_run``). The split files'
checksums are compared, not the manifest's bytes: the manifest also names the folder it was written to, and the
same data moved elsewhere is the same data. No torch here: ``run.py`` checks before torch loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data_prep.compact import manifest_path

from .identity import digest

if TYPE_CHECKING:
    from .settings import Run

CHECKPOINT_KEY = "data"  # where a checkpoint keeps it (written by lra.module.ClassificationModule)


def task_data_dir(run: Run) -> Path:
    """``<task.data.root>/<task.name>``: the folder a run's data module reads (``lra.data.CompactDataModule``)."""
    return Path(run.task.data.root) / run.task.name


def data_identity(task_dir: Path) -> dict[str, Any] | None:
    """``{"path": task_dir, "splits": {split: sha256}}`` from ``task_dir``'s manifest; None when there is no readable
    manifest with checksums (data made in memory, as ``ar``'s, or not prepared yet: the data module prepares and
    checks it, and the run compares its identity again then)."""
    try:
        manifest = json.loads(manifest_path(task_dir).read_text(encoding="utf-8"))
        splits = {str(name): entry["sha256"] for name, entry in manifest["splits"].items()}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not splits or not all(isinstance(value, str) for value in splits.values()):
        return None
    return {"path": str(task_dir), "splits": dict(sorted(splits.items()))}


def other_data(trained: Any, now: Any) -> bool:
    """Whether two data identities hold other examples; never when either is unknown (None, or an older run's)."""
    if not isinstance(trained, dict) or not isinstance(now, dict):
        return False
    return trained.get("splits") != now.get("splits")


def describe_data(identity: dict[str, Any]) -> str:
    """``"/data/quick/listops (splits 1a2b3c4d5e6f)"``: the folder and a short digest of its split checksums."""
    return f"{identity.get('path')} (splits {digest(identity.get('splits'))})"
