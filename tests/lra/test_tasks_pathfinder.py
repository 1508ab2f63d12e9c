"""Pathfinder and Path-X end to end: data generated on first use from ``task.data.generate``, fast_dev_run
with two attentions, fixed-length sequences whose masks come from lengths, and a clear stale-data error."""

from __future__ import annotations

import json

import pytest
import torch

from lra.run.train import run
from lra.settings import Run
from lra.tasks import pathfinder as pathfinder_task
from lra_base.errors import UserError
from tests.lra.conftest import compose_run


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """A data folder holding 64 generated Pathfinder images, made here: under ``pytest -n`` the tests of this module
    may run on several workers in any order, so none may count on another to have made it."""
    root = tmp_path_factory.mktemp("pf_data")
    pathfinder_task.DataModule(config("pathfinder", root, 64)).prepare_data()
    return root


def config(task: str, data_root, count: int, *overrides: str) -> Run:
    return compose_run([f"task={task}", f"data_dir={data_root}", f"task.data.generate.count={count}",
                        "task.data.generate.workers=1", "task.batch_size=8", *overrides])


@pytest.mark.parametrize("attention", ["softmax", "llops"])
def test_pathfinder_fast_dev_run(attention, data_root, tmp_path):
    cfg = config("pathfinder", data_root, 64, f"attention={attention}", "trainer=debug", "trainer.fast_dev_run=1")
    record = run(cfg, tmp_path)
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["status"] == record["status"] == "completed"
    assert saved["task"] == "pathfinder" and saved["attention"] == attention
    assert saved["metrics"]["majority_acc"] == pytest.approx(0.5, abs=0.25)
    assert (data_root / "pathfinder" / "manifest.json").is_file()


def test_pathfinder_batches_are_full_images_with_black_pixels_as_tokens(data_root):
    module = pathfinder_task.DataModule(config("pathfinder", data_root, 64))
    module.prepare_data()
    module.setup()
    batch = next(iter(module.train_dataloader()))
    assert batch["tokens"].shape == (8, 1024) and (batch["lengths"] == 1024).all()
    assert (batch["tokens"] == 0).any() and int(batch["tokens"].max()) <= 255
    assert module.vocab_size == 256 and module.num_classes == 2


def test_stale_pathfinder_data_names_both_commands(data_root):
    module = pathfinder_task.DataModule(config("pathfinder", data_root, 80))
    with pytest.raises(UserError, match=r"--count 64 .*--count 80"):
        module.prepare_data()


def test_pathfinder_data_of_another_contour_length_is_stale(data_root):
    module = pathfinder_task.DataModule(config("pathfinder", data_root, 64, "task.data.generate.contour_length=6"))
    with pytest.raises(UserError, match=r"--count 64 --seed 0`, but .*--count 64 --seed 0 --contour-length 6"):
        module.prepare_data()


def test_pathx_fast_dev_run_with_llops(tmp_path):
    cfg = config("pathx", tmp_path / "data", 10, "attention=llops", "trainer=debug", "trainer.fast_dev_run=1",
                 "task.batch_size=2")
    torch.manual_seed(0)
    record = run(cfg, tmp_path / "run")
    assert record["status"] == "completed" and record["task"] == "pathx"
    assert record["config"]["task"]["max_len"] == 16384
