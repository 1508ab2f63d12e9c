"""Read a record file only when it is a regular file below a size limit: never a FIFO, a device or a symlink.

The no-follow read is ``lra_base.atomic.read_regular``; here its refusals become ``UnsafeFile`` with the reason
alone, for the lists of files left out that name the path themselves."""

from __future__ import annotations

from pathlib import Path

from lra_base.atomic import LinkRefused, TooLarge, read_regular

RECORD_LIMIT = 16 * 2**20  # bytes; the largest committed result.json is about 60 KB
CSV_LIMIT = 64 * 2**20  # a metrics.csv of a 5,000-step run is about 12 KB


class UnsafeFile(ValueError):
    """A file that is not read: a symlink, not a regular file, or larger than the limit."""


def read_limited(path: str | Path, limit: int = RECORD_LIMIT) -> str:
    """The UTF-8 text of ``path``; ``UnsafeFile`` (the reason, without the path) unless it is a regular file
    (not a symlink) of at most ``limit`` bytes."""
    try:
        data = read_regular(path, limit)
    except LinkRefused as err:
        raise UnsafeFile(err.what) from None
    except TooLarge as err:
        raise UnsafeFile(str(err)) from None
    except OSError as err:
        raise UnsafeFile(f"cannot open: {err.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnsafeFile(f"not UTF-8 text: {err}") from None
