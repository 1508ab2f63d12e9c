"""Writing a task folder safely: build it aside, then swap it in.

A generator or importer writes ``OUT/<task>/`` through :func:`staged_task_dir`: every file goes to a hidden
folder beside it first, and only when all of them (manifest last) are written do they replace the old ones.
An import that fails half way, on a bad line or a missing file, leaves the data already there as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from data_prep.compact import MANIFEST_NAME, manifest_path


@contextlib.contextmanager
def staged_task_dir(task_dir: Path) -> Iterator[Path]:
    """Yield an empty folder to write the task into; on success its files replace those of ``task_dir``.

    Files of ``task_dir`` that the new data does not replace (a user's own, an old TSV export) are kept.
    """
    task_dir = Path(task_dir)
    task_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{task_dir.name}.", suffix=".staging", dir=task_dir.parent))
    try:
        yield stage
        publish(stage, task_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def publish(stage: Path, task_dir: Path) -> None:
    """Move the files of ``stage`` into ``task_dir``, the manifest last (a half-moved folder never loads)."""
    if not manifest_path(stage).is_file():
        raise RuntimeError(f"{stage}: no {MANIFEST_NAME} written; nothing is published")
    task_dir.mkdir(exist_ok=True)
    manifest_path(task_dir).unlink(missing_ok=True)
    names = sorted(p.name for p in stage.iterdir() if p.name != MANIFEST_NAME)
    for name in [*names, MANIFEST_NAME]:
        os.replace(stage / name, task_dir / name)

