"""Opening the files an importer is given: regular files only, each under its task's size limit.

A source folder may hold anything under a file's name: a FIFO (``open`` waits for a writer forever), a character
device such as ``/dev/zero`` (a read never ends), a socket, a folder, or a link to any of them. Importers open their
files here. What the name leads to is checked with ``stat`` before anything is opened (so no device is ever opened),
then opened without waiting on a FIFO (``O_NONBLOCK``) and checked again on the open file (it may have been swapped
since); a link to a regular file is read like the file. Anything else, or a file over the limit, is refused with a
``DataError`` naming the file, what it is and the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from data_prep.compact import DataError

KINDS = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO (named pipe)", stat.S_ISCHR: "a character device",
         stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
FIX = "an importer reads regular files only: replace it with the file itself, or remove it; then run again"


def size_text(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps it whole or above 1 (``1 MiB``, ``16 GiB``)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            value = count / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{count} bytes"


def kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((name for test, name in KINDS.items() if test(mode)), "not a regular file")


def check(path: Path, info: os.stat_result, limit: int, what: str) -> None:
    """``DataError`` when ``info`` is not a regular file of at most ``limit`` bytes."""
    if not stat.S_ISREG(info.st_mode):
        link = f"a link to {os.path.realpath(path)}, " if os.path.islink(path) else ""
        raise DataError(f"{path}: expected {what}, but this is {link}{kind(info.st_mode)}; {FIX}")
    if info.st_size > limit:
        raise DataError(f"{path}: {info.st_size} bytes, over the {size_text(limit)} limit for {what}; this is not "
                        f"{what}: replace it with the right file, or remove it; then run again")


def open_source(path: Path | str, limit: int, what: str) -> BinaryIO:
    """``path`` opened for binary reading when it is (or links to) a regular file of at most ``limit`` bytes.

    ``what`` names the file's role (``"an IMDB review"``) in the ``DataError`` otherwise; an ``OSError`` of the
    open itself (missing, no permission) is the open's own."""
    path = Path(path)
    check(path, os.stat(path), limit, what)
    handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    try:
        check(path, os.fstat(handle.fileno()), limit, what)
    except DataError:
        handle.close()
        raise
    return handle


def read_source(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of ``path``, opened as :func:`open_source` does; a file that grows past ``limit`` is refused too."""
    with open_source(path, limit, what) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise DataError(f"{path}: grew past the {size_text(limit)} limit for {what} while being read; replace it with "
                        f"the right file, or remove it; then run again")
    return data
