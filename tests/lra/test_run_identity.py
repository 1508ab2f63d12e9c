"""A run folder holds one run (issue 30, point 2): every setting that changes what a run computes names its folder,
and a command whose settings differ from the folder's checkpoint or completed record is refused by name, never
resumed or answered with another run's record."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from hydra import compose, initialize_config_dir

from lra.run.record_compat import upgrade
from lra.run.train import run
from lra_base.errors import UserError
from tests.lra.conftest import CONF, ROOT, TINY, compose_run, tiny, torchless_env


def run_dir_of(*overrides: str) -> str:
    """The folder ``python run.py <overrides>`` writes (``hydra.run.dir``, resolved)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", return_hydra_config=True, overrides=list(overrides)).hydra.run.dir


QUICK = ("task=listops", "attention=linear", "experiment=quick")


def test_the_identity_holds_what_changes_the_numbers_and_nothing_else():
    quick = compose_run(list(QUICK))
    moved = compose_run([*QUICK, "data_dir=/elsewhere", "task.data.num_workers=3", "trainer.devices=1",
                         "trainer.enable_progress_bar=false", "model.checkpoint_blocks=true", "rerun=true",
                         "tag=mine"])
    assert moved.identity() == quick.identity() and moved.digest() == quick.digest()
    assert len(quick.digest()) == 12 and quick.identity()["task.optim.lr"] == 0.001
    assert "task.data.root" not in quick.identity() and "model.qkv_dim" not in quick.identity()  # where; null
    debug = compose_run([*QUICK, "trainer=debug"])
    assert ("trainer.fast_dev_run", "<absent>", 2) in quick.differences(debug)
    config = quick.config()
    older = upgrade({**config, "model": {k: v for k, v in config["model"].items() if k != "attention_dropout"}})
    assert older.differences(quick) == []  # a key added to conf/ later: the value older runs used


def test_micro_batches_count_and_their_whole_batch_value_keeps_the_digests_of_earlier_runs():
    """A batch in parts draws other dropout masks than the whole batch (issue 58, point 4): ``task.micro_batches``
    is part of the identity; at 1 (the whole batch, what every run before had) it is absent, so their digests stay,
    and a record or checkpoint without the key compares as 1."""
    quick, parts = compose_run(list(QUICK)), compose_run([*QUICK, "task.micro_batches=2"])
    assert parts.identity()["task.micro_batches"] == 2 and "task.micro_batches" not in quick.identity()
    assert parts.digest() != quick.digest()
    assert quick.differences(parts) == [("task.micro_batches", 1, 2)]
    config = quick.config()
    older = upgrade({**config, "task": {k: v for k, v in config["task"].items() if k != "micro_batches"}})
    assert older.differences(quick) == [] and older.differences(parts) == [("task.micro_batches", 1, 2)]
    retrieval = compose_run(["task=retrieval"])  # its protocol computes each batch in 4 parts
    assert retrieval.identity()["task.micro_batches"] == 4
    assert retrieval.differences(compose_run(["task=retrieval", "task.micro_batches=1"])) == [
        ("task.micro_batches", 4, 1)]


def test_a_debug_run_does_not_land_in_the_protocol_runs_folder():
    assert run_dir_of(*QUICK) == "outputs/listops/linear/seed0/quick"
    assert run_dir_of(*QUICK, "trainer=debug") != run_dir_of(*QUICK)


@pytest.mark.parametrize("overrides, folder", [
    ((), "default"),
    (("task.optim.lr=0.002",), "default,task.optim.lr=0.002"),
    (("model.dim=128", "task.optim.lr=0.002"), "default,model.dim=128,task.optim.lr=0.002"),
    (("trainer=cpu", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=5", "data_dir=elsewhere",
      "task.data.num_workers=2", "trainer.devices=1", "rerun=true", "model.checkpoint_blocks=true",
      "reuse_freed_memory=false", "flush_subnormals=false"), "default"),
    (("task.micro_batches=2",), "default,task.micro_batches=2"),  # each part its own dropout masks
    (("trainer.max_steps=40",), "default,trainer.max_steps=40"),
    (("+trainer.limit_val_batches=0.5",), "default,+trainer.limit_val_batches=0.5"),
    (("+trainer.fast_dev_run=3",), "default,+trainer.fast_dev_run=3"),
    (("trainer=gpu",), "default,trainer=gpu"),  # bf16: other numbers
    (("trainer=debug",), "default,trainer=debug"),
], ids=["plain", "lr", "two", "where-or-how", "micro_batches", "max_steps", "limit", "fast_dev_run", "gpu", "debug"])
def test_the_folder_name_lists_the_overrides_that_change_the_numbers(overrides, folder):
    assert run_dir_of("seed=1", *overrides) == f"outputs/listops/softmax/seed1/{folder}"


def copy_of(folder, tmp_path):
    shutil.copytree(folder, tmp_path / "run")
    return tmp_path / "run"


def untouched(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("changed, named", [
    ("task.optim.lr=0.05", "task.optim.lr: 0.001 -> 0.05"),
    ("model.dim=32", "model.dim: 64 -> 32"),
    ("task.micro_batches=2", "task.micro_batches: 1 -> 2"),
], ids=["lr", "model.dim", "micro_batches"])
def test_a_resume_with_other_settings_is_refused_by_name(interrupted, tiny_data_dir, tmp_path, changed, named):
    folder = copy_of(interrupted, tmp_path)
    before = untouched(folder)
    with pytest.raises(UserError) as refused:
        run(tiny(tiny_data_dir, changed), folder)
    message = str(refused.value)
    assert named in message and "last.ckpt" in message and "rerun=true" in message, message
    assert untouched(folder) == before  # the interrupted run's record and checkpoint stay as they were


def test_a_changed_experiment_yaml_between_interrupt_and_resume_is_refused(interrupted, tiny_data_dir, tmp_path,
                                                                           monkeypatch):
    """The same command after conf/experiment/quick/listops.yaml's lr changed: the composed config differs."""
    folder = copy_of(interrupted, tmp_path)
    quick = tiny(tiny_data_dir)
    changed = replace(quick, task=replace(quick.task, optim=replace(quick.task.optim, lr=0.05)))
    with pytest.raises(UserError, match=r"task\.optim\.lr: 0\.001 -> 0\.05"):
        run(changed, folder)


def test_a_resume_that_changes_only_where_or_how_goes_on(interrupted, tiny_data_dir, tmp_path):
    folder = copy_of(interrupted, tmp_path)
    record = run(tiny(tiny_data_dir, "trainer.log_every_n_steps=3", "model.checkpoint_blocks=true"), folder)
    assert record["status"] == "completed" and record["steps"] == 12


def test_rerun_true_starts_a_folder_of_other_settings_again(interrupted, tiny_data_dir, tmp_path):
    folder = copy_of(interrupted, tmp_path)
    record = run(tiny(tiny_data_dir, "task.optim.lr=0.05", "rerun=true"), folder)
    assert record["status"] == "completed" and record["config"]["task"]["optim"]["lr"] == 0.05
    assert list((folder / "replaced").glob("*/checkpoints/last.ckpt"))


def test_a_checkpoint_written_before_a_setting_existed_still_resumes(interrupted, tiny_data_dir, tmp_path):
    """A last.ckpt whose saved config lacks a key added to conf/ later (model.attention_dropout, implicitly 0.0)."""
    folder = copy_of(interrupted, tmp_path)
    last = folder / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=True)
    del state["hyper_parameters"]["cfg"]["model"]["attention_dropout"]
    state.pop("run_identity", None)
    torch.save(state, last)
    assert run(tiny(tiny_data_dir), folder)["status"] == "completed"


def completed_quick(folder, data_dir) -> dict:
    """A completed record of the quick run in ``folder``."""
    cfg = tiny(data_dir)
    record = {"task": "listops", "attention": "linear", "seed": 0, "tag": "quick", "experiment": "quick",
              "status": "completed", "metrics": {"val_acc": 0.3, "test_acc": 0.0938}, "config": cfg.config()}
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(record))
    return record


def test_tag_quick_without_the_experiment_is_not_answered_with_the_quick_record(tiny_data_dir, tmp_path):
    completed_quick(tmp_path / "run", tiny_data_dir)
    default_protocol = compose_run(["attention=linear", "tag=quick", f"data_dir={tiny_data_dir}", *TINY,
                                    "trainer.enable_progress_bar=false"])
    with pytest.raises(UserError) as refused:
        run(default_protocol, tmp_path / "run")
    message = str(refused.value)
    assert "task.max_steps: 12 -> 5000" in message and "result.json" in message and "rerun=true" in message


def test_a_debug_run_into_a_completed_folder_of_the_protocol_is_refused(tiny_data_dir, tmp_path):
    completed_quick(tmp_path / "run", tiny_data_dir)
    with pytest.raises(UserError, match=r"trainer\.fast_dev_run: <absent> -> 2"):
        run(tiny(tiny_data_dir, "trainer=debug"), tmp_path / "run")


def test_run_py_refuses_another_runs_completed_folder_before_torch_loads_and_writes_nothing(tiny_data_dir,
                                                                                           tmp_path):
    folder = tmp_path / "run"
    completed_quick(folder, tiny_data_dir)
    before = untouched(folder)
    result = subprocess.run([sys.executable, str(ROOT / "run.py"), "attention=linear", "tag=quick",
                             f"data_dir={tiny_data_dir}", *TINY, "trainer.enable_progress_bar=false",
                             f"hydra.run.dir={folder}"], cwd=tmp_path, env=torchless_env(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "error: " in result.stderr and "task.max_steps: 12 -> 5000" in result.stderr, \
        result.stderr[-2000:]
    assert "torch was imported" not in result.stderr and untouched(folder) == before  # no .hydra/, no run.log
