"""Settings that used to fail late (a traceback, or a ``failed`` record) are refused in one line before torch and the
data load, and a full disk or a foreign ``result.json`` is one line too (issue 58 point 13)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from lra.checks import check_memory
from lra_base.errors import UserError
from tests.lra.conftest import ROOT, TINY, compose_config, torchless_env
from tests.lra.test_run_folder_guard import snapshot

SHORT = ["attention=linear", "experiment=quick", "task.max_steps=20", "task.eval_every=10"]


def run_py(*args: str, cwd, env=None, preexec_fn=None) -> subprocess.CompletedProcess:
    env = env or {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=preexec_fn)


def one_error_line(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:] and expected in lines[-1], \
        result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("override, expected", [
    ("trainer.precision=bogus", "trainer.precision='bogus': must be one of 64, 32, 16, bf16, 16-true"),
    ("trainer.gradient_clip_val=nan", "trainer.gradient_clip_val=nan: must be a finite number >= 0"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val=-1: must be a finite number >= 0"),
    ("+trainer.gradient_clip_algorithm=max", "trainer.gradient_clip_algorithm='max': must be null (norm), norm or"),
    ("+trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0: must be an integer >= 1; to run each"),
    ("task.max_len=100000000000", "task.max_len=100000000000: its position embedding alone"),
    ("task.optim.schedule=bogus", "task.optim.schedule='bogus': must be one of linear, constant, rsqrt"),
    ("task.num_classes=1", "task.num_classes=1: must be an integer >= 2"),
    ("+trainer.limit_val_batches=0.5", "trainer.limit_val_batches=0.5: evaluation goes longest example first"),
    ("+trainer.limit_test_batches=1", "trainer.limit_test_batches=1: evaluation goes longest example first"),
], ids=["precision", "clip_nan", "clip_negative", "clip_algorithm", "accumulate", "max_len", "schedule",
        "num_classes", "limit_val", "limit_test_one_batch"])
def test_settings_that_failed_late_are_refused_before_torch_loads(tmp_path, override, expected):
    result = run_py(*SHORT, override, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=torchless_env(tmp_path))
    one_error_line(result, f"error: {expected}")
    assert not (tmp_path / "run").exists()  # no record, no .hydra/, no run.log


def test_the_memory_check_counts_the_position_embedding_and_its_training_copies():
    cfg = compose_config(SHORT)
    cfg["task"]["max_len"], cfg["model"]["dim"] = 1000, 64
    check_memory(cfg, memory=4 * 4 * 1000 * 64)  # weights, gradient, two AdamW moments: fits exactly
    with pytest.raises(UserError, match="needs 0 GiB, more than"):
        check_memory(cfg, memory=4 * 4 * 1000 * 64 - 1)


def test_a_deeply_nested_result_json_is_refused_by_name_and_the_folder_left_alone(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    before = snapshot(folder)
    result = run_py(*SHORT, f"hydra.run.dir={folder}", cwd=tmp_path, env=torchless_env(tmp_path))
    one_error_line(result, f"error: {folder / 'result.json'} is nested too deeply to read")
    assert snapshot(folder) == before  # no .hydra/, no run.log, no record


def small_files() -> None:
    """In the child: files of at most 100 KB (``ulimit -f 100``); a checkpoint is larger."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, resource.RLIM_INFINITY))


def test_a_file_size_limit_during_a_run_is_one_line_and_so_is_the_records_error(tiny_data_dir, tmp_path):
    folder = tmp_path / "run"
    result = run_py(*SHORT, f"data_dir={tiny_data_dir}", *TINY, "task.max_steps=2", "task.eval_every=2",
                    "trainer.enable_progress_bar=false", f"hydra.run.dir={folder}", cwd=tmp_path,
                    preexec_fn=small_files)
    one_error_line(result, "or a file reached this process's file size limit (102,400 bytes: ulimit -f)")
    record = json.loads((folder / "result.json").read_text())
    assert record["status"] == "failed" and "\n" not in record["error"] and "unexpected pos" not in record["error"]
    assert not list(folder.rglob("*.tmp"))  # the torn checkpoint's temporary file is gone
