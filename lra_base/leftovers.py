"""What a killed process leaves behind, removed by the next command that writes in that place.

A process killed with ``kill -9`` (or by the kernel, out of memory) runs no ``finally``: its temporary files
(``lra_base.atomic``'s ``.<name>.<random>.tmp``, a checkpoint's 180 MB), its staging folders (``data_prep.staging``'s
``.<task>.<random>.staging``) and, in a run folder, the best checkpoint it saved after its last ``last.ckpt`` (which the
resumed run saves again as ``best-step<N>-v1.ckpt``, and again ``-v2`` after the next kill) stay on disk. Each writer
holds ``flock`` on what it writes while it lives (``lra_base.lock.holding``), so a leftover is one that nobody holds
(``lra_base.lock.in_use``) and that has not changed for ``QUIET_S`` seconds (a file made an instant ago, not yet locked,
or one an older version of this code writes without the lock, is left alone). Standard library only, except
``remove_orphan_checkpoints`` (torch, imported there).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path

from .lock import in_use

QUIET_S = 60.0  # seconds without a change before an unlocked temporary file or staging folder counts as dead
# lra_base.atomic's temporary files (tempfile.mkstemp's 8 characters)
TEMP = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")
STAGING = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.staging$")  # data_prep.staging's folders
# lra.run.train's best checkpoints (best-step{step}, Lightning's -vN)
BEST = re.compile(r"^best-step\d+(-v\d+)?\.ckpt$")
RUN_SUBFOLDERS = ("", "checkpoints", "csv", "tensorboard")  # where a run writes through lra_base.atomic


def dead(path: Path, now: float | None = None) -> bool:
    """``path`` is a leftover: unchanged for ``QUIET_S`` seconds and held by no live process."""
    try:
        changed = os.lstat(path).st_mtime
    except OSError:
        return False
    return (now or time.time()) - changed >= QUIET_S and not in_use(path)


def remove_dead_temps(folder: str | Path) -> list[Path]:
    """Remove the temporary files of ``lra_base.atomic`` in ``folder`` whose writer died; the paths removed. Never
    raises: a folder that cannot be read or a file that cannot be removed is left as it is."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            path = Path(entry.path)
            if TEMP.match(entry.name) and entry.is_file(follow_symlinks=False) and dead(path):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def remove_dead_staging(folder: str | Path) -> list[Path]:
    """Remove the staging folders of ``data_prep.staging`` in ``folder`` whose writer died; the paths removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            path = Path(entry.path)
            if STAGING.match(entry.name) and entry.is_dir(follow_symlinks=False) and dead(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def referenced_checkpoints(last: Path) -> set[str] | None:
    """The checkpoint file names ``last.ckpt``'s ModelCheckpoint states name (best, k-th best, last); an empty set
    without a ``last.ckpt``, None when it cannot be read (then nothing is taken for an orphan)."""
    if not last.exists():
        return set()
    import torch

    try:
        saved = torch.load(last, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # damaged: the resume names it (lra.run.checkpoints.resume_point)
        return None
    names = set()
    for state in (saved.get("callbacks") or {}).values():
        if isinstance(state, dict):
            paths = [state.get(key) for key in ("best_model_path", "kth_best_model_path", "last_model_path")]
            paths += list(state.get("best_k_models") or {})
            names.update(Path(p).name for p in paths if isinstance(p, str) and p)
    return names


def remove_orphan_checkpoints(run_dir: str | Path) -> list[Path]:
    """Remove the best checkpoints of ``run_dir`` that its ``last.ckpt`` does not name (all of them when it has
    none): saved by a run killed before its next ``last.ckpt``, they are never tested, and the resumed run would
    save its own as ``-v1`` beside them. Call it holding the folder's ``run.lock``; the paths removed."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    if not ckpt_dir.is_dir() or (kept := referenced_checkpoints(ckpt_dir / "last.ckpt")) is None:
        return []
    removed = []
    for path in sorted(ckpt_dir.iterdir()):
        if BEST.match(path.name) and path.name not in kept and path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed


def remove_leftovers(run_dir: str | Path) -> list[Path]:
    """Everything a killed run left in ``run_dir`` (temporary files, orphan best checkpoints); call it holding the
    folder's ``run.lock``, before training. The paths removed."""
    run_dir = Path(run_dir)
    removed = [path for sub in RUN_SUBFOLDERS for path in remove_dead_temps(run_dir / sub)]
    return removed + remove_orphan_checkpoints(run_dir)
