"""Unpacking fetched archives: a tar with ``..``, absolute, link, device or FIFO entries is refused whole, and
nothing of it is written, inside the downloads or outside them; the members a task needs are taken from the stream,
nothing else."""

from __future__ import annotations

import tarfile

import pytest

from data_prep.__main__ import main as cli
from data_prep._safe_extract import DamagedArchive, UnsafeArchive, stream_extract
from tests.data_prep.fetch_archives import NESTED, release_entries, tar_gz
from tests.data_prep.fetch_server import Server

AAN = NESTED + "tsv_data/new_aan_pairs.train.tsv"


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


UNSAFE = {
    "dotdot": (entry("lra_release/../../evil.txt", size=4), "a path leading out of the folder (..)"),
    "absolute": (entry("/tmp/lra-fetch-test-absolute.txt", size=4), "an absolute path"),
    "symlink": (entry(NESTED + "tsv_data/link.tsv", tarfile.SYMTYPE, "../../../../evil.txt"), "a symbolic link"),
    "hardlink": (entry(NESTED + "tsv_data/new_aan_pairs.eval.tsv", tarfile.LNKTYPE, AAN), "a hard link"),
    "device": (entry(NESTED + "tsv_data/zero", tarfile.CHRTYPE), "a device or FIFO"),
    "fifo": (entry(NESTED + "tsv_data/pipe", tarfile.FIFOTYPE), "a device or FIFO"),
}


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    return release_entries(tmp_path_factory.mktemp("members"))


@pytest.mark.parametrize("kind", list(UNSAFE))
def test_a_release_with_an_unsafe_entry_is_refused_whole(kind, members, tmp_path, capsys):
    unsafe, why = UNSAFE[kind]
    archive = tar_gz(members, extra=(unsafe,))
    out = tmp_path / "nest" / "data"  # a ``..`` or link written anyway would land in tmp_path or tmp_path/nest
    with Server({"lra_release.gz": archive}) as server:
        status = cli(["fetch", "retrieval", "--out", str(out), "--mirror", server.url, "--timeout", "5"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert f"entry {unsafe.name!r} is {why}" in err and "the download was deleted, nothing was kept" in err
    assert not out.exists()  # no archive, no .part, no staging folder, no unpacked files, no data
    assert list(tmp_path.iterdir()) == []  # even the folders it made are gone
    assert not (tmp_path.parent / "evil.txt").exists()


def test_unsafe_entries_are_refused_even_when_nothing_would_take_them(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_gz({"ok/a.txt": b"a"}, extra=(entry("ok/../../x.txt", size=1),)))
    (tmp_path / "dest").mkdir()
    with pytest.raises(UnsafeArchive, match=r"'ok/\.\./\.\./x\.txt' is a path leading out"):
        stream_extract(archive, tmp_path / "dest", lambda name: None)
    assert not (tmp_path.parent / "x.txt").exists() and list((tmp_path / "dest").iterdir()) == []


def test_only_selected_members_are_written_as_plain_files(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_gz({"top/keep/a.txt": b"a", "top/keep/b.txt": b"bb", "top/skip/c.txt": b"c"}))
    dest = tmp_path / "dest"
    dest.mkdir()
    written = stream_extract(archive, dest, lambda name: name[4:] if name.startswith("top/keep/") else None)
    assert written == 2 and sorted(p.name for p in dest.rglob("*")) == ["a.txt", "b.txt", "keep"]
    assert (dest / "keep" / "b.txt").read_bytes() == b"bb"


@pytest.mark.parametrize("blob", [b"plain bytes, not gzip", tar_gz({"a": b"x" * 5000})[:-20]],
                         ids=["not-gzip", "truncated"])
def test_a_file_that_is_not_a_whole_gzipped_tar_is_named(blob, tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(blob)
    (tmp_path / "dest").mkdir()
    with pytest.raises(DamagedArchive, match="not a whole gzip'd tar"):
        stream_extract(archive, tmp_path / "dest", lambda name: name)
