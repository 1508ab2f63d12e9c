"""Writing a task folder safely: build it aside, then swap it in.

A generator or importer writes ``OUT/<task>/`` through :func:`staged_task_dir`. Every file goes to a hidden staging
folder beside the folder the data really lands in: where ``OUT/<task>`` leads when it (or a folder above it) is a
symbolic link, so the staging folder is on the target's own file system. When the new data is complete (manifest
written), the files of the old folder that it does not replace (a user's own) are linked into the staging folder,
but for those the writer names stale (ListOps' generator drops an older TSV export, which shows the older trees),
and the complete folder takes the old one's place by two renames inside one folder: the old folder aside, the new
one in; then the old one is removed. Until then the old data is untouched: an import that fails half way, on a bad
line or a missing file, or a swap that the file system refuses, leaves it as it was and loadable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from data_prep.compact import MANIFEST_NAME, DataError, manifest_path
from lra_base.atomic import check_writable, copy_atomic
from lra_base.errors import UserError
from lra_base.leftovers import remove_dead_staging
from lra_base.lock import holding


class PublishFailed(DataError, UserError):
    """The new data could not take the old folder's place; the old folder is as it was.

    A ``UserError`` too, so that ``run.py``, which generates missing data, prints it in one line."""


def real_folder(task_dir: Path) -> Path:
    """The folder the data lands in: ``task_dir`` with every symbolic link on its path followed."""
    return Path(os.path.realpath(task_dir))


@contextlib.contextmanager
def staged_task_dir(task_dir: Path, stale: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield an empty folder to write the task into; on success it replaces ``task_dir`` (where its link leads).

    Files of ``task_dir`` that the new data does not replace are kept, but for the names in ``stale``: files that
    describe the old data (ListOps' TSV export). ``PublishFailed`` when the swap fails.
    """
    task_dir = Path(task_dir)
    target = real_folder(task_dir)
    refuse_a_file(target, task_dir)  # before the work, not after it
    check_writable(target.parent, "write the data to another folder (--out DIR)")  # the staging folder goes there
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_staging(target.parent)  # those of writers killed with kill -9 (lra_base.leftovers)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".staging", dir=target.parent))
    try:
        with holding(stage):  # while this process lives, its staging folder is not a leftover
            yield stage
            publish(stage, target, shown=task_dir, stale=stale)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def publish(stage: Path, target: Path, shown: Path | None = None, stale: tuple[str, ...] = ()) -> None:
    """Make the complete folder ``stage`` the folder ``target`` (a sibling of it), keeping ``target``'s other files.

    ``shown`` is the name the user gave (``OUT/<task>``), used in messages."""
    shown = Path(shown or target)
    if not manifest_path(stage).is_file():
        raise RuntimeError(f"{stage}: no {MANIFEST_NAME} written; nothing is published")
    refuse_a_file(target, shown)
    if target.is_dir():
        keep_unreplaced(target, stage, stale)
        stage.chmod(stat.S_IMODE(target.stat().st_mode))
    else:
        stage.chmod(folder_mode())  # mkdtemp made it 0700
    swap_in(stage, target, shown)


def refuse_a_file(target: Path, shown: Path) -> None:
    """``PublishFailed`` when something other than a folder stands where the data goes."""
    if os.path.lexists(target) and not target.is_dir():
        raise PublishFailed(f"{describe(shown, target)} is not a folder, so the new data cannot replace it; the file "
                            f"is left as it is. Move it away (or give another --out DIR), then run the command again")


def folder_mode() -> int:
    """The mode ``mkdir`` gives a new folder under this process's umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o777 & ~mask


def describe(shown: Path, target: Path) -> str:
    """``shown``, and where it leads when that differs."""
    return str(shown) if os.path.abspath(shown) == str(target) else f"{shown} (a link to {target})"


def keep_unreplaced(old: Path, stage: Path, stale: tuple[str, ...] = ()) -> None:
    """Link (or copy) into ``stage`` every entry of ``old`` that ``stage`` does not have, but the top-level names in
    ``stale``; folders recursively."""
    for entry in os.scandir(old):
        new = stage / entry.name
        if os.path.lexists(new) or entry.name in stale:
            continue
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), new)
        elif entry.is_dir():
            new.mkdir()
            keep_unreplaced(Path(entry.path), new)
            new.chmod(stat.S_IMODE(entry.stat().st_mode))
        else:
            link_or_copy(Path(entry.path), new)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link ``target`` to ``source`` (the same file system, no bytes copied); a copy where links fail."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        copy_atomic(source, target)


def swap_in(stage: Path, target: Path, shown: Path) -> None:
    """Rename ``stage`` to ``target``; an old ``target`` goes aside first and comes back if the second rename fails."""
    if not os.path.lexists(target):
        rename(stage, target, shown, "nothing was written there")
        return
    kept = "the old data there is unchanged and still loads"
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".replaced", dir=target.parent))
    try:
        rename(target, aside, shown, kept)  # replaces the empty folder ``aside``
    except PublishFailed:
        aside.rmdir()
        raise
    try:
        rename(stage, target, shown, kept)
    except PublishFailed:
        put_back(aside, target, shown)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def rename(source: Path, target: Path, shown: Path, outcome: str) -> None:
    """``os.rename``; ``PublishFailed`` naming the folder, the reason, ``outcome`` and the fix when it is refused."""
    try:
        os.rename(source, target)
    except OSError as err:
        where = real_folder(shown)
        raise PublishFailed(
            f"{describe(shown, where)}: the new data could not replace this folder ({err.strerror or err}); "
            f"{outcome}. Check that {where.parent} is writable and that {where} is a plain folder (not a mount "
            f"point), or write the data to another folder; then run the command again"
        ) from None


def put_back(aside: Path, target: Path, shown: Path) -> None:
    """Rename the old folder back from ``aside``; if even that fails, say where the old data is."""
    try:
        os.rename(aside, target)
    except OSError as err:
        raise PublishFailed(f"{shown}: the new data could not replace this folder, and the old data could not be put "
                            f"back ({err.strerror or err}); it is whole in {aside}: move it back with "
                            f"`mv {aside} {target}`") from None
