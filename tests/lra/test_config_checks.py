"""Settings that cannot give a meaningful run are refused up front, by name: model sizes, attention option
types, sequences cut by max_len, keys nothing reads, missing sweeper plugins, mismatched or imported data."""

from __future__ import annotations

import logging

import pytest

from data_prep import listops
from lra.module import attention_factory
from lra.run.overrides import check_added_keys, missing_plugin
from lra.settings import Run
from lra.tasks.listops import DataModule
from lra_base.errors import UserError
from tests.lra.conftest import TINY, compose_config, compose_run


@pytest.mark.parametrize("override, message", [
    ("model.depth=-1", "model.depth=-1: must be an integer >= 1"),
    ("model.dim=0", "model.dim=0: must be an integer >= 1"),
    ("model.dim=65", "model.dim=65 is not divisible by model.heads=2"),
    ("model.heads=0", "model.heads=0: must be an integer >= 1"),
    ("model.pooling=foo", "model.pooling='foo': must be one of mean, cls, none"),
    ("model.dropout=2", "model.dropout=2: must be a number in [0, 1)"),
    ("model.ffn_dim=abc", "model.ffn_dim='abc': must be an integer >= 1"),
    ("task.max_len=0", "task.max_len=0: must be an integer >= 1"),
    ("task.micro_batches=3", "task.micro_batches=3: must be a positive integer that divides task.batch_size=32"),
    ("task.micro_batches=0", "task.micro_batches=0: must be a positive integer"),
])
def test_invalid_model_and_task_settings_are_refused_by_name(override, message):
    with pytest.raises(UserError) as error:
        Run.parse(compose_config([override]))
    assert message in str(error.value)


@pytest.mark.parametrize("override, message", [
    ("attention.features=abc", "attention.features='abc': must be an integer like its default (features=64)"),
    ("attention.square=3", "attention.square=3: must be true or false"),
    ("attention.eps=small", "attention.eps='small': must be a number"),
])
def test_attention_option_of_the_wrong_type_names_the_key(override, message):
    with pytest.raises(UserError) as error:
        Run.parse(compose_config(["attention=llops", override]))
    assert message in str(error.value)


def test_float_options_take_integers():
    attention_factory(compose_run(["attention=llops", "attention.eps=1"]))()


def listops_module(data_dir, *overrides: str) -> DataModule:
    return DataModule(compose_run(["experiment=quick", f"data_dir={data_dir}", *TINY, *overrides]))


def test_sequences_longer_than_max_len_are_refused_unless_truncation_is_asked_for(tiny_data_dir, caplog):
    module = listops_module(tiny_data_dir)
    module.prepare_data()
    module.setup()  # max_len 256 holds every 20-60 token tree: nothing to say
    short = listops_module(tiny_data_dir, "task.max_len=16")
    with pytest.raises(UserError, match=r"task.max_len=16 is shorter than 160 of the 160 train sequences \(up to "
                                        r"\d+ tokens\).*\+\+task.truncate=true"):
        short.setup()
    with caplog.at_level(logging.INFO, logger="lra.data"):
        listops_module(tiny_data_dir, "task.max_len=16", "++task.truncate=true").setup()
    assert "160 of the 160 train sequences are cut to task.max_len=16" in caplog.text


def test_text_and_retrieval_truncate_by_protocol():
    assert compose_run(["task=text"]).task.truncate is True
    assert compose_run(["task=retrieval"]).task.truncate is True
    assert compose_run(["task=listops"]).task.truncate is False  # the schema's default (lra.settings)


def test_other_listops_names_the_differing_setting_and_imported_listops_is_accepted(tiny_data_dir, tmp_path):
    module = listops_module(tiny_data_dir, "task.data.generate.train=100")
    with pytest.raises(UserError) as error:
        module.prepare_data()
    message = str(error.value)
    assert "manifest.json records other ListOps" in message
    assert "task.data.generate.train=100 (the data has 160)" in message
    assert message.count("python -m data_prep listops") == 1
    exported = listops.generate(tmp_path / "export", train=20, val=8, test=8, min_length=20, max_length=60,
                                fmt="tsv", log=lambda _: None)
    listops.import_tsv(exported, tmp_path / "imported" / "quick", log=lambda _: None)
    official = listops_module(tmp_path / "imported")  # its generator options are not recorded: counts and
    official.prepare_data()  # checksums decide
    official.setup()
    assert len(official.data["train"]) == 20


REFERENCE = {"task": {"name": "listops", "max_steps": 10, "data": {"root": "data", "num_workers": 0}},
             "model": {"dim": 64}}


@pytest.mark.parametrize("key, message", [
    ("task.max_stepz", "+task.max_stepz: task has no key 'max_stepz', so this setting would be ignored. Valid keys "
                       "under task: causal, data, max_steps, name, truncate"),
    ("model.widht", "Valid keys under model: dim"),
    ("task.data.seeed", "task.data has no key 'seeed'"),
    ("task.max_steps.x", "task.max_steps is a single value"),
])
def test_keys_added_under_task_or_model_must_exist(key, message):
    with pytest.raises(UserError) as error:
        check_added_keys([key], REFERENCE)
    assert message in str(error.value)


def test_optional_and_other_added_keys_pass():
    check_added_keys(["task.truncate", "task.data.limit.val", "task.data.eval_batch_size", "task.max_steps",
                      "attention.degree", "rerun"], REFERENCE)


def test_a_missing_sweeper_plugin_names_the_pip_extra():
    message = missing_plugin(["-m", "hydra/sweeper=optuna_lr_wd"], find_spec=lambda module: None)
    assert "hydra_optuna_sweeper" in message and 'pip install -e ".[optuna]"' in message
    assert missing_plugin(["hydra/launcher=joblib"], find_spec=lambda module: object()) is None


def test_an_experiment_without_settings_for_the_task_is_refused():
    with pytest.raises(UserError) as error:
        Run.parse(compose_config(["task=ar", "experiment=quick"]))
    message = str(error.value)
    assert "experiment=quick has no settings for task=ar" in message
    assert "conf/experiment/quick/ar.yaml" in message and "listops" in message
    Run.parse(compose_config(["task=listops", "experiment=quick"]))  # covered: no error
    Run.parse(compose_config(["task=ar"]))  # no experiment: no error
