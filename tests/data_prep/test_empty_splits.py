"""Empty splits are refused by name: by the importers and generators, before a run, and by a run's data."""

from __future__ import annotations

import numpy as np
import pytest

from data_prep import retrieval
from data_prep.__main__ import main as data_prep_main
from data_prep.compact import write_arrays, write_manifest, write_split
from data_prep.listops import NUM_CLASSES, VOCAB
from lra.settings import Run
from lra.tasks.listops import DataModule
from lra_base.errors import UserError
from tests.data_prep.official_fixtures import aan_rows, imdb_reviews, write_aan, write_aclimdb
from tests.lra.conftest import compose_config, compose_run


def test_retrieval_refuses_an_empty_eval_tsv_by_name(tmp_path, capsys):
    folder = write_aan(tmp_path / "tsv_data", aan_rows(counts={"train": 4, "eval": 0, "test": 2}))
    assert data_prep_main(["retrieval", "--source", str(folder), "--out", str(tmp_path / "data")]) == 2
    error = capsys.readouterr().err
    assert f"{folder / 'new_aan_pairs.eval.tsv'}: gives 0 val examples; every split needs at least one" in error
    assert not (tmp_path / "data" / "retrieval").exists()


@pytest.mark.parametrize("option", ["--train=-5", "--val=0", "--test=0"])
def test_listops_generator_refuses_a_split_size_below_one_by_name(option, tmp_path, capsys):
    assert data_prep_main(["listops", "--out", str(tmp_path), option]) == 2
    name = option.split("=")[0]
    assert f"{name} (examples in the {name[2:]} split) must be an integer >= 1" in capsys.readouterr().err


def test_text_refuses_a_validation_fraction_that_rounds_to_no_review(tmp_path, capsys):
    source = write_aclimdb(tmp_path / "imdb", imdb_reviews(train_per_class=1, test_per_class=1))
    assert data_prep_main(["text", "--source", str(source), "--out", str(tmp_path / "data")]) == 2
    assert "gives 0 val examples; every split needs at least one" in capsys.readouterr().err


def test_write_split_refuses_no_examples(tmp_path):
    with pytest.raises(ValueError, match="split 'val' has no examples"):
        write_split(tmp_path, "val", [], np.array([], np.int64), len(VOCAB))
    with pytest.raises(ValueError, match="split 'val' has no pairs"):
        retrieval.write_pair_split(tmp_path, "val", retrieval.BytePacker(10), retrieval.BytePacker(10),
                                   np.array([], np.int64))


@pytest.mark.parametrize("override, message", [
    ("task.data.generate.val=0", "task.data.generate.val=0: must be an integer >= 1 (examples in that split)"),
    ("task.data.generate.train=-5", "task.data.generate.train=-5: must be an integer >= 1"),
    ("task=pathfinder task.data.generate.count=9", "task.data.generate.count=9: must be an integer >= 10"),
    ("task=ar task.data.val=0", "task.data.val=0: must be an integer >= 1 (examples in that split)"),
])
def test_a_run_refuses_generator_sizes_below_one_before_any_work(override, message):
    with pytest.raises(UserError) as error:
        Run.parse(compose_config(override.split()))
    assert message in str(error.value)


def test_a_run_refuses_data_with_an_empty_validation_split(tmp_path):
    task_dir = tmp_path / "listops"  # as an importer before this check could leave it
    task_dir.mkdir()
    entries = {}
    for split, count in {"train": 3, "val": 0, "test": 2}.items():
        offsets = np.arange(count + 1, dtype=np.int64) * 2
        arrays = {"tokens": np.ones(2 * count, np.uint8), "offsets": offsets, "labels": np.zeros(count, np.int64)}
        entry = write_arrays(task_dir, split, arrays)
        entries[split] = {**entry, "count": count, "max_length": 2 if count else 0, "min_length": 2 if count else 0}
    write_manifest(task_dir, task="listops", vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries,
                   source={"import": "test"}, command="python -m data_prep listops")
    module = DataModule(compose_run([f"data_dir={tmp_path}"]))
    module.prepare_data()
    with pytest.raises(UserError) as error:
        module.setup()
    message = str(error.value)
    assert f"{task_dir / 'val.npz'}: the val split has no examples, so the run could not select a checkpoint" in message
    assert "Prepare the data again with: python -m data_prep listops --out" in message
