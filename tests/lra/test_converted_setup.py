"""Converted tasks (Text, Retrieval, Image) around training: the message when data was never prepared,
fixed evaluation subsets, the quick presets and the lra_original experiments."""

from __future__ import annotations

import shutil

import pytest

from lra.settings import Run
from lra.tasks import image as image_task
from lra.tasks import retrieval as retrieval_task
from lra.tasks import text as text_task
from lra_base.errors import UserError
from tests.data_prep.official_fixtures import convert_all
from tests.lra.conftest import compose_config, compose_run
from tests.lra.test_run import run_py

TASKS = {"text": text_task, "retrieval": retrieval_task, "image": image_task}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return convert_all(tmp_path_factory.mktemp("sources"), tmp_path_factory.mktemp("data"))


def config(task: str, data_root, *overrides: str) -> Run:
    return compose_run([f"task={task}", "experiment=quick", f"data_dir={data_root}", *overrides])


@pytest.mark.parametrize("task", list(TASKS))
def test_limit_keeps_fixed_subsets_with_whole_examples(task, data_root):
    full = TASKS[task].DataModule(config(task, data_root))
    full.setup()
    small = TASKS[task].DataModule(config(task, data_root, "task.data.limit={val: 2, test: 3}"))
    small.setup()
    again = TASKS[task].DataModule(config(task, data_root, "task.data.limit={val: 2, test: 3}", "seed=5"))
    again.setup()
    assert len(small.data["val"]) == 2 and len(small.data["test"]) == 3
    assert len(small.data["train"]) == len(full.data["train"])

    def items(module, split):
        dataset = module.make_dataset(module.data[split])
        return [tuple(x.tobytes() if hasattr(x, "tobytes") else x for x in dataset[i]) for i in range(len(dataset))]

    assert set(items(small, "test")) <= set(items(full, "test"))
    assert items(small, "test") == items(again, "test")


def test_missing_data_run_py_prints_the_command_without_traceback(tmp_path):
    result = run_py("task=text", "attention=softmax", "trainer=debug", f"data_dir={tmp_path / 'data'}",
                    f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 2
    assert f"python -m data_prep text --source PATH --out {tmp_path / 'data'}" in result.stderr
    assert f"python -m data_prep fetch text --out {tmp_path / 'data'}" in result.stderr  # run.py never downloads
    assert "aclImdb" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("task,needs", [
    ("text", ["aclImdb_v1.tar.gz", "train-00000-of-00001.parquet"]),
    ("retrieval", ["new_aan_pairs.train.tsv", "new_aan_pairs.eval.tsv", "lra_release.gz"]),
    ("image", ["data_batch_1", "test_batch", "cifar-10-python.tar.gz"]),
])
def test_missing_data_message_names_files_source_and_command(task, needs, tmp_path):
    module = TASKS[task].DataModule(compose_run([f"task={task}", f"data_dir={tmp_path}"]))
    with pytest.raises(UserError) as err:
        module.prepare_data()
    message = str(err.value)
    assert f"python -m data_prep {task} --source PATH --out {tmp_path}" in message
    assert str(tmp_path / task) in message and all(word in message for word in needs)


@pytest.mark.parametrize("task,stored", [("text", 4096), ("retrieval", 4000)])
def test_data_cut_shorter_than_max_len_is_refused(task, stored, data_root):
    """Retrieval had no such check: documents imported at --max-length 4000 trained silently cut at max_len 8192."""
    module = TASKS[task].DataModule(config(task, data_root, "task.max_len=8192"))
    with pytest.raises(UserError, match=f"cut to {stored} bytes but task.max_len is 8192.*--max-length 8192"):
        module.prepare_data()


def test_a_folder_of_another_task_is_refused(data_root, tmp_path):
    shutil.copytree(data_root / "image", tmp_path / "text")  # copied or renamed by hand
    module = text_task.DataModule(config("text", tmp_path))
    with pytest.raises(UserError, match=r"manifest.json holds image data, not text: point task.data.root"):
        module.prepare_data()


def test_quick_presets_shorten_the_converted_tasks():
    for task in TASKS:
        full, quick = compose_config([f"task={task}"]), compose_config([f"task={task}", "experiment=quick"])
        assert quick["task"]["max_steps"] < full["task"]["max_steps"]
        assert quick["task"]["data"]["limit"]["test"] and full["task"]["data"]["limit"] is None
        assert quick["task"]["data"]["root"] == full["task"]["data"]["root"]  # same converted data


@pytest.mark.parametrize("task,dim,pooling", [("text", 256, "cls"), ("retrieval", 128, "cls"), ("image", 128, "cls")])
def test_lra_original_experiments_compose(task, dim, pooling):
    cfg = compose_config([f"task={task}", "experiment=lra_original"])
    assert cfg["task"]["name"] == task and cfg["tag"] == "lra_original"
    assert cfg["model"]["dim"] == dim and cfg["model"]["pooling"] == pooling
    assert cfg["task"]["optim"]["betas"] == [0.9, 0.98] and cfg["trainer"]["max_steps"] == cfg["task"]["max_steps"]
