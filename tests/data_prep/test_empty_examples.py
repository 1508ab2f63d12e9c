"""Empty examples are refused by name: by the importers (the file, and its row or line), by the writer, and by the
loader for data an older importer let through; one token is enough (``tests/attention_zoo/test_contract.py``
checks every mechanism on a sequence of one real token)."""

from __future__ import annotations

import numpy as np
import pytest

from data_prep.__main__ import main as data_prep_main
from data_prep.byte_tokens import VOCAB
from data_prep.compact import DataError, load_split, write_arrays, write_manifest, write_split
from tests.data_prep.official_fixtures import aan_rows, imdb_reviews, write_aan, write_aclimdb

REBUILD = "python -m data_prep text --source PATH --out data"


def prepare(capsys, task, source, out) -> tuple[int, str]:
    capsys.readouterr()
    status = data_prep_main([task, "--source", str(source), "--out", str(out)])
    return status, capsys.readouterr().err


@pytest.fixture
def aclimdb(tmp_path):
    return write_aclimdb(tmp_path / "imdb", imdb_reviews(train_per_class=4, test_per_class=2))


def test_an_empty_review_file_is_refused_by_name(aclimdb, tmp_path, capsys):
    empty = aclimdb / "train" / "neg" / "2_3.txt"
    empty.write_bytes(b"")
    status, err = prepare(capsys, "text", aclimdb, tmp_path / "data")
    assert status == 2 and "Traceback" not in err
    assert f"{empty}: an empty review (0 bytes); every example needs at least one token" in err
    assert not (tmp_path / "data" / "text").exists()


def test_a_one_byte_review_is_imported(aclimdb, tmp_path, capsys):
    (aclimdb / "test" / "pos" / "0_8.txt").write_bytes(b"!")
    status, err = prepare(capsys, "text", aclimdb, tmp_path / "data")
    assert status == 0, err
    assert load_split(tmp_path / "data" / "text", "test", rebuild_cmd=REBUILD).lengths.min() == 1


def test_an_empty_parquet_review_is_refused_by_row(tmp_path, capsys):
    import pandas as pd

    folder = tmp_path / "plain_text"
    folder.mkdir()
    for split, name in {"train": "train-00000-of-00001.parquet", "test": "test-00000-of-00001.parquet"}.items():
        texts = ["good", "bad", "", "fine"] if split == "test" else ["a", "b", "c", "d"]
        pd.DataFrame({"text": texts, "label": [1, 0, 1, 0]}).to_parquet(folder / name)
    status, err = prepare(capsys, "text", tmp_path, tmp_path / "data")
    assert status == 2
    assert f"{folder / 'test-00000-of-00001.parquet'}: row 2: an empty review" in err


@pytest.mark.parametrize("field", [3, 4])
def test_an_empty_aan_document_is_refused_by_line(tmp_path, capsys, field):
    rows = aan_rows(counts={"train": 4, "eval": 2, "test": 2})
    rows["eval"][1] = tuple("" if i == field else value for i, value in enumerate(rows["eval"][1]))
    folder = write_aan(tmp_path / "tsv_data", rows)
    status, err = prepare(capsys, "retrieval", folder, tmp_path / "data")
    assert status == 2
    assert f"{folder / 'new_aan_pairs.eval.tsv'}: line 2: text{field - 2} is empty" in err


def test_the_writer_refuses_an_empty_sequence(tmp_path):
    with pytest.raises(ValueError, match="split 'train': sequence 1 is empty"):
        write_split(tmp_path, "train", [np.array([3]), np.array([], np.int64)], np.array([0, 1]), len(VOCAB))


def test_the_loader_refuses_data_with_an_empty_sequence(tmp_path):
    """As an older importer left a folder with an empty review: refused with the rebuild command, before a batch
    of nothing but padding reaches a mechanism (nystrom and skyformer crashed on one)."""
    offsets = np.array([0, 3, 3, 5], np.int64)
    arrays = {"tokens": np.ones(5, np.uint8), "offsets": offsets, "labels": np.array([0, 1, 0], np.int64)}
    entry = write_arrays(tmp_path, "train", arrays)
    write_manifest(tmp_path, task="text", vocab=VOCAB, num_classes=2, command=REBUILD, source={"import": "old"},
                   splits={"train": {**entry, "count": 3, "max_length": 3, "min_length": 0}})
    with pytest.raises(DataError) as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert str(error.value) == (f"{tmp_path / 'train.npz'}: array 'tokens' holds 1 empty sequence(s), the first at "
                                f"index 1; every example needs at least one token (older importers let empty reviews "
                                f"through). Rebuild it with: {REBUILD}")
