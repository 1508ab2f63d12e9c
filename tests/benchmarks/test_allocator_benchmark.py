"""The allocator benchmark runs its cases end to end on a tiny generated ListOps (no timing is asserted)."""

from __future__ import annotations

import os

import pandas as pd

from benchmarks import allocator

TINY = ["task.data.generate.train=160", "task.data.generate.val=64", "task.data.generate.test=40",
        "task.data.generate.min_length=20", "task.data.generate.max_length=60", "task.batch_size=8"]


def test_thp_mode_reads_the_bracketed_word(tmp_path, monkeypatch):
    mode = tmp_path / "enabled"
    mode.write_text("always [madvise] never\n")
    monkeypatch.setattr(allocator, "THP_MODE", mode)
    assert allocator.thp_mode() == "madvise"
    monkeypatch.setattr(allocator, "THP_MODE", tmp_path / "absent")
    assert allocator.thp_mode() == "unknown"


def test_a_case_starts_from_this_environment_without_the_other_settings(monkeypatch):
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    default = allocator.case_env("default", threads=1)
    assert "THP_MEM_ALLOC_ENABLE" not in default and "GLIBC_TUNABLES" not in default
    assert default["OMP_NUM_THREADS"] == "1"
    thp = allocator.case_env("thp", threads=2)
    assert thp["THP_MEM_ALLOC_ENABLE"] == "1" and "GLIBC_TUNABLES" not in thp and thp["OMP_NUM_THREADS"] == "2"


def test_each_setting_runs_in_its_own_process_and_is_compared_to_default(tmp_path, capsys):
    out = tmp_path / "out"
    code = allocator.main(["--settings", "default", "thp", "--steps", "3", "--warmup", "1", "--release-every", "2",
                           "--rounds", "1", "--out", str(out), "experiment=quick", f"data_dir={tmp_path / 'data'}",
                           *TINY])
    assert code == 0
    frame = pd.read_csv(out / "allocator.csv")
    assert list(frame.setting) == ["default", "thp"]
    assert frame.loc[0, "ratio_to_default"] == 1.0
    assert (frame.step_cpu_s > 0).all() and (frame.peak_mib > 0).all() and (frame.faults_mib_per_step >= 0).all()
    assert "round 0       thp" in capsys.readouterr().out
    case = frame[["task", "attention", "threads", "steps", "release_every"]].drop_duplicates().to_dict("records")
    assert case == [{"task": "listops", "attention": "llops", "threads": int(os.environ.get("OMP_NUM_THREADS", 1)),
                     "steps": 3, "release_every": 2}]  # before, the table's title assumed them
    assert "experiment=quick" in frame.overrides[0]
