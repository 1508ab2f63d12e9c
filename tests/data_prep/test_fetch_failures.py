"""``python -m data_prep fetch`` when things go wrong, against a local server on 127.0.0.1: a closed port, a 404, a
server that stalls, a download cut midway (and resumed), a wrong or damaged file, an archive lacking members. Each is
one line on stderr, exit 2, and nothing half-written (only a cut download's bytes stay, in <file>.part)."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_prep.__main__ import main as cli
from tests.data_prep.fetch_archives import damaged, official_files, pin, release_entries, tar_gz
from tests.data_prep.fetch_server import Server, closed_port_url

ROOT = Path(__file__).resolve().parents[2]
CIFAR = "cifar-10-python.tar.gz"
RELEASE = "lra_release.gz"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return official_files(tmp_path_factory.mktemp("release_members"))


@pytest.fixture()
def pinned(files, monkeypatch):
    pin(monkeypatch, files)
    return files


def fetch(task: str, out: Path, url: str, capsys, *extra: str) -> tuple[int, str]:
    """Exit status and stderr of ``fetch task`` into ``out`` from the mirror ``url`` (0.5 s timeout)."""
    status = cli(["fetch", task, "--out", str(out), "--mirror", url, "--timeout", "0.5", *extra])
    return status, capsys.readouterr().err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("python -m data_prep fetch: error: "), err
    return err


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def data_prep_fetch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "data_prep", "fetch", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_closed_port_is_one_line_exit_2_and_writes_nothing(tmp_path):
    url = closed_port_url()
    result = data_prep_fetch("image", "--out", str(tmp_path / "data"), "--mirror", url, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout.count("\n") == 1  # the "downloading ..." line
    err = one_line(result.stderr)
    assert f"{url}/{CIFAR}: cannot connect (Connection refused)" in err
    assert f"By hand: download {url}/{CIFAR} to {tmp_path / 'data' / 'downloads' / CIFAR}" in err
    assert not (tmp_path / "data").exists()


def test_a_wrong_file_from_a_mirror_names_the_checksum_and_leaves_nothing(tmp_path):
    """With the real pins: the mirror serves some other file under the official name."""
    with Server({CIFAR: b"not the CIFAR-10 archive\n" * 100}) as server:
        result = data_prep_fetch("image", "--out", str(tmp_path / "data"), "--mirror", server.url, cwd=tmp_path)
    assert result.returncode == 2
    err = one_line(result.stderr)
    assert "offers 2500 bytes, but the official file has 170498071 bytes, md5 c58f30108f718f92721af3b95e74349a" in err
    assert "nothing was kept" in err and not (tmp_path / "data").exists()


def test_a_damaged_file_of_the_right_size_names_expected_and_got_and_is_deleted(pinned, tmp_path, capsys):
    out = tmp_path / "data"
    with Server({CIFAR: damaged(pinned[CIFAR])}) as server:
        status, err = fetch("image", out, server.url, capsys)
    assert status == 2
    expected, got = hashlib.md5(pinned[CIFAR]).hexdigest(), hashlib.md5(damaged(pinned[CIFAR])).hexdigest()
    assert f"md5 expected {expected}, got {got}; the download was deleted, nothing was kept" in one_line(err)
    assert not out.exists()


def test_a_404_names_the_url_and_the_manual_steps(pinned, tmp_path, capsys):
    with Server({}) as server:
        status, err = fetch("all", tmp_path / "data", server.url, capsys)
    assert status == 2
    one_line(err)
    assert f"{server.url}/{CIFAR}: HTTP 404 Not Found" in err
    for name in (CIFAR, "aclImdb_v1.tar.gz", RELEASE):  # every archive the command still needs, and where it goes
        assert f"{server.url}/{name} to {tmp_path / 'data' / 'downloads' / name}" in err
    assert not (tmp_path / "data").exists()


def test_a_server_that_stalls_times_out(pinned, tmp_path, capsys):
    with Server(pinned) as server:
        server.stall_before.add(CIFAR)
        started = time.monotonic()
        status, err = fetch("image", tmp_path / "data", server.url, capsys)
    assert status == 2 and time.monotonic() - started < 10
    assert "timed out" in one_line(err) and not (tmp_path / "data").exists()


def test_a_cut_download_resumes_with_a_range_request(pinned, tmp_path, capsys):
    out, blob = tmp_path / "data", pinned[CIFAR]
    part = out / "downloads" / f"{CIFAR}.part"
    half = len(blob) // 2
    with Server(pinned) as server:
        server.cut_after[CIFAR] = half
        status, err = fetch("image", out, server.url, capsys)
        assert status == 2
        kept = f"after {half} of {len(blob)} bytes; they are kept in {part}: run the same command again"
        assert kept in one_line(err)
        assert part.stat().st_size == half and not (out / "image").exists()
        assert fetch("image", out, server.url, capsys) == (0, "")
        assert server.requests[-1] == (CIFAR, f"bytes={half}-")
        assert server.sent == len(blob) - half  # the rest only
    assert not part.exists() and (out / "downloads" / CIFAR).read_bytes() == blob
    assert (out / "image" / "manifest.json").is_file()


def test_a_full_disk_is_named_as_such_not_as_a_cut_connection(pinned, tmp_path, capsys, monkeypatch):
    from data_prep import _download

    out, blob = tmp_path / "data", pinned[CIFAR]
    part = out / "downloads" / f"{CIFAR}.part"

    class FullDisk:  # the part file of a disk that fills after the first chunk
        def __init__(self, path, mode):
            self.file, self.written = open(path, mode), 0

        def write(self, chunk):
            if self.written:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += self.file.write(chunk)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

    monkeypatch.setattr(_download, "CHUNK", 1024)
    monkeypatch.setattr(_download, "open", FullDisk, raising=False)
    with Server(pinned) as server:
        status, err = fetch("image", out, server.url, capsys)
    assert status == 2
    assert f"{part}: cannot be written (No space left on device) after " in one_line(err)
    assert "free space there (or give another --out)" in err and "connection" not in err
    assert 0 < part.stat().st_size < len(blob) and not (out / "image").exists()


def test_a_stall_midway_keeps_the_bytes_for_the_next_run(pinned, tmp_path, capsys):
    out, blob = tmp_path / "data", pinned[CIFAR]
    with Server(pinned) as server:
        server.stall_after[CIFAR] = 1000
        status, err = fetch("image", out, server.url, capsys)
        assert status == 2 and "timed out" in one_line(err) and f"after 1000 of {len(blob)} bytes" in err
        server.stall_after.clear()
        assert fetch("image", out, server.url, capsys)[0] == 0
        assert server.requests[-1] == (CIFAR, "bytes=1000-")


def test_a_server_without_ranges_sends_the_whole_file_again(pinned, tmp_path, capsys):
    out = tmp_path / "data"
    with Server(pinned) as server:
        server.cut_after[CIFAR] = 5000
        assert fetch("image", out, server.url, capsys)[0] == 2
        server.ranges = False
        assert cli(["fetch", "image", "--out", str(out), "--mirror", server.url]) == 0
        assert server.sent == len(pinned[CIFAR])
    assert "the server does not resume downloads (it sent the whole file); starting again" in capsys.readouterr().out
    assert (out / "downloads" / CIFAR).read_bytes() == pinned[CIFAR]


def test_a_damaged_release_is_caught_by_gzip_and_deleted(pinned, tmp_path, capsys):
    out = tmp_path / "data"
    with Server({RELEASE: damaged(pinned[RELEASE])}) as server:
        status, err = fetch("retrieval", out, server.url, capsys)
    assert status == 2
    assert "not a whole gzip'd tar" in one_line(err) and "the download was deleted, nothing was kept" in err
    assert everything_under(out) == ["downloads"] or not out.exists()
    assert not (out / "downloads" / f"{RELEASE}.part").exists() and not (out / "retrieval").exists()


def test_a_release_without_the_aan_pairs_is_refused(pinned, tmp_path, capsys):
    members = {name: blob for name, blob in release_entries(tmp_path / "members").items() if "/tsv_data/" not in name}
    members["lra_release/lra_release/tsv_data/new_aan_pairs.train.tsv"] = b"1.0\ta\tb\tx\ty\n"
    out = tmp_path / "data"
    with Server({RELEASE: tar_gz(members)}) as server:
        status, err = fetch("retrieval", out, server.url, capsys)
    assert status == 2
    assert ("the archive has no complete lra_release/lra_release/tsv_data/ (missing new_aan_pairs.eval.tsv, "
            "new_aan_pairs.test.tsv)") in one_line(err)
    assert not (out / "downloads" / RELEASE).exists() and not (out / "downloads" / f"{RELEASE}.part").exists()
    assert not (out / "downloads" / "lra_release").exists() and not (out / "retrieval").exists()


def test_a_flat_release_layout_is_taken_too(pinned, tmp_path, capsys):
    flat = tar_gz(release_entries(tmp_path / "members", root="lra_release/"))
    with Server({RELEASE: flat}) as server:
        status, _ = fetch("listops", tmp_path / "data", server.url, capsys)
    assert status == 0 and (tmp_path / "data" / "official" / "listops" / "manifest.json").is_file()


def test_an_archive_placed_by_hand_that_is_wrong_is_named_not_deleted(pinned, tmp_path, capsys):
    downloads = tmp_path / "data" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / CIFAR).write_bytes(damaged(pinned[CIFAR]))
    status, err = fetch("image", tmp_path / "data", closed_port_url(), capsys)
    assert status == 2 and "md5 expected" in one_line(err) and f"delete it (rm {downloads / CIFAR})" in err
    assert (downloads / CIFAR).exists() and not (tmp_path / "data" / "image").exists()


def test_an_archive_placed_by_hand_is_used_without_a_network(pinned, tmp_path, capsys):
    downloads = tmp_path / "data" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / CIFAR).write_bytes(pinned[CIFAR])
    assert fetch("image", tmp_path / "data", closed_port_url(), capsys)[0] == 0
    assert (tmp_path / "data" / "image" / "manifest.json").is_file()


def test_a_bad_timeout_is_refused(tmp_path, capsys):
    status, err = fetch("image", tmp_path / "data", closed_port_url(), capsys, "--timeout", "0")
    assert status == 2 and "--timeout must be a positive number" in err
