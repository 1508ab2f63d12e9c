"""`python -m results.archive` changes a run's record and its curve together or not at all (issue 58, point 7)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from results.archive import archive
from results.collect import collect
from tests.results.records import write_record

ROOT = Path(__file__).resolve().parents[2]
OLD_CURVE = "step,val/acc\n9,0.25\n"


def run_folder(root: Path, acc: float, curve: str | None) -> Path:
    """A completed run's folder below ``root/outputs`` with test accuracy ``acc`` and ``curve`` as its metrics."""
    record = write_record(root / "outputs", "listops", "linear", 0, acc, tag="quick")
    if curve is not None:
        (record.parent / "csv").mkdir()
        (record.parent / "csv" / "metrics.csv").write_text(curve)
    return record.parent


def archived(tmp_path: Path) -> Path:
    """An earlier archive (test 0.25, `OLD_CURVE`) under ``tmp_path/runs``; returns its folder."""
    return archive(run_folder(tmp_path / "old", 0.25, OLD_CURVE), tmp_path / "runs")


def pair(dest: Path) -> tuple[float | None, str | None]:
    """(test_acc of the record, the curve's text) in `dest`, None for a file that is absent."""
    record = dest / "result.json"
    acc = json.loads(record.read_text())["metrics"]["test_acc"] if record.exists() else None
    return acc, (dest / "metrics.csv").read_text() if (dest / "metrics.csv").exists() else None


def leftovers(dest: Path) -> list[str]:
    """Hidden files or folders beside or inside `dest` (a staging folder or temporary file left behind)."""
    return sorted(p.name for folder in (dest, dest.parent) for p in folder.iterdir() if p.name.startswith("."))


def test_a_curve_over_the_file_size_limit_leaves_the_earlier_pair(tmp_path):
    dest = archived(tmp_path)
    big = "step,val/acc\n" + "".join(f"{i},0.5\n" for i in range(150_000))  # about 1.5 MB
    assert len(big) > 1_400_000
    new = run_folder(tmp_path / "new", 0.5, big)

    def file_size_limit() -> None:  # as `ulimit -f 1000` (blocks of 1,024 bytes): a 1.5 MB write fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    result = subprocess.run([sys.executable, "-m", "results.archive", str(new), "--to", str(tmp_path / "runs")],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=file_size_limit,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "error:" in result.stderr, result.stderr[-2000:]
    assert pair(dest) == (0.25, OLD_CURVE) and leftovers(dest) == []
    assert archive(new, tmp_path / "runs") == dest and pair(dest) == (0.5, big)  # without the limit it goes in


def test_a_new_record_without_a_curve_takes_the_old_curve_away(tmp_path):
    dest = archived(tmp_path)
    archive(run_folder(tmp_path / "new", 0.5, None), tmp_path / "runs")
    assert pair(dest) == (0.5, None) and leftovers(dest) == []


def test_a_reader_sees_the_old_pair_no_record_or_the_new_pair_at_every_moment(tmp_path, monkeypatch):
    dest = archived(tmp_path)
    new = run_folder(tmp_path / "new", 0.5, "step,val/acc\n9,0.5\n")
    seen = [pair(dest)]
    for name in ("rename", "replace"):
        real = getattr(os, name)

        def watched(*args, _real=real, **kwargs):
            _real(*args, **kwargs)
            seen.append(pair(dest))

        monkeypatch.setattr(os, name, watched)
    archive(new, tmp_path / "runs")
    monkeypatch.undo()
    assert seen[-1] == (0.5, "step,val/acc\n9,0.5\n") and (None, OLD_CURVE) in seen
    assert all(state in ((0.25, OLD_CURVE), (0.5, "step,val/acc\n9,0.5\n")) or state[0] is None for state in seen)
    long, _ = collect([tmp_path / "runs"])
    assert long["path"].tolist() == [(dest / "result.json").as_posix()] * 3  # no staged copy found


def test_a_rename_that_fails_puts_the_old_pair_back(tmp_path, monkeypatch):
    dest = archived(tmp_path)
    new = run_folder(tmp_path / "new", 0.5, "step,val/acc\n9,0.5\n")
    real, failed = os.rename, []

    def failing(source, target, *args, **kwargs):
        if Path(target) == dest / "result.json" and not failed:  # the first move onto the record: the new one's
            failed.append(source)
            raise OSError(28, "No space left on device")
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="No space"):
        archive(new, tmp_path / "runs")
    assert pair(dest) == (0.25, OLD_CURVE) and leftovers(dest) == []


def test_a_staging_folder_left_by_a_killed_archive_is_never_read(tmp_path):
    dest = archived(tmp_path)
    left = dest.parent / f".{dest.name}.abcdefgh.staging"
    write_record(left, "listops", "linear", 0, 0.9, tag="quick")  # kill -9 runs no cleanup
    long, problems = collect([tmp_path / "runs"])
    assert set(long["path"]) == {(dest / "result.json").as_posix()} and problems == []
