"""What a process killed with ``kill -9`` leaves (temporary files, orphan best checkpoints, staging folders) is
removed by the next command that writes in that place, and only what no live process holds (issue 58 point 12)."""

from __future__ import annotations

import os
import time

import torch

from data_prep.__main__ import main as data_prep_main
from lra.run.train import run
from lra_base.atomic import write_atomic
from lra_base.leftovers import QUIET_S, remove_orphan_checkpoints
from lra_base.lock import holding
from tests.lra.conftest import compose_run


def left_by_a_dead_process(path, content: bytes = b"half a file") -> None:
    """``path`` as a killed writer leaves it: written, unlocked, unchanged for longer than ``QUIET_S``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".staging"):
        path.mkdir()
        (path / "train.npz").write_bytes(content)
    else:
        path.write_bytes(content)
    old = time.time() - QUIET_S - 5
    os.utime(path, (old, old))


def test_the_next_write_in_a_folder_removes_the_temporary_files_killed_writers_left(tmp_path):
    tables = tmp_path / "tables"
    dead = [tables / ".lra.md.k2j4h6g8.tmp", tables / ".lra.png.a_b1c2d3.tmp"]
    for path in dead:
        left_by_a_dead_process(path)
    live = tables / ".runs.csv.x1y2z3w4.tmp"
    left_by_a_dead_process(live)
    fresh = tables / ".lra.csv.q1w2e3r4.tmp"  # made an instant ago: its writer may not hold its lock yet
    fresh.write_bytes(b"")
    mine = tables / "notes.tmp"  # not a name the atomic writer makes
    left_by_a_dead_process(mine)
    with holding(live):  # a live writer's file
        write_atomic(tables / "lra.md", "table\n")
    assert sorted(p.name for p in tables.iterdir()) == sorted(
        ["lra.md", live.name, fresh.name, mine.name])


def test_a_run_removes_what_a_killed_run_left_in_its_folder(tiny_overrides, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    left_by_a_dead_process(checkpoints / ".last.ckpt.abcd1234.tmp")
    left_by_a_dead_process(checkpoints / "best-step2.ckpt")  # saved after the last last.ckpt (there is none)
    left_by_a_dead_process(tmp_path / ".result.json.abcd1234.tmp")
    record = run(compose_run(["attention=linear", "trainer=debug", *tiny_overrides]), tmp_path)
    assert record["status"] == "completed"
    assert not (tmp_path / ".result.json.abcd1234.tmp").exists()
    assert not checkpoints.exists() or list(checkpoints.iterdir()) == []


def test_orphan_best_checkpoints_go_and_the_ones_last_ckpt_names_stay(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    state = {"best_model_path": "/where/it/ran/checkpoints/best-step4.ckpt", "best_k_models": {}}
    torch.save({"global_step": 6, "callbacks": {"ModelCheckpoint{'monitor': 'val/acc'}": state,
                                                "ModelCheckpoint{'monitor': None}": {"best_model_path": ""}}},
               checkpoints / "last.ckpt")
    for name in ("best-step4.ckpt", "best-step8.ckpt", "best-step8-v1.ckpt", "best-step8-v2.ckpt", "mine.ckpt"):
        (checkpoints / name).write_bytes(b"x")
    removed = remove_orphan_checkpoints(tmp_path)
    assert sorted(p.name for p in removed) == ["best-step8-v1.ckpt", "best-step8-v2.ckpt", "best-step8.ckpt"]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best-step4.ckpt", "last.ckpt", "mine.ckpt"]


def test_a_damaged_last_ckpt_removes_no_checkpoint(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "last.ckpt").write_bytes(b"torn")
    (checkpoints / "best-step8.ckpt").write_bytes(b"x")
    assert remove_orphan_checkpoints(tmp_path) == []


def test_the_next_data_prep_removes_staging_folders_killed_writers_left(tmp_path):
    dead, live = tmp_path / ".listops.abcd1234.staging", tmp_path / ".listops.efgh5678.staging"
    left_by_a_dead_process(dead, b"43 MB")
    left_by_a_dead_process(live)
    with holding(live):  # another data_prep still writing
        assert data_prep_main(["listops", "--out", str(tmp_path), "--train", "20", "--val", "5", "--test", "5"]) == 0
    assert not dead.exists() and live.exists()
    assert (tmp_path / "listops" / "manifest.json").is_file()
