"""Swapping new data in (``data_prep/staging.py``): the old folder stays whole and loadable until the new one is
complete, also when ``OUT/<task>`` is a link to another file system, and a swap the file system refuses is named in
one line (exit 2) with the old data left as it was."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from data_prep.__main__ import main as data_prep_main
from data_prep.compact import load_split
from data_prep.staging import staged_task_dir

SIZES = ["--train", "100", "--val", "10", "--test", "10", "--min-length", "20", "--max-length", "100"]


def listops(out: Path, seed: int) -> list[str]:
    return ["listops", "--out", str(out), *SIZES, "--seed", str(seed)]


def contents(folder: Path) -> dict[str, bytes]:
    """The bytes of every file below ``folder`` (links as their text), by relative path."""
    return {p.relative_to(folder).as_posix(): os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def labels(task_dir: Path) -> np.ndarray:
    return load_split(task_dir, "train", rebuild_cmd="x").labels


def hidden(*folders: Path) -> list[str]:
    """Staging or set-aside folders left behind."""
    return [p.name for folder in folders for p in folder.iterdir() if p.name.startswith(".")]


def fail_renames(monkeypatch, refused):
    """os.rename and os.replace raise EXDEV ("Invalid cross-device link") when ``refused(source, target)``."""
    for name in ("rename", "replace"):
        real = getattr(os, name)

        def fake(source, target, *args, _real=real, **kwargs):
            if refused(Path(source), Path(target)):
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(source), None, str(target))
            return _real(source, target, *args, **kwargs)

        monkeypatch.setattr(os, name, fake)


@pytest.fixture
def old_data(tmp_path, capsys):
    """Good ListOps (seed 0) in ``elsewhere/listops`` with a user's file in it; ``data/listops`` a link to it."""
    elsewhere, data = tmp_path / "elsewhere", tmp_path / "data"
    assert data_prep_main(listops(elsewhere, seed=0)) == 0
    (elsewhere / "listops" / "notes.txt").write_text("mine")
    data.mkdir()
    (data / "listops").symlink_to(elsewhere / "listops")
    capsys.readouterr()
    return elsewhere / "listops", data / "listops"


def test_a_link_to_another_file_system_is_replaced_through(old_data, tmp_path, monkeypatch):
    """Renames between ``data/`` and what ``data/listops`` leads to fail as across file systems: the new data is
    staged beside the link's target, so it swaps in; the link stays a link, the user's file stays."""
    real, link = old_data
    before = labels(link)
    other_fs = real.parent

    def crosses(source: Path, target: Path) -> bool:
        on_other = [Path(os.path.realpath(p.parent)).is_relative_to(other_fs) for p in (source, target)]
        return on_other[0] != on_other[1]

    fail_renames(monkeypatch, crosses)
    assert data_prep_main(listops(tmp_path / "data", seed=1)) == 0
    assert link.is_symlink() and Path(os.path.realpath(link)) == real
    assert not np.array_equal(labels(link), before)  # the new data (another seed) loads
    assert (real / "notes.txt").read_text() == "mine"
    assert hidden(tmp_path / "data", tmp_path / "elsewhere") == []


@pytest.mark.parametrize("step", ["old folder aside", "new folder in"])
def test_a_refused_swap_leaves_the_old_data_loadable_and_exits_2(old_data, tmp_path, monkeypatch, capsys, step):
    """Whichever rename of the swap the file system refuses, the command names the folder in one line, exits 2, and
    the old files are all there, byte for byte, and load."""
    real, link = old_data
    before = contents(real)

    def refused(source: Path, target: Path) -> bool:
        touches = [os.path.realpath(p) == str(real) or Path(os.path.realpath(p)).parent == real
                   for p in (source, target)]
        if step == "old folder aside":
            return touches[0] or touches[1]  # also each file an older publish renamed into the folder
        return touches[1] and source.name.endswith(".staging")

    fail_renames(monkeypatch, refused)
    assert data_prep_main(listops(tmp_path / "data", seed=1)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{link} (a link to {real}): the new data could not replace this folder (Invalid cross-device link)" in err
    assert "the old data there is unchanged" in err and "run the command again" in err
    assert contents(real) == before
    assert len(labels(link)) == 100
    assert hidden(tmp_path / "data", tmp_path / "elsewhere") == []


def test_a_failure_before_the_swap_and_the_users_own_entries(old_data, tmp_path):
    """An error while writing leaves the old folder as it was and no staging folder; a swap keeps the user's own
    files, folders and links (they were linked in, not moved)."""
    real, link = old_data
    (real / "mine").mkdir()
    (real / "mine" / "deep.txt").write_text("deep")
    (real / "shortcut").symlink_to("notes.txt")
    before = contents(real)
    with pytest.raises(RuntimeError, match="half way"), staged_task_dir(link) as stage:
        (stage / "train.npz").write_bytes(b"half")
        raise RuntimeError("bad input found half way")
    assert contents(real) == before and hidden(tmp_path / "data", tmp_path / "elsewhere") == []
    assert data_prep_main(listops(tmp_path / "data", seed=1)) == 0
    assert (real / "mine" / "deep.txt").read_text() == "deep" and os.readlink(real / "shortcut") == "notes.txt"
    assert (real / "notes.txt").read_text() == "mine" and hidden(tmp_path / "data", tmp_path / "elsewhere") == []


def test_a_regeneration_drops_the_older_tsv_export_and_keeps_the_users_files(tmp_path):
    """The TSVs (the ports' input) showed the older trees beside a manifest of the new ones; a user's file stays."""
    assert data_prep_main([*listops(tmp_path, seed=0), "--format", "tsv"]) == 0
    folder = tmp_path / "listops"
    (folder / "notes.txt").write_text("mine")
    assert data_prep_main([*listops(tmp_path, seed=1), "--no-close-brackets"]) == 0
    assert not list(folder.glob("basic_*.tsv")) and (folder / "notes.txt").read_text() == "mine"
    assert data_prep_main([*listops(tmp_path, seed=2), "--format", "tsv"]) == 0  # a new export is the new trees'
    assert sorted(path.name for path in folder.glob("basic_*.tsv")) == ["basic_test.tsv", "basic_train.tsv",
                                                                         "basic_val.tsv"]



def test_release_files_imported_in_place_survive_a_regeneration_and_an_import_drops_an_old_export(tmp_path):
    """Only this generator's own export is stale: the user's copy of the release files stays; importing over a
    generated export drops that export (it showed other trees than the imported ones)."""
    from data_prep.listops import generate, import_tsv

    release = generate(tmp_path / "release", train=20, val=4, test=4, min_length=20, max_length=60, seed=5,
                       fmt="tsv", log=lambda _: None)
    data = tmp_path / "data"
    (data / "listops").mkdir(parents=True)
    for tsv in release.glob("basic_*.tsv"):
        (data / "listops" / tsv.name).write_bytes(tsv.read_bytes())
    import_tsv(data / "listops", data, log=lambda _: None)
    assert data_prep_main(listops(data, seed=1)) == 0
    assert sorted(p.name for p in (data / "listops").glob("basic_*.tsv")) == ["basic_test.tsv", "basic_train.tsv",
                                                                               "basic_val.tsv"]
    other = tmp_path / "other"
    assert data_prep_main([*listops(other, seed=2), "--format", "tsv"]) == 0
    import_tsv(release, other, log=lambda _: None)
    assert not list((other / "listops").glob("basic_*.tsv"))


def test_a_file_where_the_folder_should_be_is_named(tmp_path, capsys):
    (tmp_path / "listops").write_text("not a folder")
    assert data_prep_main(listops(tmp_path, seed=0)) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'listops'} is not a folder" in err and "Traceback" not in err
    assert (tmp_path / "listops").read_text() == "not a folder"


def test_a_new_folder_gets_the_mode_mkdir_would_give(tmp_path):
    mask = os.umask(0o027)
    try:
        assert data_prep_main(listops(tmp_path, seed=0)) == 0
    finally:
        os.umask(mask)
    assert (tmp_path / "listops").stat().st_mode & 0o777 == 0o750


def test_run_py_generating_into_a_refused_folder_gets_one_line_not_a_traceback(tmp_path, monkeypatch):
    """``run.py`` generates missing ListOps through the data module: a refused swap is a ``UserError``, which
    ``run.py`` prints in one line with exit 2 (an ``OSError`` there was a traceback)."""
    from lra.tasks.listops import DataModule
    from lra_base.errors import UserError
    from tests.lra.conftest import TINY, compose_run

    cfg = compose_run(["task=listops", "experiment=quick", f"data_dir={tmp_path / 'data'}", *TINY])
    fail_renames(monkeypatch, lambda source, target: source.name.endswith(".staging"))
    refused = r"listops: the new data could not replace this folder .*nothing was written there"
    with pytest.raises(UserError, match=refused):
        DataModule(cfg).prepare_data()
    assert hidden(tmp_path / "data" / "quick") == []
