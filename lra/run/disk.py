"""A full disk said in one line: the folder being written, its file system and free space, and the way on."""

from __future__ import annotations

import errno
import os
import resource
import shutil
from pathlib import Path

from lra_base.errors import UserError

FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no space left, disk quota exceeded, file size limit (ulimit -f)


class DiskFull(UserError):
    """A write failed because the disk (or the quota) holding the run folder is full."""


def full_disk_error(error: BaseException | None) -> OSError | None:
    """The ENOSPC/EDQUOT ``OSError`` behind ``error`` (itself, its cause or its context), else None.

    Libraries wrap it: TensorBoard's logger raises ``ValueError("you tried to log ...")`` from it, and ``torch.save``
    a ``RuntimeError`` ("unexpected pos") while handling it."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in FULL:
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (its nearest existing folder)."""
    path = Path(os.path.abspath(path))
    while not path.exists():
        path = path.parent
    while not os.path.ismount(path):
        path = path.parent
    return path


def file_size_limit() -> int | None:
    """This process's largest file in bytes (``ulimit -f``), or None when unlimited."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if limit == resource.RLIM_INFINITY else limit


def disk_full(folder: Path, writing: str) -> DiskFull:
    """The one-line error for a full disk (or a file grown to the process's file size limit) under ``folder``
    while writing ``writing``."""
    mount = mount_point(folder)
    try:
        free = f", {shutil.disk_usage(mount).free / 2**20:,.0f} MiB free"
    except OSError:
        free = ""
    if (limit := file_size_limit()) is not None:
        return DiskFull(f"no space left on the disk holding {folder} (file system {mount}{free}), or a file reached "
                        f"this process's file size limit ({limit:,} bytes: ulimit -f), while writing {writing}: free "
                        f"space there or raise the limit (ulimit -f unlimited), then rerun the same command to resume "
                        f"from the last checkpoint")
    return DiskFull(f"no space left on the disk holding {folder} (file system {mount}{free}) while writing "
                    f"{writing}: free space there, then rerun the same command to resume from the last checkpoint")
