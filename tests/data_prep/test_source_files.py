"""Importers read regular files only, each under its task's size limit (``data_prep/source_files.py``): a FIFO, a
character device or a file over the limit under a source file's name is refused by name, in one line, exit 2;
nothing hangs on a FIFO or reads ``/dev/zero`` without end."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from data_prep import pathfinder_io, text
from data_prep.__main__ import main as data_prep_main
from data_prep.compact import DataError
from data_prep.source_files import read_source
from tests.data_prep.official_fixtures import (
    aan_rows,
    cifar_batches,
    imdb_reviews,
    write_aan,
    write_aclimdb,
    write_cifar,
)


class Hung(Exception):
    """The import did not return in time (it waits on a FIFO); not an OSError, so the command does not catch it."""


@contextlib.contextmanager
def within(seconds: float = 10.0):
    """Raise ``Hung`` in the test if its body is still running after ``seconds``."""
    def stop(signum, frame):
        raise Hung(f"still running after {seconds} s: blocked opening a FIFO?")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def replace_with_fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def prepare(capsys, task: str, source: Path, out: Path) -> tuple[int, str]:
    """``python -m data_prep <task> --source SOURCE --out OUT`` in this process: (exit status, stderr)."""
    capsys.readouterr()
    with within():
        status = data_prep_main([task, "--source", str(source), "--out", str(out)])
    return status, capsys.readouterr().err.strip()


def assert_refused(status: int, err: str, path: Path, *phrases: str) -> None:
    assert status == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{path}: " in err, err
    for phrase in phrases:
        assert phrase in err, err


def release(root: Path, count: int = 12) -> Path:
    """A Pathfinder release layout with ``count`` non-empty 32x32 images; returns ``root``."""
    (root / "imgs" / "0").mkdir(parents=True)
    (root / "metadata").mkdir()
    rng = np.random.default_rng(0)
    lines = []
    for n in range(count):
        pixels = rng.integers(1, 256, (32, 32), dtype=np.uint8)
        Image.fromarray(pixels, "L").save(root / "imgs" / "0" / f"sample_{n}.png")
        lines.append(f"imgs/0 sample_{n}.png {n} {n % 2} 1.0 14 4 2 0.5 1 1")
    (root / "metadata" / "0.npy").write_text("\n".join(lines) + "\n")
    return root


def twin_of_dev_null(path: Path) -> str:
    """A character device at ``path`` (``mknod c 1 3``, /dev/null's numbers: a reader of the old code got an empty
    file, not an endless one); where mknod is not permitted, a link to /dev/null. Returns what the refusal says."""
    path.unlink(missing_ok=True)
    try:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        path.symlink_to("/dev/null")
        return "leads outside"  # refused before anything is opened: the link leaves the source folder
    return "but this is a character device"


@pytest.fixture
def aclimdb(tmp_path) -> Path:
    return write_aclimdb(tmp_path / "imdb", imdb_reviews(train_per_class=4, test_per_class=2))


def test_dev_zero_and_a_link_to_it_are_refused_without_being_read(tmp_path):
    with pytest.raises(DataError, match=r"^/dev/zero: expected an IMDB review, but this is a character device; an "
                                        r"importer reads regular files only"):
        read_source("/dev/zero", text.REVIEW_LIMIT, "an IMDB review")
    (tmp_path / "997_9.txt").symlink_to("/dev/zero")
    with pytest.raises(DataError, match=r"997_9\.txt: expected an IMDB review, but this is a link to /dev/zero, a "
                                        r"character device"):
        read_source(tmp_path / "997_9.txt", text.REVIEW_LIMIT, "an IMDB review")


def test_a_fifo_review_is_refused_instead_of_waited_on(aclimdb, tmp_path, capsys):
    fifo = replace_with_fifo(aclimdb / "train" / "pos" / "997_9.txt")
    status, err = prepare(capsys, "text", aclimdb, tmp_path / "data")
    assert_refused(status, err, fifo, "expected an IMDB review, but this is a FIFO", "regular files only")
    assert not (tmp_path / "data" / "text").exists()


def test_a_character_device_review_is_refused(aclimdb, tmp_path, capsys):
    device = aclimdb / "train" / "pos" / "997_9.txt"
    says = twin_of_dev_null(device)
    status, err = prepare(capsys, "text", aclimdb, tmp_path / "data")
    assert_refused(status, err, device, says)


def test_a_review_over_the_size_limit_is_refused_naming_the_limit(aclimdb, tmp_path, capsys):
    huge = aclimdb / "test" / "neg" / "0_3.txt"
    huge.write_bytes(b"a" * (text.REVIEW_LIMIT + 1))
    status, err = prepare(capsys, "text", aclimdb, tmp_path / "data")
    assert_refused(status, err, huge, f"{text.REVIEW_LIMIT + 1} bytes, over the 1 MiB limit for an IMDB review")


@pytest.mark.parametrize("entry", ["imgs/0/sample_3.png", "metadata/0.npy"])
def test_a_fifo_in_a_pathfinder_release_is_refused_instead_of_waited_on(tmp_path, capsys, entry):
    root = release(tmp_path / "release")
    fifo = replace_with_fifo(root / entry)
    status, err = prepare(capsys, "pathfinder", root, tmp_path / "data")
    assert_refused(status, err, fifo, "but this is a FIFO")


def test_a_character_device_image_is_refused(tmp_path, capsys):
    root = release(tmp_path / "release")
    device = root / "imgs" / "0" / "sample_3.png"
    says = twin_of_dev_null(device)
    status, err = prepare(capsys, "pathfinder", root, tmp_path / "data")
    assert_refused(status, err, device, says)


def test_an_image_over_the_size_limit_is_refused_naming_the_limit(tmp_path, capsys):
    root = release(tmp_path / "release")
    huge = root / "imgs" / "0" / "sample_3.png"
    huge.write_bytes(huge.read_bytes() + b"\0" * pathfinder_io.IMAGE_LIMIT)
    status, err = prepare(capsys, "pathfinder", root, tmp_path / "data")
    assert_refused(status, err, huge, "over the 1 MiB limit for a Pathfinder image (listed at")


@pytest.mark.parametrize("task, entry", [("retrieval", "new_aan_pairs.eval.tsv"), ("image", "test_batch"),
                                         ("listops", "basic_val.tsv")])
def test_a_fifo_among_the_other_importers_files_is_refused(tmp_path, capsys, task, entry):
    source = tmp_path / "source"
    if task == "retrieval":
        write_aan(source, aan_rows(counts={"train": 4, "eval": 2, "test": 2}))
    elif task == "image":
        source = write_cifar(source, cifar_batches(per_batch=2, test=2))
    else:
        assert data_prep_main(["listops", "--out", str(tmp_path), "--train", "20", "--val", "4", "--test", "4",
                               "--min-length", "5", "--max-length", "30", "--format", "tsv"]) == 0
        source = tmp_path / "listops"
    fifo = replace_with_fifo(source / entry)
    status, err = prepare(capsys, task, source, tmp_path / "data")
    assert_refused(status, err, fifo, "but this is a FIFO", "regular files only")
