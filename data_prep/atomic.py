"""The one atomic file writer: readers see the old content or the new, never half of it.

Prepared data, run records (``result.json``), metrics (``metrics.csv``) and tables all go through
``atomic_output``: the bytes go to a temporary file beside the target, are flushed and fsynced, then renamed
over it (``os.replace``: atomic within one folder). The file gets the mode ``open()`` would give it under the
process's umask (``mkstemp`` alone gives 0600). It lives in ``data_prep``, the package every other one may
import, and needs the standard library only.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def umask_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed.

    Text modes use UTF-8 and write newlines exactly as given.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    text_options = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, mode, **text_options) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically."""
    with atomic_output(path, "w") as f:
        f.write(text)
