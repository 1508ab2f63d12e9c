"""Read a record file only when it is a regular file below a size limit: never a FIFO, a device or a symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

RECORD_LIMIT = 16 * 2**20  # bytes; the largest committed result.json is about 60 KB
CSV_LIMIT = 64 * 2**20  # a metrics.csv of a 5,000-step run is about 12 KB


class UnsafeFile(ValueError):
    """A file that is not read: a symlink, not a regular file, or larger than the limit."""


def read_limited(path: str | Path, limit: int = RECORD_LIMIT) -> str:
    """The UTF-8 text of ``path``; ``UnsafeFile`` unless it is a regular file (not a symlink) of at most ``limit``
    bytes. The file is opened without following a symlink or waiting for a FIFO's writer, checked with fstat, and
    at most ``limit + 1`` bytes are read, so a file that grows while it is read is refused too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if os.path.islink(path):
            raise UnsafeFile("a symbolic link, not a regular file (copy the file it points to)") from None
        raise UnsafeFile(f"cannot open: {err.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile("not a regular file (a FIFO, a device or a socket)")
        if info.st_size > limit:
            raise UnsafeFile(f"{info.st_size} bytes, over the {limit}-byte limit")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"over the {limit}-byte limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnsafeFile(f"not UTF-8 text: {err}") from None
