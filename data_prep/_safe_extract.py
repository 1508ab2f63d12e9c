"""Unpacking a gzip'd tar as a stream, taking only the members asked for, refusing every unsafe entry.

The archive is read once from start to end (``tarfile`` stream mode over ``gzip``: the 7.7 GB LRA release is never
held or listed whole), then read to its end so that gzip checks its CRC-32 and length trailer, which catches a
damaged download of an archive that has no published checksum. Any entry that is a symbolic or hard link, a device
or FIFO, an absolute path or a path with a ``..`` component makes the whole archive refused (``UnsafeArchive``), even
one that would not be taken: no official archive has one. Taken files are written as plain files (no modes, owners
or times from the archive) into ``dest``, a fresh folder the caller removes on failure, where no link can exist.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from data_prep.compact import DataError

CHUNK = 1 << 20


class UnsafeArchive(DataError):
    """An archive holds an entry that could write outside its folder or through a link."""


class DamagedArchive(DataError):
    """An archive is not a whole gzip'd tar."""


def safe_name(member: tarfile.TarInfo, archive: Path) -> str | None:
    """The member's path, normalised (``a/b/c``); None for a folder entry; ``UnsafeArchive`` naming the entry when
    it is a link, a device or FIFO, absolute or leads up with ``..``."""
    name = member.name
    why = None
    if member.issym() or member.islnk():
        why = f"a {'symbolic' if member.issym() else 'hard'} link (to {member.linkname!r})"
    elif member.isdev():
        why = "a device or FIFO"
    elif name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        why = "an absolute path"
    elif ".." in PurePosixPath(name.replace("\\", "/")).parts:
        why = "a path leading out of the folder (..)"
    elif not (member.isfile() or member.isdir()):
        why = f"an entry of an unsupported type ({member.type!r})"
    if why:
        raise UnsafeArchive(f"{archive}: entry {name!r} is {why}; an official archive has none, so nothing of it "
                            f"is unpacked: this is not the official file")
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if not parts:
        return None
    return None if member.isdir() else "/".join(parts)


class Counting:
    """A read-only file wrapper that reports how many bytes were read (for a progress bar)."""

    def __init__(self, raw, update: Callable[[int], object]):
        self.raw, self.update = raw, update

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.update(len(data))
        return data


def stream_extract(archive: Path, dest: Path, select: Callable[[str], str | None],
                   update: Callable[[int], object] = lambda count: None) -> int:
    """Write every regular file of ``archive`` for which ``select(name)`` gives a relative path, to ``dest/<that
    path>``; the number of files written. ``update`` is told the compressed bytes read.

    ``UnsafeArchive`` for an unsafe entry, ``DamagedArchive`` when the file is not a whole gzip'd tar."""
    archive, dest = Path(archive), Path(dest)
    written = 0
    fd = os.open(archive, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.fdopen(fd, "rb") as raw, gzip.GzipFile(fileobj=Counting(raw, update), mode="rb") as unzipped:
            with tarfile.open(fileobj=unzipped, mode="r|") as tar:
                for member in tar:
                    name = safe_name(member, archive)
                    target = select(name) if name is not None else None
                    if target is None:
                        continue
                    write_member(tar, member, dest, target, archive)
                    written += 1
            while unzipped.read(CHUNK):  # to the end: gzip checks its CRC-32 and length there
                pass
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise DamagedArchive(f"{archive}: not a whole gzip'd tar ({type(err).__name__}: {err}): the file is damaged "
                             f"or not the official archive") from None
    return written


def write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, target: str, archive: Path) -> None:
    """Copy one regular member to ``dest/target`` (a new file; a name seen twice is refused)."""
    path = dest.joinpath(*PurePosixPath(target).parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    try:
        with open(path, "xb") as f:
            shutil.copyfileobj(source, f, CHUNK)
    except FileExistsError:
        raise UnsafeArchive(f"{archive}: entry {member.name!r} appears twice; an official archive has each file "
                            f"once: this is not the official file") from None
    except IsADirectoryError:
        raise UnsafeArchive(f"{archive}: entry {member.name!r} is both a folder and a file") from None
