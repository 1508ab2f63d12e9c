"""Older records, manifests and checkpoints are read as what they meant (``lra.run.record_compat``): one fixture per
layout found among the committed records (``results/runs``) and in the history of ``lra/run/record.py``, ``conf/``
and ``lra/rng_state.py``."""

from __future__ import annotations

import copy

import pytest
import torch

from lra import rng_state
from lra.config import CONF_DIR
from lra.run.checkpoints import RunFolderCheckpointIO
from lra.run.record_compat import IMPLICIT, experiment_for, recorded_experiment, upgrade
from lra.settings import Run
from lra.task_facts import generated_before
from results.collect import collect
from results.protocol import FROM_CONF, MOST_COMMON, compose_protocol
from tests.results.records import write_record

# (layout, keys its records lack, whether they name their experiment); newest first
LAYOUTS = {
    # a1461a6: the ListOps study's records (results/runs/listops/linear/seed0/study_*)
    "before close_brackets and batching": (
        ["task.data.generate.close_brackets", "task.batching", "task.batching_pool"], True),
    # 308d881: the full-protocol softmax record (results/runs/listops/softmax/seed0/default,task.optim.lr=1e-4)
    "before embed_init_std and micro_batches": (
        ["task.data.generate.close_brackets", "task.batching", "task.batching_pool", "model.embed_init_std",
         "task.micro_batches"], True),
    # b3200bf: the quick records (results/runs/listops/*/seed0/quick), before the record's experiment field
    "before the experiment field": (
        ["task.data.generate.close_brackets", "task.batching", "task.batching_pool", "model.embed_init_std",
         "task.micro_batches", "model.checkpoint_blocks"], False),
    # records of runs before the schedule and attention-dropout settings (none committed)
    "before schedule and attention dropout": (
        ["task.optim.schedule", "model.attention_dropout", "task.data.generate.close_brackets", "task.batching",
         "task.batching_pool", "model.embed_init_std", "task.micro_batches", "model.checkpoint_blocks"], False),
}


def without(config: dict, keys: list[str]) -> dict:
    """A deep copy of ``config`` without the dotted ``keys``."""
    config = copy.deepcopy(config)
    for dotted in keys:
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            node = node[key]
        del node[leaf]
    return config


def old_record(root, tag: str, layout: str, experiment: str, seed: int = 0, **settings):
    """A completed ListOps softmax record of ``layout`` for a run of ``experiment`` ("" = none) tagged ``tag``."""
    missing, names_experiment = LAYOUTS[layout]
    config = compose_protocol(tag, "listops", experiment=experiment)
    config = without({**config, "tag": tag, "seed": seed}, missing)
    for dotted, value in settings.items():
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[leaf] = value
    extra = {"experiment": experiment or None} if names_experiment else {}
    return write_record(root, "listops", "softmax", seed, 0.40, tag=tag, config=config, **extra)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("tag,experiment", [("quick", "quick"), ("default", "")])
def test_an_old_record_follows_its_tags_protocol(tmp_path, layout, tag, experiment):
    old_record(tmp_path, tag, layout, experiment)
    long, problems = collect([tmp_path])
    assert problems == []
    assert set(long["tag"]) == {tag} and set(long["protocol"]) == {FROM_CONF}  # no section of its own


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_an_old_record_that_ran_other_settings_still_gets_a_section_of_its_own(tmp_path, layout):
    lr = compose_protocol("quick", "listops")["task"]["optim"]["lr"]
    old_record(tmp_path, "quick", layout, "quick", **{"task.optim.lr": lr * 10})
    long, problems = collect([tmp_path])
    assert problems == [] and set(long["tag"]) == {f"quick · task.optim.lr={lr * 10}"}


def test_a_setting_an_old_record_lacks_counts_as_the_value_it_ran_with(tmp_path):
    """study_port trains with OneCycleLR: a record from before task.optim.schedule ran the linear schedule."""
    old_record(tmp_path, "study_port", "before schedule and attention dropout", "study_port")
    long, _ = collect([tmp_path])
    assert IMPLICIT["task.optim.schedule"] == "linear"
    assert {tag for tag in long["tag"] if "task.optim.schedule=linear" in tag}, set(long["tag"])


def test_the_experiment_of_a_record_before_the_field_comes_from_its_tag(tmp_path):
    assert recorded_experiment({"tag": "quick"}) is None
    assert recorded_experiment({"experiment": None}) == "" and recorded_experiment({"experiment": "quick"}) == "quick"
    assert experiment_for("quick", CONF_DIR) == "quick" and experiment_for("default", CONF_DIR) == ""
    assert experiment_for("mine", CONF_DIR) is None and experiment_for("quick", tmp_path) is None  # no conf/ there
    old_record(tmp_path / "runs", "quick", "before the experiment field", "quick")
    config = compose_protocol("quick", "listops")
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.40, tag="mine", config={**config, "tag": "mine"})
    long, _ = collect([tmp_path / "runs"])
    protocols = long.drop_duplicates("path").set_index("attention")["protocol"]
    assert protocols["softmax"] == FROM_CONF and protocols["linear"] == MOST_COMMON  # no conf/experiment/mine.yaml


def test_a_manifest_from_before_a_generator_option_was_made_with_its_implicit_value():
    from lra.tasks import listops, pathfinder

    assert generated_before("listops") == {"close_brackets": True} and generated_before("text") == {}
    assert generated_before("pathfinder") == generated_before("pathx") == pathfinder.GENERATED_BEFORE
    sizes = {"train": 5, "val": 2, "test": 2}
    config = compose_protocol("default", "listops")
    config["task"]["data"]["generate"].update(sizes)
    source = {k: v for k, v in config["task"]["data"]["generate"].items() if k not in (*sizes, "close_brackets")}
    manifest = {"source": source, "splits": {k: {"count": v} for k, v in sizes.items()}}  # before close_brackets
    assert listops.DataModule(Run.parse(config)).stale_data_message(manifest) is None
    config["task"]["data"]["generate"]["close_brackets"] = False
    assert "close_brackets=False (the data has True)" in listops.DataModule(Run.parse(config)).stale_data_message(
        manifest)
    config = compose_protocol("default", "pathfinder")
    options = config["task"]["data"]["generate"]
    manifest = {"source": {"count": options["count"], "seed": options["seed"]}, "command": "(old)"}  # hard only
    assert pathfinder.DataModule(Run.parse(config)).stale_data_message(manifest) is None
    options["contour_length"] = 6
    assert "--contour-length 6" in pathfinder.DataModule(Run.parse(config)).stale_data_message(manifest)
    del options["contour_length"]  # a config without the option (~task.data.generate.contour_length): the hard split
    module = pathfinder.DataModule(Run.parse(config))
    assert module.generate_options()["contour_length"] == 14 and module.stale_data_message(manifest) is None
    assert module.rebuild_command() == pathfinder.DataModule(Run.parse(compose_protocol("default", "pathfinder"))) \
        .rebuild_command()


@pytest.mark.parametrize("task, option, before, other", [
    ("listops", "close_brackets", True, False), ("pathfinder", "contour_length", 14, 6),
    ("pathx", "contour_length", 14, 9),
])
def test_an_old_run_without_a_generator_option_compares_as_made_by_its_task(task, option, before, other):
    """``upgrade`` fills a generator option by the record's task: the run matches today's config at the value it was
    made with, differs from another value, and no other task's option is added to it."""
    today = compose_protocol("default", task)
    old = copy.deepcopy(today)
    del old["task"]["data"]["generate"][option]
    assert upgrade(old).task.data.generate[option] == before
    assert upgrade(old).differences(upgrade(today)) == []
    today["task"]["data"]["generate"][option] = other
    assert upgrade(old).differences(upgrade(today)) == [(f"task.data.generate.{option}", before, other)]
    foreign = {"listops": "contour_length", "pathfinder": "close_brackets", "pathx": "close_brackets"}[task]
    assert foreign not in upgrade(old).task.data.generate


def test_a_checkpoint_of_older_code_read_by_the_run_restores_on_one_process(tmp_path):
    """Older code kept one process's state as ``torch_rng_state`` only: the run's checkpoint reader gives it today's
    ``torch_rng_states`` (``lra.run.record_compat.upgrade_checkpoint``), which ``restore`` reads."""
    torch.manual_seed(21)
    saved = torch.get_rng_state()
    torch.save({"torch_rng_state": saved}, tmp_path / "old.ckpt")
    checkpoint = RunFolderCheckpointIO().load_checkpoint(tmp_path / "old.ckpt", weights_only=True)
    assert torch.equal(checkpoint["torch_rng_states"], saved[None])
    torch.manual_seed(0)
    rng_state.restore(checkpoint, 0, 1)
    assert torch.equal(torch.get_rng_state(), saved)
    torch.manual_seed(0)
    rng_state.restore({"torch_rng_state": saved}, 0, 1)  # read as it was written: nothing today's code knows
    assert not torch.equal(torch.get_rng_state(), saved)
