"""A run knows the data it trained on (issue 58, point 1): its checkpoints and record keep the split files' SHA-256
(``lra.data_identity``), and a resume or a completed folder asked for on other data (the same settings, another
``data_dir`` holding other examples) is refused naming both, before any training and without touching the folder."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from data_prep.listops import generate, import_tsv
from lra.data_identity import data_identity, describe_data, task_data_dir
from lra.run.train import run
from lra_base.errors import UserError
from tests.lra.conftest import tiny


@pytest.fixture(scope="module")
def other_data_dir(tmp_path_factory):
    """A data root whose quick ListOps has the tiny sizes but other trees: the TSV form of another generator seed,
    imported (as the official files are; an import is not checked against the generator settings)."""
    root = tmp_path_factory.mktemp("other")
    source = generate(root / "source", train=160, val=64, test=64, min_length=20, max_length=60, seed=1, fmt="tsv",
                      log=lambda _: None)
    import_tsv(source, root / "data" / "quick", log=lambda _: None)
    return root / "data"


def files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_checkpoint_and_the_record_name_the_data(interrupted, tiny_data_dir):
    trained = data_identity(task_data_dir(tiny(tiny_data_dir)))
    assert trained is not None and set(trained["splits"]) == {"train", "val", "test"}
    saved = torch.load(interrupted / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["data"] == trained
    record = json.loads((interrupted / "result.json").read_text())
    assert record["status"] == "interrupted" and record["data"] == trained


def test_a_resume_on_other_data_is_refused_naming_both(interrupted, tiny_data_dir, other_data_dir, tmp_path):
    folder = shutil.copytree(interrupted, tmp_path / "run")
    before = files(folder)
    trained = data_identity(task_data_dir(tiny(tiny_data_dir)))
    other = data_identity(task_data_dir(tiny(other_data_dir)))
    assert other is not None and other["splits"] != trained["splits"]
    with pytest.raises(UserError) as refused:
        run(tiny(other_data_dir), folder)
    message = str(refused.value)  # run.py prints it as one line and exits 2, as every UserError before training
    assert f"data: {describe_data(trained)} -> {describe_data(other)}" in message and "\n" not in message, message
    assert "other data" in message and f"data_dir={tiny_data_dir}" in message and "rerun=true" in message
    assert files(folder) == before  # nothing trained, the interrupted record and checkpoint as they were
    resumed = run(tiny(tiny_data_dir), folder)  # on its own data it resumes
    assert resumed["status"] == "completed" and resumed["steps"] == 12 and resumed["data"] == trained


def test_rerun_true_trains_the_folder_again_on_the_other_data(interrupted, other_data_dir, tmp_path):
    folder = shutil.copytree(interrupted, tmp_path / "run")
    record = run(tiny(other_data_dir, "rerun=true"), folder)
    assert record["status"] == "completed" and record["segments"][0]["from_step"] == 0
    assert record["data"] == data_identity(task_data_dir(tiny(other_data_dir)))
    assert list((folder / "replaced").glob("*/checkpoints/last.ckpt"))


def test_a_completed_folder_is_not_answered_for_other_data(tiny_data_dir, other_data_dir, tmp_path):
    cfg = tiny(tiny_data_dir)
    record = {"task": "listops", "attention": "linear", "seed": 0, "tag": "quick", "experiment": "quick",
              "status": "completed", "metrics": {"test_acc": 0.2}, "config": cfg.config(),
              "data": data_identity(task_data_dir(cfg))}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"holds a completed run of other data .*data: "):
        run(tiny(other_data_dir), tmp_path / "run")
    assert run(cfg, tmp_path / "run")["already_completed"]  # its own data: answered as before


def test_the_data_a_run_loaded_is_its_identity_and_a_folder_written_while_loading_is_refused(tmp_path, monkeypatch):
    """A folder imported again while a run trains no longer changes the identity its checkpoints keep, and splits
    that come from two versions of a folder (another process published between two of them) are refused."""
    from lra import data as data_module
    from lra.tasks.listops import DataModule

    root = tmp_path / "data"
    sizes = dict(train=40, val=8, test=8, min_length=20, max_length=60)
    first = generate(tmp_path / "a", **sizes, seed=1, fmt="tsv", log=lambda _: None)
    import_tsv(first, root / "quick", log=lambda _: None)
    other = generate(tmp_path / "b", **sizes, seed=2, fmt="tsv", log=lambda _: None)
    module = DataModule(tiny(root))
    module.setup()
    loaded = module.data_identity()
    import_tsv(other, root / "quick", log=lambda _: None)  # written again while the run trains
    assert module.data_identity() == loaded != data_identity(module.task_dir)

    load_split = data_module.load_split

    def publish_after_the_first(task_dir, split, **kwargs):
        loaded = load_split(task_dir, split, **kwargs)
        if split == "train":
            import_tsv(first, root / "quick", log=lambda _: None)  # the other version, between two splits
        return loaded

    monkeypatch.setattr(data_module, "load_split", publish_after_the_first)
    fresh = DataModule(tiny(root))
    with pytest.raises(UserError, match="was written again while its splits loaded"):
        fresh.setup()
    assert fresh.data == {}


def test_a_refused_setup_keeps_nothing_and_refuses_again(tmp_path):
    from lra.tasks.listops import DataModule

    source = generate(tmp_path / "a", train=20, val=4, test=4, min_length=20, max_length=60, seed=1, fmt="tsv",
                      log=lambda _: None)
    import_tsv(source, tmp_path / "data" / "quick", log=lambda _: None)
    module = DataModule(tiny(tmp_path / "data", "task.max_len=8"))
    for _ in range(2):  # before, the second call returned with the data the first had refused
        with pytest.raises(UserError):
            module.setup()
        assert module.data == {} and module.loaded_identity is None
