"""``task.batch_size`` is the optimizer step's batch over all processes: under DDP each of N ranks takes
batch_size / N examples a step, and the ranks' batches of a step together are the batch one process takes."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

from lra.build import build, refuse_ddp_without_gpu
from lra.checks import split_batch
from lra.run import hydra_hooks
from lra.sampling import EpochSampler
from lra.settings import Run
from lra.tasks.listops import DataModule
from lra_base.errors import UserError
from tests.lra.conftest import TINY, compose_config, compose_run


def data_module(data_dir, world_size: int, *overrides: str, rank: int = 0) -> DataModule:
    module = DataModule(compose_run(["experiment=quick", f"data_dir={data_dir}", *TINY, "task.batch_size=32",
                                     *overrides]))
    module.trainer = SimpleNamespace(world_size=world_size, global_rank=rank)
    module.prepare_data()
    module.setup()
    return module


def cut(order: list[int], size: int) -> list[list[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


@pytest.mark.parametrize("overrides", [[], ["task.batching=length_grouped"], ["task.micro_batches=2"]],
                         ids=["random", "length_grouped", "micro_batches=2"])
def test_the_ranks_of_a_step_together_take_the_batch_of_one_process(tiny_data_dir, overrides):
    single = data_module(tiny_data_dir, 1, *overrides)
    loader = single.train_dataloader()
    loader.sampler.set_epoch(1)
    steps = cut(list(loader.sampler), 32)  # one process: the examples of each optimizer step
    micro = single.task.micro_batches

    ranks = []
    for rank in (0, 1):
        module = data_module(tiny_data_dir, 2, *overrides, rank=rank)
        loader = module.train_dataloader()
        assert loader.batch_size == 32 // (2 * micro)
        loader.sampler.set_epoch(1)
        ranks.append(cut(list(loader.sampler), loader.batch_size * micro))  # this rank's examples of each step
        assert len(loader.sampler) == len(list(loader.sampler))
    assert len(ranks[0]) == len(ranks[1]) == len(steps)
    for step, first, second in zip(steps, *ranks):
        assert len(first) == len(second) == 16
        assert sorted(first + second) == sorted(step)


def test_a_resumed_rank_takes_the_rest_of_its_share(tiny_data_dir):
    ranks = []
    for rank in (0, 1):
        whole = data_module(tiny_data_dir, 2, rank=rank).train_dataloader().sampler
        whole.set_epoch(1)
        resumed = data_module(tiny_data_dir, 2, rank=rank)
        resumed.load_state_dict({"epoch": 1, "batches_done": 2})  # 2 batches of 16 on each rank
        sampler = resumed.train_dataloader().sampler
        sampler.set_epoch(1)
        assert list(sampler) == list(whole)[2 * 16:]
        ranks.append(list(whole))
    assert not set(ranks[0]) & set(ranks[1])  # the ranks share nothing


def test_evaluation_is_split_between_the_ranks_without_repeats(tiny_data_dir):
    single = data_module(tiny_data_dir, 1)
    for split, loader in (("val", "val_dataloader"), ("test", "test_dataloader")):
        shares = [list(getattr(data_module(tiny_data_dir, 3, "task.batch_size=30", rank=r), loader)().sampler)
                  for r in range(3)]
        assert sorted(sum(shares, [])) == sorted(single.eval_order(split)), split  # 64 trees: 22 / 21 / 21


def test_a_batch_that_the_processes_cannot_share_is_refused_by_name(tiny_data_dir):
    module = data_module(tiny_data_dir, 3)
    with pytest.raises(UserError) as error:
        module.train_dataloader()
    assert ("task.batch_size=32 is the batch of one optimizer step over all processes: it must split into 3 "
            "process(es) x task.micro_batches=1 equal parts") in str(error.value)
    assert split_batch(32, 2, processes=4) == 4


@pytest.mark.parametrize("devices, refused", [("3", True), ("[0,1,2]", True), ("2", False), ("auto", False)])
def test_the_config_check_refuses_it_where_the_config_names_the_device_count(devices, refused):
    cfg = compose_config(["task=listops", "trainer=ddp", f"trainer.devices={devices}"])
    if refused:
        with pytest.raises(UserError, match=r"task.batch_size=32 .* 3 process\(es\)"):
            Run.parse(cfg)
    else:
        Run.parse(cfg)


def test_an_evaluation_split_smaller_than_the_processes_is_refused_by_name(tiny_data_dir):
    module = data_module(tiny_data_dir, 128, "task.batch_size=128", rank=5)  # 64 validation trees
    with pytest.raises(UserError, match="the val split has 64 examples, fewer than the 128 processes"):
        module.val_dataloader()
    module = data_module(tiny_data_dir, 256, "task.batch_size=256", rank=5)  # 160 training trees
    with pytest.raises(UserError, match="the training split has 160 examples, fewer than the 256 processes"):
        module.train_dataloader()


@pytest.mark.parametrize("size, world, kept", [(7, 2, 6), (5, 4, 4), (9, 3, 9)])
def test_every_rank_gets_as_many_examples_when_the_split_is_smaller_than_a_batch(size, world, kept):
    shares = [list(EpochSampler(size, 0, whole=32, rank=rank, world=world)) for rank in range(world)]
    assert {len(share) for share in shares} == {kept // world}
    assert sorted(sum(shares, [])) == sorted(set(sum(shares, [])))  # no example twice
    with pytest.raises(ValueError, match="3 training examples cannot be shared by 4 processes"):
        EpochSampler(3, 0, world=4)


@pytest.mark.parametrize(("env", "zero"), [({}, True), ({"RANK": "0", "LOCAL_RANK": "0"}, True), ({"RANK": "1"}, False),
                                           ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),
                                           ({"SLURM_PROCID": "3"}, False)])
def test_rank_zero_is_the_first_process_of_the_first_node(monkeypatch, env, zero):
    for key in hydra_hooks.RANK_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert hydra_hooks.is_rank_zero() is zero


def test_trainer_ddp_without_a_gpu_is_refused_with_the_cpu_preset_named(monkeypatch, tmp_path):
    """``trainer=ddp``'s accelerator ``auto`` and ``bf16-mixed`` would be one bf16 CPU process: ``lra.build`` refuses
    it before any data work, naming ``trainer=ddp_cpu``; with a GPU, or with the accelerator chosen, it is built as
    given."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    refused = "found no GPU .* one bf16-mixed process on the CPU: on a CPU use trainer=ddp_cpu"
    ddp = compose_run(["task=listops", "trainer=ddp", f"data_dir={tmp_path / 'data'}"])
    assert ddp.trainer_arguments["precision"] == "bf16-mixed"  # the arguments are computed; the build refuses
    with pytest.raises(UserError, match=refused):
        build(ddp)
    assert not (tmp_path / "data").exists()  # before the data module prepared (generated) anything
    assert compose_run(["task=listops", "trainer=ddp_cpu"]).trainer_arguments["precision"] == "32-true"
    refuse_ddp_without_gpu(compose_run(["task=listops", "trainer=ddp_cpu"]).trainer)
    refuse_ddp_without_gpu(compose_run(["task=listops", "trainer=ddp", "trainer.accelerator=cpu"]).trainer)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    refuse_ddp_without_gpu(ddp.trainer)


def test_reading_the_trainer_arguments_logs_nothing_and_raises_nothing(monkeypatch, caplog):
    """``Run.trainer_arguments`` is a computation: read twice for a run shorter than its validation interval under
    ``trainer=ddp`` on a machine without a GPU, it neither warns (``lra.run.train`` does, where the Trainer is built)
    nor refuses (``lra.build`` does), and gives equal arguments."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    short = compose_run(["task=listops", "trainer=ddp", "task.max_steps=3"])
    with caplog.at_level(logging.DEBUG):
        first, second = short.trainer_arguments, short.trainer_arguments
    assert caplog.records == []
    assert first == second and first is not second
    assert first["val_check_interval"] == short.validation_interval == 3
