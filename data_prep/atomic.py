"""The one atomic file writer: readers see the old content or the new, never half of it.

Prepared data, run records (``result.json``), metrics (``metrics.csv``), tables and copied files all go through
``atomic_output``: the bytes go to a temporary file beside the target, are flushed and fsynced, then renamed
over it (``os.replace``: atomic within one folder). The file gets the mode ``open()`` would give it under the
process's umask (``mkstemp`` alone gives 0600). A target that is a symbolic link is refused by name, and a file
copied (``copy_atomic``) is read only when it is a regular file, never through a link: nothing is written
through a link or published from one. It lives in ``data_prep``, the package every other one may import, and
needs the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


class LinkRefused(OSError):
    """A file that is written or read only as a regular file is a symbolic link (or not a regular file)."""


def umask_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def refuse_link(path: str | Path) -> None:
    """``LinkRefused`` naming ``path`` when it is a symbolic link (a folder above it may be one)."""
    if os.path.islink(path):
        raise LinkRefused(f"{path} is a symbolic link (to {os.readlink(path)}): this file is read and written only "
                          f"as a regular file, never through a link; remove the link (or replace it with a copy of "
                          f"its target) and run again")


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed.

    Text modes use UTF-8 and write newlines exactly as given. ``LinkRefused`` when ``path`` is a symbolic link.
    """
    path = Path(path)
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    text_options = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, mode, **text_options) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces a link made since the check, never writes through it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    with atomic_output(path, "w") as f:
        f.write(text)


def read_regular(path: str | Path) -> bytes:
    """The bytes of ``path``, opened without following a link or waiting on a FIFO; ``LinkRefused`` naming it
    when it is a symbolic link or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        refuse_link(path)  # O_NOFOLLOW fails on a link: say so; any other failure is the open's own
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise LinkRefused(f"{path} is not a regular file (a FIFO, a device or a socket); only regular files "
                              f"are read: replace it with the file itself")
        return f.read()


def copy_atomic(source: str | Path, target: str | Path) -> None:
    """Copy the regular file ``source`` to ``target`` atomically; neither is followed through a link."""
    data = read_regular(source)
    with atomic_output(target) as f:
        f.write(data)


class NotWritable(OSError):
    """A folder that files are to be written in cannot be written."""

    @classmethod
    def of(cls, folder: str | Path, reason: str, fix: str) -> NotWritable:
        return cls(f"{folder} is not writable ({reason}): make it writable (chmod -R u+w {folder}) or {fix}")


def check_writable(folder: str | Path, fix: str) -> None:
    """``NotWritable`` naming ``folder`` (or its nearest existing parent) when files cannot be created in it;
    ``fix`` says where else to write, e.g. ``"give another --out DIR"``."""
    existing = Path(os.path.abspath(folder))
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise NotWritable(f"{existing} is not a folder, so nothing can be written under it: {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            raise NotWritable(f"{existing} is not writable (a read-only file system): remount it read-write or {fix}")
        raise NotWritable.of(existing, "no permission to create files in it", fix)
