"""One typed ``Run`` from the command line to the constructors (issue 61): parsed once, its enumerations and ranges
declared on the schema's fields, its plain form what records keep, and every older layout upgraded to it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from typing import get_args

import pytest

from lra.run.record_compat import upgrade
from lra.setting_rules import optional_keys
from lra.settings import Batching, Pooling, Run, Schedule
from lra.task_facts import averaged_tasks, length_varying_tasks, lra_tasks, task_facts
from lra_base.errors import UserError
from tests.lra.conftest import CONF, ROOT, compose_config, compose_run, torchless_env

TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))


@pytest.mark.parametrize("task", TASKS)
def test_a_run_keeps_the_composed_config_whole(task):
    """``Run.config()`` is the composed config with each optional setting at its default: nothing lost, nothing
    renamed, the task's own keys (``ar``'s ``seq_len``, the generator options) included."""
    composed, run = compose_config([f"task={task}"]), compose_run([f"task={task}"])
    config = run.config()
    for section, keys in optional_keys(Run).items():
        ours, theirs = config, composed
        for part in filter(None, section.split(".")):
            ours, theirs = ours[part], theirs[part]
        for key in set(keys) - set(theirs):
            ours.pop(key)  # a default that parsing added
    assert config == composed
    assert Run.read(run.config()) == run and upgrade(run.config()) == run


def test_a_run_is_frozen_and_typed():
    run = compose_run(["attention=llops", "attention.degree=6"])
    assert run.attention.name == "llops" and run.attention.options["degree"] == 6
    assert run.task.optim.schedule in get_args(Schedule) and run.model.pooling in get_args(Pooling)
    assert run.task.batching in get_args(Batching)
    with pytest.raises(FrozenInstanceError):
        run.seed = 1  # type: ignore[misc]
    assert replace(run, seed=1).seed == 1 and run.seed == 0


@pytest.mark.parametrize("override, message", [
    ("task.optim.schedule=cosin", "task.optim.schedule='cosin': must be one of linear, constant, rsqrt, cosine, "
                                  "onecycle"),
    ("model.pooling=max", "model.pooling='max': must be one of mean, cls, none, padded_mean"),
    ("task.batching=sorted", "task.batching='sorted': must be one of random, length_grouped"),
    ("task=text task.truncate=yes", "task.truncate='yes': must be true or false"),
    ("task.num_classes=1", "task.num_classes=1: must be an integer >= 2"),
    ("task.data.num_workers=-1", "task.data.num_workers=-1: must be an integer >= 0"),
])
def test_enumerations_and_ranges_come_from_the_fields(override, message):
    with pytest.raises(UserError) as error:
        compose_run(override.split())
    assert str(error.value) == message


def test_a_misspelt_schedule_is_refused_before_torch_loads_with_nothing_written(tmp_path):
    folder = tmp_path / "run"
    result = subprocess.run([sys.executable, str(ROOT / "run.py"), "task=listops", "attention=linear",
                             "task.optim.schedule=cosin", f"data_dir={tmp_path / 'data'}", f"hydra.run.dir={folder}"],
                            cwd=tmp_path, env=torchless_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "error: task.optim.schedule='cosin': must be one of" in result.stderr, \
        result.stderr[-2000:]
    assert "torch was imported" not in result.stderr
    assert not folder.exists() and not (tmp_path / "data").exists()


def test_an_old_record_becomes_todays_run_at_the_values_it_ran_with():
    config = compose_run(["task=listops"]).config()
    del config["task"]["batching"], config["model"]["attention_dropout"], config["flush_subnormals"]
    old = upgrade(config)
    assert old.task.batching == "random" and old.model.attention_dropout == 0.0 and old.flush_subnormals is False
    assert "contour_length" not in old.task.data.generate  # a generator's option: the data module's to read


def test_a_task_fact_may_be_annotated_and_an_optional_one_left_out(tmp_path):
    (tmp_path / "mine.py").write_text('LRA_COLUMN: int | None = None\nAVERAGED = False\nLENGTH_VARYING: bool = True\n'
                                      'GENERATED_BEFORE: dict = {"sharp": True}\n')
    (tmp_path / "plain.py").write_text("LRA_COLUMN = None\nAVERAGED = False\nLENGTH_VARYING = False\n")
    facts = task_facts.__wrapped__(tmp_path)
    assert facts["mine"] == {"LRA_COLUMN": None, "AVERAGED": False, "LENGTH_VARYING": True,
                             "GENERATED_BEFORE": {"sharp": True}}
    assert facts["plain"]["GENERATED_BEFORE"] == {}


def test_every_task_declares_its_facts_in_its_module():
    facts = task_facts()
    assert sorted(facts) == TASKS
    assert lra_tasks() == ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
    assert averaged_tasks() == lra_tasks()[:5] and length_varying_tasks() == ("listops", "text", "retrieval")
