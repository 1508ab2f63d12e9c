"""The archive and the leaderboard page write only under their destination, read no file through a link and
write atomically (issue 29, points 2, 3 and 4)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyses.record import write_analysis_record
from results.__main__ import main as results_main
from results.archive import archive
from results.archive import main as archive_main
from results.microscope import write_microscope_tables
from tests.results.records import write_record

ROOT = Path(__file__).resolve().parents[2]
SECRET = "root:x:0:0:secret\n"


def completed_run(folder: Path, **fields) -> Path:
    """A completed run's folder (not below an ``outputs/`` folder: its archive path comes from the record)."""
    folder.mkdir(parents=True)
    record = {"task": "listops", "attention": "llops", "seed": 0, "tag": "quick", "status": "completed",
              "metrics": {"test_acc": 0.3}, **fields}
    (folder / "result.json").write_text(json.dumps(record))
    return folder


def secret(tmp_path) -> Path:
    path = tmp_path / "passwd"
    path.write_text(SECRET)
    return path


@pytest.mark.parametrize("field, value", [("tag", "../../.."), ("attention", "../../../escaped"),
                                          ("tag", "/ABSOLUTE"), ("task", ".."), ("seed", "0/../..")])
def test_a_crafted_record_cannot_archive_outside_the_destination(tmp_path, capsys, field, value):
    value = value.replace("/ABSOLUTE", str(tmp_path / "absolute"))
    run_dir = completed_run(tmp_path / "elsewhere" / "run", **{field: value})
    dest = tmp_path / "a" / "b" / "dest"
    assert archive_main([str(run_dir), "--to", str(dest)]) == 1
    assert "error:" in capsys.readouterr().err
    assert sorted(tmp_path.rglob("result.json")) == [run_dir / "result.json"]  # nothing written anywhere


def test_an_archive_path_through_a_link_out_of_the_destination_is_refused(tmp_path):
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "listops").symlink_to(outside)
    with pytest.raises(ValueError, match="leads outside"):
        archive(completed_run(tmp_path / "run"), dest)
    assert not list(outside.iterdir())


def test_a_linked_metrics_csv_is_not_archived(tmp_path):
    run_dir = completed_run(tmp_path / "run")
    (run_dir / "csv").mkdir()
    (run_dir / "csv" / "metrics.csv").symlink_to(secret(tmp_path))
    with pytest.raises(OSError, match=r"csv/metrics.csv is a symbolic link"):
        archive(run_dir, tmp_path / "dest")
    assert not any(SECRET in p.read_text() for p in (tmp_path / "dest").rglob("*") if p.is_file())


def test_an_archived_record_linked_elsewhere_is_not_written_through(tmp_path):
    run_dir = completed_run(tmp_path / "run")
    target = secret(tmp_path)
    dest = tmp_path / "dest" / "listops" / "llops" / "seed0" / "quick"
    dest.mkdir(parents=True)
    (dest / "result.json").symlink_to(target)
    with pytest.raises(OSError, match=r"quick/result.json is a symbolic link"):
        archive(run_dir, tmp_path / "dest")
    assert target.read_text() == SECRET


def test_a_cut_write_leaves_the_earlier_archive_whole(tmp_path):
    run_dir = completed_run(tmp_path / "run", config={"padding": "x" * 4000})
    dest = archive(run_dir, tmp_path / "dest")
    earlier = (dest / "result.json").read_bytes()
    assert len(earlier) > 4000
    record = json.loads(earlier)
    (run_dir / "result.json").write_text(json.dumps({**record, "config": {"padding": "y" * 4000}}))

    def file_size_limit() -> None:  # as `ulimit -f 1`: writes past 1,024 bytes fail (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    result = subprocess.run([sys.executable, "-m", "results.archive", str(run_dir), "--to", str(tmp_path / "dest")],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, preexec_fn=file_size_limit,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "error:" in result.stderr, result.stderr[-2000:]
    assert (dest / "result.json").read_bytes() == earlier
    assert sorted(p.name for p in dest.iterdir()) == ["result.json"]  # no temporary file left


def test_an_analysis_figure_linked_elsewhere_is_not_copied_onto_the_page(tmp_path):
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.3)
    record = write_analysis_record("link_probe", [{"x": 1, "accuracy": 1.0}], keys=["x"], config={},
                                   started=time.time(), published=None, out_root=tmp_path / "runs" / "analyses")
    (record.parent / "link_probe.png").symlink_to(secret(tmp_path))
    with pytest.raises(OSError, match=r"link_probe.png is a symbolic link"):
        results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--html"])
    assert not any(SECRET in p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file())


def test_a_microscope_figure_linked_elsewhere_is_not_copied(tmp_path):
    record_path = tmp_path / "analysis" / "result.json"
    record_path.parent.mkdir()
    (record_path.parent / "microscope.png").symlink_to(secret(tmp_path))
    with pytest.raises(OSError, match=r"microscope.png is a symbolic link"):
        write_microscope_tables({"rows": []}, tmp_path / "out", record_path)
    assert not (tmp_path / "out" / "microscope.png").exists()
