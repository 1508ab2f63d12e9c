"""One run per folder: ``run.lock``, held with ``flock`` while a run trains and tests in that folder.

The kernel drops the lock when its process ends, however it ends, so a lock file left by a killed run
never blocks the rerun; the file only says who holds it. The file is never opened through a symbolic link
(a link there is refused by name).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from .errors import UserError

LOCK_NAME = "run.lock"


def lock_info(path: Path) -> dict | None:
    """What the lock file says (``pid``, ``host``, ``started``), read without following a link; None when it
    cannot be read as that."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def holder(path: Path) -> str:
    """Who the lock file says holds it, for the message."""
    try:
        info = lock_info(path)
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (KeyError, TypeError):  # None, or a field missing
        return "another process"


def open_lock_file(path: Path) -> int:
    """``os.open`` of the lock file, created if absent, never through a link: a link is a UserError naming it."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError:
        if os.path.islink(path):
            raise UserError(f"{path} is a symbolic link (to {os.readlink(path)}): the run's lock file is never opened "
                            f"through a link; remove it (rm {path}) and rerun") from None
        raise


def acquire(path: Path) -> int:
    """An open descriptor of ``path`` holding its exclusive lock; UserError while another process holds it."""
    while True:
        fd = open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UserError(f"{path.parent} is in use by another run ({holder(path)}): two runs in one folder would "
                            f"both write its checkpoints and metrics.csv. Wait for that run to end (or stop it), "
                            f"then rerun this command.") from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        os.close(fd)  # the holder removed the file as we opened it: lock the new one


@contextlib.contextmanager
def run_folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``<run_dir>/run.lock`` for the duration of the block."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    fd = acquire(path)
    try:
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}).encode())
        yield
    finally:
        path.unlink(missing_ok=True)  # before closing: a waiting process then locks a new file
        os.close(fd)


def live_holder(run_dir: Path) -> int | None:
    """The pid that ``<run_dir>/run.lock`` names when that process is alive on this host, else None.

    Read only, without locking (so it never gets in the way of a run starting): a run killed without its
    ``finally`` leaves the file behind naming a dead pid; a reused pid would be taken for the run.
    """
    try:
        info = lock_info(Path(run_dir) / LOCK_NAME)
        pid = int(info["pid"])
        if info["host"] != socket.gethostname() or pid <= 0:
            return None
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):  # no file or a field missing (None), or no such process
        return None
    return pid


def in_use(path: str | Path) -> bool:
    """Whether a live process holds ``flock`` on ``path`` (a file or a folder): the writer of a temporary file
    (``lra_base.atomic``) or a staging folder (``data_prep.staging``) holds it while it writes, and the kernel drops it
    when that process ends, however it ends. A path that cannot be opened is taken to be in use (left alone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without flock: nobody can be told apart, so nothing is taken for dead
        return True
    finally:
        os.close(fd)  # also drops the lock this test took
    return False


@contextlib.contextmanager
def holding(path: str | Path) -> Iterator[None]:
    """Hold ``flock`` on ``path`` (a folder or file this process made) for the duration of the block, so that
    ``in_use`` says it is this live process's."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
