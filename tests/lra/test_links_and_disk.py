"""A run's lock, record and checkpoints are never opened through a symbolic link, and a full disk stops a run
with one line, the previous ``last.ckpt`` whole and a rerun that resumes (issue 29, points 1 and 5)."""

from __future__ import annotations

import errno
import io
import json
import logging

import pytest
import torch
from torch.utils.tensorboard import SummaryWriter

from lra.run.train import run
from lra.settings import Run
from lra_base.errors import UserError
from lra_base.lock import LOCK_NAME, run_folder_lock
from tests.lra.conftest import TINY, compose_run

SECRET = "victim: must stay as it is\n"


def tiny(data_dir, *overrides: str) -> Run:
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY,
                        "trainer.enable_progress_bar=false", *overrides])


def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text(SECRET)
    return path


def test_a_linked_lock_file_is_refused_by_name_and_its_target_left_alone(tmp_path):
    target = victim(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).symlink_to(target)
    with pytest.raises(UserError, match=rf"{run_dir / LOCK_NAME} is a symbolic link .*rm "), run_folder_lock(run_dir):
        pass
    assert target.read_text() == SECRET


@pytest.mark.parametrize("name", ["result.json", "checkpoints/last.ckpt", "csv/metrics.csv", "csv/hparams.yaml",
                                  "tensorboard/hparams.yaml"])
def test_a_linked_record_or_checkpoint_is_refused_before_any_work(tiny_data_dir, tmp_path, name):
    target = victim(tmp_path)
    link = tmp_path / "run" / name
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    with pytest.raises(UserError, match=rf"{link} is a symbolic link \(to {target}\)"):
        run(tiny(tiny_data_dir, "task.max_steps=2", "task.eval_every=2"), tmp_path / "run")
    assert target.read_text() == SECRET and link.is_symlink()


def full_disk_from(step: int):
    """A ``torch.save`` that, for a checkpoint at ``step`` or later, writes half its bytes and fails as a full disk
    would: the write it stands for stops part way."""
    real = torch.save

    def save(obj, f, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("global_step", -1) >= step:
            buffer = io.BytesIO()
            real(obj, buffer, *args, **kwargs)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *args, **kwargs)

    return save


def test_a_full_disk_while_checkpointing_keeps_last_ckpt_whole_and_the_rerun_resumes(tiny_data_dir, tmp_path,
                                                                                     monkeypatch, caplog):
    cfg = tiny(tiny_data_dir, "task.max_steps=4", "task.eval_every=2")
    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", full_disk_from(step=4))
        with pytest.raises(UserError, match=rf"no space left on the disk holding {tmp_path}") as error:
            run(cfg, tmp_path)
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and record["error"] == str(error.value) and "\n" not in record["error"]
    assert "then rerun the same command to resume" in record["error"]
    assert not list((tmp_path / "checkpoints").glob("*.tmp")) and not list((tmp_path / "checkpoints").glob(".*"))
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 2  # the previous one, whole
    with caplog.at_level(logging.INFO, logger="lra.run.train"):
        resumed = run(cfg, tmp_path)
    assert "(step 2)" in caplog.text and resumed["status"] == "completed" and resumed["steps"] == 4


def test_a_full_disk_in_the_test_stage_says_so(tiny_data_dir, tmp_path, monkeypatch):
    real = SummaryWriter.add_scalar

    def add_scalar(self, tag, value, *args, **kwargs):
        if str(tag).startswith("test/"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, tag, value, *args, **kwargs)

    monkeypatch.setattr(SummaryWriter, "add_scalar", add_scalar)
    with pytest.raises(UserError, match=r"no space left on the disk holding .* while writing the run's logs") as error:
        run(tiny(tiny_data_dir, "task.max_steps=2", "task.eval_every=2"), tmp_path)
    assert "you tried to log" not in str(error.value) and "\n" not in str(error.value)
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


def test_a_record_that_does_not_fit_on_the_disk_says_so(tmp_path, monkeypatch):
    from lra.run.train import write_record

    def full(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lra.run.train.write_json_atomic", full)
    with pytest.raises(UserError, match=r"while writing result.json \(status completed\)"):
        write_record(tmp_path, {"status": "completed"})
