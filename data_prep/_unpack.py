"""Unpacking the parts of a source that the asked tasks need, and putting each in its place whole.

One pass over the archive (``data_prep._safe_extract``) writes every wanted member into a hidden staging folder beside
the downloads (``.<source>.<random>.staging``, held with ``flock`` while this process lives, so that a later fetch
removes it only once its writer died: ``lra_base.leftovers``), under the index of the archive root it was found at.
Each part is then taken from the first root where it is complete (the nested ``lra_release/lra_release/`` first) and
renamed into ``<downloads>/<unpack_dir>/<folder>``, replacing the old copy only after the new one is whole. A part
found nowhere complete is named with what it lacks, and nothing is put in place.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from data_prep._download import FetchFailed, progress
from data_prep._safe_extract import stream_extract
from data_prep.fetch_sources import Part, Source
from lra_base.leftovers import remove_dead_staging
from lra_base.lock import holding


class MissingMembers(FetchFailed):
    """An archive lacks members that a task's importer reads: it is not the official file."""


@contextlib.contextmanager
def staging(folder: Path, name: str) -> Iterator[Path]:
    """A fresh hidden folder in ``folder``, held while the block runs and removed after it, however it ends."""
    remove_dead_staging(folder)  # what fetches killed with kill -9 left
    stage = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".staging", dir=folder))
    try:
        with holding(stage):
            yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def selector(source: Source, parts: list[Part]):
    """``select(member name) -> "<root index>/<folder>/<path>"`` (None for members no part takes)."""
    wanted = [(part, re.compile(part.pattern) if part.pattern else None) for part in parts]

    def taken(part: Part, pattern, rest: str) -> bool:
        if rest in part.files:
            return True
        for folder in part.dirs:
            if rest.startswith(folder + "/"):
                below = rest[len(folder) + 1:]
                return bool(below) and (pattern is None or pattern.fullmatch(below) is not None)
        return False

    def select(name: str) -> str | None:
        for index, root in enumerate(source.roots):
            if not name.startswith(root):
                continue
            rest = name[len(root):]
            for part, pattern in wanted:
                if rest.startswith(part.folder + "/") and taken(part, pattern, rest[len(part.folder) + 1:]):
                    return f"{index}/{part.folder}/{rest[len(part.folder) + 1:]}"
        return None

    return select


def lacking(folder: Path, part: Part) -> list[str]:
    """What ``folder`` (one part as unpacked) lacks: missing files, and folders of ``part.dirs`` with no file."""
    missing = [name for name in part.files if not (folder / name).is_file()]
    for sub in part.dirs:
        files = (p for p in (folder / sub).rglob("*") if p.is_file()) if (folder / sub).is_dir() else iter(())
        if next(files, None) is None:
            missing.append(f"{sub}/ (no file)")
    return missing


def complete_copy(stage: Path, source: Source, part: Part) -> Path:
    """The staged copy of ``part`` from the first archive root where it is complete; ``MissingMembers`` naming what
    the first root that holds some of it lacks (the preferred root when none does) when none is."""
    copies = [(root, stage / str(index) / part.folder) for index, root in enumerate(source.roots)]
    for _, folder in copies:
        if not lacking(folder, part):
            return folder
    root, folder = next(((root, folder) for root, folder in copies if folder.is_dir()), copies[0])
    missing = lacking(folder, part)
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    raise MissingMembers(f"{source.filename}: the archive has no complete {root}{part.folder}/ (missing {shown}); "
                      f"it is not the official {source.filename}")


def put_in_place(new: Path, target: Path) -> None:
    """Rename the complete folder ``new`` to ``target``; an old ``target`` is set aside first and removed after
    (and put back if the second rename fails)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(target):
        os.rename(new, target)
        return
    if target.is_symlink() or not target.is_dir():
        raise FetchFailed(f"{target} is not a folder, so the unpacked files cannot replace it; move it away and run "
                          f"the command again")
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".replaced", dir=target.parent))
    os.rename(target, aside)  # over the empty folder ``aside``
    try:
        os.rename(new, target)
    except OSError:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def unpack(source: Source, parts: dict[str, Part], archive: Path, downloads: Path) -> dict[str, Path]:
    """Unpack the ``parts`` (by task) of ``archive`` into ``downloads``; the folder each task's importer reads."""
    unpacked = downloads / source.unpack_dir if source.unpack_dir else downloads
    with staging(downloads, source.name) as stage:
        with progress(archive.stat().st_size, 0, f"unpacking {archive.name}") as update:
            stream_extract(archive, stage, selector(source, list(parts.values())), update)
        copies = {task: complete_copy(stage, source, part) for task, part in parts.items()}
        for task, part in parts.items():
            if copies[task].is_dir():  # two tasks may share a part
                put_in_place(copies[task], unpacked / part.folder)
    return {task: unpacked / part.folder for task, part in parts.items()}
