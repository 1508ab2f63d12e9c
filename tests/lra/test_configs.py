"""Every config composes, resolves, and builds its attention; bad choices list the valid ones."""

from __future__ import annotations

import itertools

import pytest
import torch
from hydra import compose, initialize_config_dir

import attention_zoo
from lra.module import attention_factory
from tests.lra.conftest import CONF, compose_config, compose_run

TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
ATTENTIONS = sorted(p.stem for p in (CONF / "attention").glob("*.yaml"))
TRAINERS = sorted(p.stem for p in (CONF / "trainer").glob("*.yaml"))
EXPERIMENTS = [None, *sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))]


def test_every_attention_has_a_config_and_vice_versa():
    assert ATTENTIONS == attention_zoo.available()


@pytest.mark.parametrize("task,experiment", list(itertools.product(TASKS, EXPERIMENTS)))
@pytest.mark.parametrize("trainer", TRAINERS)
def test_task_experiment_trainer_compose(task, experiment, trainer):
    overrides = [f"task={task}", f"trainer={trainer}"] + ([f"experiment={experiment}"] if experiment else [])
    cfg = compose_config(overrides)
    assert cfg["task"]["name"] == task
    assert cfg["trainer"]["max_steps"] == cfg["task"]["max_steps"]


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_attention_configs_build(attention):
    run = compose_run([f"attention={attention}"])
    assert run.attention.name == attention
    build = attention_factory(run)
    assert build() is not build()  # a fresh module per block


def test_quick_preset_shortens_listops():
    full, quick = compose_config([]), compose_config(["experiment=quick"])
    assert quick["tag"] == "quick" and full["tag"] == "default"
    assert quick["task"]["max_steps"] < full["task"]["max_steps"]
    assert quick["task"]["data"]["generate"]["max_length"] < full["task"]["data"]["generate"]["max_length"]
    assert quick["task"]["data"]["root"] != full["task"]["data"]["root"]


def test_seeded_random_features_differ_per_layer_and_per_run_seed():
    def buffers(seed: int, layer: int):
        make = attention_factory(compose_run(["attention=polysketch", f"seed={seed}", "task.max_len=64"]))
        return [b.clone() for b in make(layer).buffers()]

    first = buffers(0, 0)
    assert first, "polysketch keeps its random sketch in buffers"
    assert all(torch.equal(a, b) for a, b in zip(first, buffers(0, 0)))
    assert not all(torch.equal(a, b) for a, b in zip(first, buffers(0, 1)))
    assert not all(torch.equal(a, b) for a, b in zip(first, buffers(1, 0)))


@pytest.mark.parametrize("launcher,target", [("joblib", "JoblibLauncher"), ("slurm", "SlurmLauncher")])
def test_launcher_presets_compose(launcher, target):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith(target)


def test_optuna_preset_tunes_lr_and_weight_decay_towards_higher_validation_accuracy():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/sweeper=optuna_lr_wd"], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"task.optim.lr", "task.optim.weight_decay"}
    assert "interval" in sweeper.params["task.optim.lr"]


def test_run_folders_separate_run_changing_overrides_only():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["task.optim.lr=0.002", "trainer.enable_progress_bar=false", "seed=1"])
    assert cfg.hydra.run.dir == "outputs/listops/softmax/seed1/default,task.optim.lr=0.002"  # beside, not inside
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        plain = compose(config_name="config", return_hydra_config=True, overrides=["seed=1"])
    assert plain.hydra.run.dir == "outputs/listops/softmax/seed1/default"
