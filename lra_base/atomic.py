"""The one atomic file writer: readers see the old content or the new, never half of it.

Every file the suite writes goes through ``atomic_output``: prepared data, run records (``result.json``),
metrics, checkpoints, tables, CSVs and figures (``save_figure``). The bytes go to a temporary file beside the
target, are flushed and fsynced, then renamed over it (``os.replace``: atomic within one folder); when the
write raises, the temporary file is removed and the target keeps its old content (or stays absent); one that a
killed writer left (``kill -9`` runs no cleanup) is removed by the next write in its folder (``lra_base.leftovers``).
The file gets the mode ``open()`` would give it under the process's umask (``mkstemp`` alone gives 0600). A target that
is a symbolic link is refused by name, and a file is read (``read_regular``) or copied (``copy_atomic``) only
when it is a regular file, never through a link.

Standard library only, so that ``data_prep``, ``results``, ``analyses`` and ``benchmarks`` import it without
loading torch (``lra/__init__.py`` imports nothing).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .leftovers import remove_dead_temps

LINK_FIX = ("this file is read and written only as a regular file, never through a link; remove the link (or "
            "replace it with a copy of its target) and run again")


class LinkRefused(OSError):
    """A file that is written or read only as a regular file is a symbolic link (or not a regular file).

    ``what`` says which, without the path (for lists that name the path themselves)."""

    what = "a symbolic link"


class TooLarge(ValueError):
    """A file read with a size limit is larger than the limit."""


def refused(path: str | Path, what: str, fix: str) -> LinkRefused:
    """``LinkRefused("<path> is <what>: <fix>")`` that keeps ``what``."""
    error = LinkRefused(f"{path} is {what}: {fix}")
    error.what = what
    return error


def umask_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def refuse_link(path: str | Path) -> None:
    """``LinkRefused`` naming ``path`` when it is a symbolic link (a folder above it may be one)."""
    if os.path.islink(path):
        raise refused(path, f"a symbolic link (to {os.readlink(path)})", LINK_FIX)


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path`` (folders made); on success it replaces ``path``, on error it is
    removed and ``path`` is left as it was.

    Text modes use UTF-8 and write newlines exactly as given. ``LinkRefused`` when ``path`` is a symbolic link.
    """
    path = Path(path)
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(path.parent)  # what writers killed with kill -9 left here (lra_base.leftovers)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    text_options = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until the rename: a live writer's file is never taken for a leftover
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, mode, **text_options) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)  # replaces a link made since the check, never writes through it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` atomically (text as UTF-8, newlines as given); returns ``path``.

    A table goes through here as text: ``write_atomic(path, frame.to_csv(index=False))``."""
    with atomic_output(path, "w" if isinstance(data, str) else "wb") as f:
        f.write(data)
    return Path(path)


def save_figure(fig: Any, path: str | Path, **savefig_options: Any) -> Path:
    """``fig.savefig`` into ``path`` atomically, in the format its suffix names (``.png``, ``.pdf``, ``.svg``);
    returns ``path``. ``fig`` is a matplotlib ``Figure``; the figure is left open."""
    path = Path(path)
    with atomic_output(path) as f:
        fig.savefig(f, format=path.suffix.lstrip(".").lower() or None, **savefig_options)
    return path


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of ``path``, opened without following a link or waiting on a FIFO.

    ``LinkRefused`` naming it when it is a symbolic link or not a regular file; ``TooLarge`` when ``limit`` is
    given and the file has more bytes (at most ``limit + 1`` are read, so a file that grows meanwhile is
    refused too); any other ``OSError`` of the open is the open's own."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        refuse_link(path)  # O_NOFOLLOW fails on a link: say so; any other failure is the open's own
        raise
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise refused(path, "not a regular file (a FIFO, a device or a socket)",
                          "only regular files are read: replace it with the file itself")
        if limit is None:
            return f.read()
        if info.st_size > limit:
            raise TooLarge(f"{info.st_size} bytes, over the {limit}-byte limit")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"over the {limit}-byte limit")
    return data


def copy_atomic(source: str | Path, target: str | Path) -> None:
    """Copy the regular file ``source`` to ``target`` atomically; neither is followed through a link."""
    write_atomic(target, read_regular(source))


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
