"""End to end: ``lra.run.train.run`` per attention, ``run.py`` as a user calls it, multirun, user errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

import attention_zoo
from lra.run.callbacks import CheckpointOnPreemption
from lra.run.record import RunRecord
from lra.run.train import run
from lra_base.errors import UserError, refused_before_training
from tests.lra.conftest import ROOT, TINY, compose_run, tiny, torchless_env


def run_py(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("attention", attention_zoo.available())
def test_fast_dev_run_per_attention(attention, tiny_overrides, tmp_path):
    record = run(compose_run([f"attention={attention}", "trainer=debug", *tiny_overrides]), tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == record["status"] == "completed"
    assert saved["attention"] == attention and saved["task"] == "listops"
    assert 0.0 <= saved["metrics"]["test_acc"] <= 1.0 and 0.0 < saved["metrics"]["majority_acc"] < 1.0
    assert saved["params"] > 0 and saved["config"]["attention"]["name"] == attention


def test_training_checkpoints_best_validation_and_tests_it(tiny_overrides, tmp_path):
    record = run(compose_run(["attention=linear", "task.max_steps=8", "task.eval_every=4", *tiny_overrides]), tmp_path)
    assert record["steps"] == 8
    best = record["best_checkpoint"]
    assert best and os.path.exists(best) and (tmp_path / "checkpoints" / "last.ckpt").exists()
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 8  # the latest validation, improved or not: a rerun resumes from the end
    log = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    header = log[0].split(",")
    vals = [float(row.split(",")[header.index("val/acc")]) for row in log[1:]
            if row.split(",")[header.index("val/acc")]]
    assert len(vals) == 2 and record["metrics"]["val_acc"] == pytest.approx(max(vals))
    assert (tmp_path / "tensorboard").is_dir()
    assert record["tokens_per_s"] > 0 and record["wall_time_s"] > 0
    assert set(json.loads((tmp_path / "result.json").read_text())) <= set(RunRecord.__annotations__)


def test_settings_are_refused_before_a_run_exists(tiny_overrides):
    """Bad settings never reach ``lra.run.train.run``: the ``Run`` they would make is refused as it is parsed."""
    with pytest.raises(UserError, match="not divisible by model.heads=3"):
        compose_run(["attention=softmax", "trainer=debug", "model.heads=3", *tiny_overrides])


def test_a_user_error_during_training_leaves_a_failed_record(tiny_data_dir, tmp_path, monkeypatch):
    def fail_at_step_2(self, trainer, *args):
        if trainer.global_step == 2:
            raise UserError("stopped while training")

    monkeypatch.setattr(CheckpointOnPreemption, "on_train_batch_start", fail_at_step_2, raising=False)
    with pytest.raises(UserError, match="stopped while training") as error:
        run(tiny(tiny_data_dir), tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert not refused_before_training(error.value)
    assert saved["status"] == "failed" and saved["error"] == "stopped while training" and saved["steps"] == 2


def test_run_py_with_no_prepared_data_writes_no_record_and_removes_the_folder_it_made(tmp_path):
    empty, folder, earlier = tmp_path / "empty", tmp_path / "run", tmp_path / "earlier"
    empty.mkdir()
    (earlier / "notes").mkdir(parents=True)
    for run_dir in (folder, earlier):
        result = run_py("task=text", "attention=linear", "experiment=quick", f"data_dir={empty}",
                        f"hydra.run.dir={run_dir}", cwd=tmp_path)
        assert result.returncode == 2 and f"python -m data_prep text --source PATH --out {empty}" in result.stderr
        assert "Traceback" not in result.stderr and "Logging error" not in result.stderr
    assert not folder.exists()  # this command made it: gone
    assert (earlier / "notes").is_dir() and not (earlier / "result.json").exists()  # there before: kept, no record


def damage(split_file) -> None:
    """Flip one byte in the middle of ``split_file``: its checksum no longer matches the manifest's."""
    blob = bytearray(split_file.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    split_file.write_bytes(bytes(blob))


def test_bad_data_leaves_no_record_and_keeps_the_folders_earlier_one(tmp_path):
    data, folder = tmp_path / "data", tmp_path / "run"
    cfg = tiny(data)
    subprocess.run([sys.executable, "-m", "data_prep", "listops", "--out", str(data / "quick"), "--train", "160",
                    "--val", "64", "--test", "64", "--min-length", "20", "--max-length", "60"],  # TINY's ListOps
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    damage(data / "quick" / "listops" / "val.npz")
    with pytest.raises(UserError, match=r"val.npz.*python -m data_prep listops") as error:
        run(cfg, folder)
    assert refused_before_training(error.value) and not (folder / "result.json").exists()
    earlier = {"task": "listops", "attention": "linear", "seed": 0, "status": "interrupted"}
    (folder / "result.json").write_text(json.dumps(earlier))
    with pytest.raises(UserError, match="val.npz"):
        run(cfg, folder)
    assert json.loads((folder / "result.json").read_text()) == earlier


def test_run_py_quick_command_and_two_job_multirun(tiny_data_dir, tmp_path):
    common = ["experiment=quick", "trainer=debug", f"data_dir={tiny_data_dir}", *TINY]
    single = run_py("attention=llops", *common, f"hydra.run.dir={tmp_path / 'single'}", cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    assert "test_acc=" in single.stdout and (tmp_path / "single" / "result.json").exists()
    assert "litlogger" not in single.stdout + single.stderr and "LeafSpec" not in single.stdout + single.stderr
    assert "test_acc=" in (tmp_path / "single" / "run.log").read_text()  # the metrics line and the record path
    # steps fewer than the validation interval (250 in quick): each job validates at its end, the sweep exits 0
    short = [c for c in common if c != "trainer=debug"] + ["++trainer.max_steps=2", "trainer.enable_progress_bar=false"]
    multi = run_py("-m", "attention=softmax,linear", *short, f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert multi.returncode == 0, multi.stderr[-2000:]
    records = sorted((tmp_path / "sweep").rglob("result.json"))
    assert [json.loads(p.read_text())["attention"] for p in records] == ["linear", "softmax"]
    assert all("seed0/quick" in str(p) for p in records)
    assert all(json.loads(p.read_text())["metrics"]["val_acc"] is not None for p in records)
    assert not (tmp_path / "sweep" / "multirun.yaml").exists()  # filed, so the next sweep cannot overwrite it
    assert len(list((tmp_path / "sweep" / "multirun").glob("*.yaml"))) == 1


@pytest.mark.parametrize("override,expected", [
    ("attention=nope", "attention=nope: attention has no option 'nope'; Valid options for attention: based,"),
    ("task=nope", "task=nope: task has no option 'nope'; Valid options for task: ar, image,"),
    ("+attention.degre=3", "valid options: degree=4"),
])
def test_user_errors_are_one_clear_message(override, expected, tmp_path):
    result = run_py("attention=llops", override, "trainer=debug", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 2
    assert expected in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def slurm_launcher_case() -> tuple[list[str], str]:
    """``hydra/launcher=slurm`` as the installed environment answers it: without the ``slurm`` extra, refused with
    the install command; with it, the preset composes and the settings check still refuses a bad value."""
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return ["hydra/launcher=slurm"], 'pip install -e ".[slurm]"'
    return ["hydra/launcher=slurm", "model.dim=65"], "not divisible by model.heads=2"


def test_run_py_refuses_a_typo_before_importing_torch(tmp_path):
    env = torchless_env(tmp_path)
    for args, message in ((["+task.max_stepz=10"], "Valid keys under task"),
                          (["model.dim=65"], "not divisible by model.heads=2"),
                          slurm_launcher_case()):
        result = subprocess.run([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path / 'run'}"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr


def test_corrupt_data_names_the_file_and_the_rebuild_command(tiny_data_dir, tmp_path):
    data = tmp_path / "data"
    common = ["experiment=quick", "trainer=debug", f"data_dir={data}", *TINY, f"hydra.run.dir={tmp_path / 'r'}"]
    assert run_py("attention=linear", *common, cwd=tmp_path).returncode == 0
    train = data / "quick" / "listops" / "train.npz"
    blob = bytearray(train.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    train.write_bytes(bytes(blob))
    result = run_py("attention=linear", *common, "rerun=true", cwd=tmp_path)
    assert result.returncode == 2
    assert str(train) in result.stderr and "python -m data_prep listops" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_failing_sweep_job_does_not_stop_the_others_and_the_sweep_ends_listing_it_with_exit_1(tiny_data_dir,
                                                                                                  tmp_path):
    result = run_py("-m", "attention=softmax", "model.heads=3,2", "experiment=quick", "trainer=debug",
                    f"data_dir={tiny_data_dir}", *TINY, f"hydra.sweep.dir={tmp_path}",
                    "hydra.sweep.subdir=job${hydra.job.num}", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "not divisible by model.heads=3" in result.stderr
    assert not (tmp_path / "job0" / "result.json").exists()  # refused by the settings check: no record
    assert json.loads((tmp_path / "job1" / "result.json").read_text())["status"] == "completed"
    summary = result.stdout[result.stdout.index("sweep: 2 job(s), 1 completed, 1 not"):].splitlines()
    assert [line.split() for line in summary[1:]] == [["refused", str(tmp_path / "job0")],
                                                      ["completed", str(tmp_path / "job1")]]
