"""Every task's official data in one command: download, check, unpack and import it.

    python -m data_prep fetch <task>|all [--out DIR] [--mirror BASE_URL]

Text gets IMDB's aclImdb_v1.tar.gz (the archive tfds imdb_reviews reads, which LRA's text task loads), Image the
CIFAR-10 python version, Retrieval the AAN pairs of the LRA release (lra_release.gz, about 7.7 GB); listops,
pathfinder and pathx get the release's official splits, imported into DIR/official/<task>/ beside the generated data
in DIR/<task>/ (train on them with data_dir=DIR/official). Archives go to DIR/downloads/ through <file>.part: a cut
download continues from there on the next run (HTTP Range), and the file gets its name only once its size and
checksum (or, for the release, which has none published, gzip's CRC-32 and the members each task needs) are checked.
Members are unpacked from the stream of the archive, refusing links, absolute paths and ".." entries; then the
task's importer (python -m data_prep <task> --source ...) converts them. A task whose data is already prepared is
left alone (--force imports it again). Without a network, put each archive at DIR/downloads/<file> yourself: the
same command checks it and goes on. Failures are one line, exit 2, with nothing half-written.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

from data_prep import image, listops, pathfinder, retrieval, text
from data_prep._download import FetchFailed, WrongFile, check_file, download
from data_prep._safe_extract import DamagedArchive, UnsafeArchive
from data_prep._unpack import MissingMembers, unpack
from data_prep.compact import DataError, made_by, manifest_path
from data_prep.fetch_sources import (
    DOWNLOADS_DIR,
    OFFICIAL_MARKER,
    PARTS,
    SOURCES,
    TASKS,
    Source,
    expand,
    run_command,
    sources_table,
    task_root,
)
from lra_base.atomic import check_writable, refuse_link, write_atomic

TIMEOUT = 60.0
IMPORTERS = {
    "text": lambda folder, root: text.convert(folder, root),
    "image": lambda folder, root: image.convert(folder, root),
    "retrieval": lambda folder, root: retrieval.convert(folder, root),
    "listops": lambda folder, root: listops.import_tsv(folder, root),
    "pathfinder": lambda folder, root: pathfinder.import_official(folder, root, "pathfinder"),
    "pathx": lambda folder, root: pathfinder.import_official(folder, root, "pathx"),
}


def source_url(source: Source, mirror: str | None) -> str:
    """The official URL, or ``<mirror>/<file>``."""
    return f"{mirror.rstrip('/')}/{source.filename}" if mirror else source.url


def pin_text(source: Source) -> str:
    """How ``source`` is pinned, for messages: ``170498071 bytes, md5 c58f...``."""
    return f"{source.size_text()}, {source.checksum_text()}"


def by_hand(sources: list[Source], downloads: Path, mirror: str | None, command: str) -> str:
    """The manual steps: which file goes where, then the same command."""
    files = "; ".join(f"{source_url(s, mirror)} to {downloads / s.filename}" for s in sources)
    return (f"By hand: download {files}, then run `{command}` again (it checks each file, unpacks and imports it; "
            f"python -m data_prep fetch --help lists sizes and checksums)")


def fetch_archive(source: Source, url: str, downloads: Path, timeout: float, hint: str) -> tuple[Path, bool]:
    """The archive of ``source`` in ``downloads``, downloaded if absent; ``(path, checked)``, where ``checked`` is
    False for a fresh download not yet checked against anything but its length (the release: no checksum)."""
    final, part = downloads / source.filename, downloads / f"{source.filename}.part"
    refuse_link(final)
    if final.exists():
        try:
            check_file(final, source.size, source.checksum, str(final))
        except FetchFailed as err:
            raise FetchFailed(f"{err}: it is not the official {source.filename}; delete it "
                              f"(rm {shlex.quote(str(final))}) and run the command again to download it") from None
        print(f"{source.name}: using {final}")
        return final, True
    kept = part.stat().st_size if part.is_file() and not part.is_symlink() else 0
    print(f"{source.name}: {f'continuing from byte {kept}' if kept else 'downloading'} {url} ({pin_text(source)}) "
          f"to {part}")
    try:
        download(url, part, size=source.size, timeout=timeout, expected=pin_text(source))
        check_file(part, source.size, source.checksum, url)
    except WrongFile as err:  # not the official file: nothing of it is kept
        part.unlink(missing_ok=True)
        raise FetchFailed(f"{err}; the download was deleted, nothing was kept. {hint}") from None
    except FetchFailed as err:  # no connection, an HTTP error, a stall or a cut: what arrived stays in ``part``
        raise FetchFailed(f"{err}. {hint}") from None
    if source.checksum is None:
        return part, False
    os.replace(part, final)  # size and checksum are the published ones
    return final, True


def fetch_source(source: Source, tasks: list[str], url: str, downloads: Path, timeout: float,
                 hint: str) -> dict[str, Path]:
    """Download (or reuse), check and unpack ``source`` for ``tasks``; the folder each task's importer reads."""
    archive, checked = fetch_archive(source, url, downloads, timeout, hint)
    try:
        folders = unpack(source, {task: PARTS[task] for task in tasks}, archive, downloads)
    except (UnsafeArchive, DamagedArchive, MissingMembers) as err:  # the archive's fault, not the disk's
        if checked:
            raise DataError(f"{err}; delete it (rm {shlex.quote(str(archive))}) and run the command again to "
                            f"download it") from None
        archive.unlink(missing_ok=True)  # an unchecked download that fails its checks is not kept
        raise DataError(f"{err} (downloaded from {url}; the download was deleted, nothing was kept)") from None
    if not checked:
        os.replace(archive, downloads / source.filename)  # length, gzip CRC-32 and members checked
    return folders


def import_task(task: str, folder: Path, out: Path) -> None:
    """Convert the unpacked ``folder`` with ``task``'s importer into its data root (``OUT`` or ``OUT/official``)."""
    root = task_root(task, out)
    IMPORTERS[task](folder, root)
    if PARTS[task].official and not (root / OFFICIAL_MARKER).is_file():
        note = {"what": "the LRA release's official splits, imported by `python -m data_prep fetch`; run.py never "
                        "generates data into this folder", "tasks": [t for t in TASKS if PARTS[t].official]}
        write_atomic(root / OFFICIAL_MARKER, json.dumps(note, indent=1) + "\n")


def made_folders(folder: Path) -> list[Path]:
    """Create ``folder`` (and its parents); the ones that did not exist, deepest first."""
    made, path = [], Path(os.path.abspath(folder))
    while not os.path.lexists(path):
        made.append(path)
        path = path.parent
    Path(folder).mkdir(parents=True, exist_ok=True)
    return made


@contextlib.contextmanager
def only_fetch(folder: Path) -> Iterator[None]:
    """Hold ``flock`` on ``folder`` (the downloads) so that two fetches never write one ``.part`` file."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FetchFailed(f"{folder} is in use by another `python -m data_prep fetch`; wait for it to end, then "
                              f"run this command again") from None
        yield
    finally:
        os.close(fd)


def command_line(args: argparse.Namespace) -> str:
    """The command as given, to repeat in messages."""
    words = ["python", "-m", "data_prep", "fetch", args.what, "--out", str(args.out)]
    for option in ("downloads", "mirror"):
        if getattr(args, option):
            words += [f"--{option}", str(getattr(args, option))]
    return shlex.join(words)


def fetch(args: argparse.Namespace) -> list[str]:
    """Fetch and import every task ``args.what`` names that is not prepared yet (all with ``--force``); those."""
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    out = Path(args.out)
    downloads = Path(args.downloads) if args.downloads else out / DOWNLOADS_DIR
    todo = []
    for task in expand(args.what):
        folder = task_root(task, out) / task
        if manifest_path(folder).is_file() and not args.force:
            if PARTS[task].official and made_by(folder) == "generator":  # run.py generated it there before any fetch
                raise ValueError(f"{folder} holds generated {task} data, not the release's official split: move it "
                                 f"away, or fetch with --force to replace it")
            print(f"{task}: {folder} is already prepared (--force fetches and imports it again)")
        else:
            todo.append(task)
    if not todo:
        return []
    plan = {name: [t for t in todo if PARTS[t].source == name] for name in SOURCES}
    plan = {name: tasks for name, tasks in plan.items() if tasks}
    check_writable(downloads, "give another --out DIR (or --downloads DIR)")
    made = made_folders(downloads)
    try:
        with only_fetch(downloads):
            for index, (name, tasks) in enumerate(plan.items()):
                source = SOURCES[name]
                waiting = [SOURCES[n] for n in list(plan)[index:] if not (downloads / SOURCES[n].filename).exists()]
                hint = by_hand(waiting or [source], downloads, args.mirror, command_line(args))
                folders = fetch_source(source, tasks, source_url(source, args.mirror), downloads, args.timeout, hint)
                for task in tasks:
                    import_task(task, folders[task], out)
    except BaseException:
        for folder in made:  # a failed first fetch leaves no empty folders behind
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return todo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m data_prep fetch``; the help ends with the table of sources."""
    parser.add_argument("what", choices=[*TASKS, "all"], metavar="TASK",
                        help=f"one of {', '.join(TASKS)}, or all")
    parser.add_argument("--out", type=Path, default=Path("data"), metavar="DIR",
                        help="root of prepared data (default: data, run.py's data_dir)")
    parser.add_argument("--downloads", type=Path, metavar="DIR",
                        help="where the archives are downloaded and unpacked (default: OUT/downloads)")
    parser.add_argument("--mirror", metavar="BASE_URL",
                        help="fetch BASE_URL/<file> instead of each official URL (an institutional mirror; "
                             "http://, https:// or file://)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, metavar="S",
                        help=f"seconds to wait for a connection or for data before giving up (default {TIMEOUT:g})")
    parser.add_argument("--force", action="store_true", help="fetch and import tasks that are already prepared")
    parser.epilog = sources_table()


def main(args: argparse.Namespace) -> int:
    """Run ``python -m data_prep fetch`` with parsed ``args``."""
    done = fetch(args)
    for task in done:
        print(f"{task}: ready in {task_root(task, args.out) / task}; train with: {run_command(task, args.out)}")
    if done:
        downloads = Path(args.downloads) if args.downloads else Path(args.out) / DOWNLOADS_DIR
        print(f"fetch: the archives and their unpacked files stay in {downloads} (the data's rebuild commands read "
              f"them; delete them to free space)")
    return 0
