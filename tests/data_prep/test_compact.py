"""Tests of the compact prepared-data format: round trip, staged writes and every refusal path (the atomic
writer itself: ``tests/lra/test_atomic.py``)."""

import json
import os

import numpy as np
import pytest

from data_prep.compact import (
    CompactSplit,
    DataError,
    file_sha256,
    load_manifest,
    load_split,
    manifest_path,
    pack_sequences,
    token_dtype,
    write_arrays,
    write_manifest,
    write_split,
)
from data_prep.staging import staged_task_dir

REBUILD = "python -m data_prep toy --out data"
VOCAB = ["<pad>", "a", "b", "c", "d"]
SEQUENCES = [np.array([1, 2, 3]), np.array([4]), np.array([2, 2, 2, 2, 1])]
LABELS = np.array([0, 2, 1])


def make_task(task_dir, sequences=SEQUENCES, labels=LABELS, vocab=VOCAB, num_classes=3, write_vocab=None):
    """A toy task with a train split; returns the train manifest entry."""
    entry = write_split(task_dir, "train", sequences, labels, write_vocab or len(vocab))
    write_manifest(
        task_dir,
        task="toy",
        vocab=vocab,
        num_classes=num_classes,
        splits={"train": entry},
        source={"made_by": "test"},
        command=REBUILD,
    )
    return entry


def assert_names_file_and_command(error, filename):
    message = str(error.value)
    assert filename in message
    assert message.endswith(f"Rebuild it with: {REBUILD}")


def test_round_trip_from_list_of_sequences(tmp_path):
    entry = make_task(tmp_path)
    assert entry["file"] == "train.npz" and entry["count"] == 3
    assert (entry["min_length"], entry["max_length"]) == (1, 5)
    assert entry["sha256"] == file_sha256(tmp_path / "train.npz")

    split = load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert isinstance(split, CompactSplit) and len(split) == 3
    assert (
        split.tokens.dtype == np.uint8 and split.offsets.dtype == np.int64 and split.labels.dtype == np.int64
    )
    assert split.lengths.tolist() == [3, 1, 5]
    for i, sequence in enumerate(SEQUENCES):
        np.testing.assert_array_equal(split.sequence(i), sequence)
    np.testing.assert_array_equal(split.labels, LABELS)
    assert split.extra == {}


def test_round_trip_from_flat_tokens_and_offsets(tmp_path):
    tokens, offsets = np.array([1, 2, 3, 4, 2, 2, 2, 2, 1]), np.array([0, 3, 4, 9])
    entry = make_task(tmp_path, sequences=(tokens, offsets))
    assert entry["sha256"] == make_task(tmp_path / "again")["sha256"]
    split = load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    np.testing.assert_array_equal(split.tokens, tokens)
    np.testing.assert_array_equal(split.offsets, offsets)


def test_manifest_fields(tmp_path):
    make_task(tmp_path)
    manifest = load_manifest(tmp_path, rebuild_cmd=REBUILD)
    assert manifest["format"] == "lra-compact" and manifest["version"] == 1
    assert manifest["task"] == "toy" and manifest["vocab"] == VOCAB and manifest["vocab_size"] == 5
    assert manifest["num_classes"] == 3 and manifest["command"] == REBUILD
    assert manifest["source"] == {"made_by": "test"}
    assert set(manifest["splits"]["train"]) == {"file", "count", "max_length", "min_length", "sha256"}


@pytest.mark.parametrize(
    "vocab_size, dtype",
    [(16, np.uint8), (256, np.uint8), (257, np.uint16), (65536, np.uint16), (65537, np.int32)],
)
def test_token_dtype_is_smallest_that_fits(vocab_size, dtype):
    assert token_dtype(vocab_size) == dtype


def test_pack_sequences_rejects_bad_input():
    with pytest.raises(ValueError, match="token ids"):
        pack_sequences([np.array([1, 5])], vocab_size=5)
    with pytest.raises(ValueError, match="token ids"):
        pack_sequences([np.array([-1])], vocab_size=5)
    with pytest.raises(ValueError, match="offsets"):
        pack_sequences((np.array([1, 2]), np.array([0, 3])), vocab_size=5)
    with pytest.raises(ValueError, match="1-D"):
        pack_sequences([np.zeros((2, 2), int)], vocab_size=5)


def test_write_split_rejects_label_count_mismatch(tmp_path):
    with pytest.raises(ValueError, match="labels"):
        write_split(tmp_path, "train", SEQUENCES, LABELS[:2], len(VOCAB))


def test_staged_task_dir_swaps_in_only_complete_data(tmp_path):
    task_dir = tmp_path / "toy"
    task_dir.mkdir()
    make_task(task_dir)
    (task_dir / "notes.txt").write_text("mine")
    before = manifest_path(task_dir).read_bytes()
    with pytest.raises(RuntimeError), staged_task_dir(task_dir) as stage:
        write_split(stage, "train", SEQUENCES[:2], LABELS[:2], len(VOCAB))
        raise RuntimeError("bad input found half way")
    assert manifest_path(task_dir).read_bytes() == before
    assert len(load_split(task_dir, "train", rebuild_cmd=REBUILD)) == 3
    with staged_task_dir(task_dir) as stage:
        make_task(stage, SEQUENCES[:2], LABELS[:2])
    assert len(load_split(task_dir, "train", rebuild_cmd=REBUILD)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy"]  # the staging folder is gone
    assert (task_dir / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("file", ["../elsewhere.npz", "/tmp/elsewhere.npz", "sub/train.npz", "link.npz"])
def test_manifest_file_outside_the_folder_is_refused(tmp_path, file):
    task_dir, elsewhere = tmp_path / "toy", tmp_path / "elsewhere"
    task_dir.mkdir()
    elsewhere.mkdir()
    make_task(elsewhere)
    make_task(task_dir)
    os.symlink(elsewhere / "train.npz", task_dir / "link.npz")
    manifest = json.loads(manifest_path(task_dir).read_text())
    manifest["splits"]["train"]["file"] = file
    manifest_path(task_dir).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"field 'splits.train.file' .* is not a file in") as error:
        load_split(task_dir, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "manifest.json")


def test_manifest_without_source_names_the_field(tmp_path):
    make_task(tmp_path)
    manifest = json.loads(manifest_path(tmp_path).read_text())
    del manifest["source"]
    manifest_path(tmp_path).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="field 'source' is missing") as error:
        load_manifest(tmp_path, rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "manifest.json")


def test_missing_folder(tmp_path):
    with pytest.raises(DataError) as error:
        load_manifest(tmp_path / "nothing", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "nothing")


@pytest.mark.parametrize(
    "text, field",
    [
        ("{not json", "cannot read"),
        ('{"format": "other"}', "format"),
        ('{"format": "lra-compact", "version": 7}', "version"),
        ('{"format": "lra-compact", "version": 1}', "task"),
    ],
)
def test_bad_manifest(tmp_path, text, field):
    make_task(tmp_path)
    manifest_path(tmp_path).write_text(text)
    with pytest.raises(DataError, match=field) as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "manifest.json")


def test_split_not_listed(tmp_path):
    make_task(tmp_path)
    with pytest.raises(DataError, match="'val' not listed") as error:
        load_split(tmp_path, "val", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "manifest.json")


def test_missing_split_file(tmp_path):
    make_task(tmp_path)
    (tmp_path / "train.npz").unlink()
    with pytest.raises(DataError, match="missing") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def flip_middle_bytes(path):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4] = bytes(b ^ 0xFF for b in data[middle : middle + 4])
    path.write_bytes(bytes(data))


def test_corrupted_file_fails_checksum(tmp_path):
    sequences = [np.arange(1, 5).repeat(100)] * 4
    make_task(tmp_path, sequences=sequences, labels=np.zeros(4, int))
    flip_middle_bytes(tmp_path / "train.npz")
    with pytest.raises(DataError, match="sha256") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def test_corrupted_file_fails_to_load_without_checksum(tmp_path):
    sequences = [np.arange(1, 5).repeat(100)] * 4
    make_task(tmp_path, sequences=sequences, labels=np.zeros(4, int))
    flip_middle_bytes(tmp_path / "train.npz")
    with pytest.raises(DataError, match="cannot read arrays") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD, verify=False)
    assert_names_file_and_command(error, "train.npz")


def test_replaced_file_fails_checksum(tmp_path):
    make_task(tmp_path)
    write_split(tmp_path, "train", SEQUENCES[::-1], LABELS, len(VOCAB))
    with pytest.raises(DataError, match="sha256") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def test_label_out_of_range(tmp_path):
    make_task(tmp_path, labels=np.array([0, 3, 1]), num_classes=3)
    with pytest.raises(DataError, match="labels") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def test_token_id_beyond_vocab(tmp_path):
    make_task(tmp_path, sequences=[np.array([1, 9])], labels=np.array([0]), write_vocab=10)
    with pytest.raises(DataError, match="ids outside") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def test_count_mismatch_with_manifest(tmp_path):
    entry = make_task(tmp_path)
    manifest = json.loads(manifest_path(tmp_path).read_text())
    manifest["splits"]["train"] = {**entry, "count": 4}
    manifest_path(tmp_path).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="labels") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def test_inconsistent_offsets(tmp_path):
    arrays = {"tokens": np.array([1, 2], np.uint8), "offsets": np.array([0, 3]), "labels": np.array([0])}
    entry = write_arrays(tmp_path, "train", arrays)
    entry.update(count=1, max_length=3, min_length=3)
    write_manifest(
        tmp_path, task="toy", vocab=VOCAB, num_classes=3, splits={"train": entry}, source={}, command=REBUILD
    )
    with pytest.raises(DataError, match="inconsistent") as error:
        load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert_names_file_and_command(error, "train.npz")


def test_second_sequence_arrays_load_as_extra(tmp_path):
    tokens, offsets = pack_sequences(SEQUENCES, len(VOCAB))
    arrays = {
        "tokens": tokens,
        "offsets": offsets,
        "tokens2": tokens[::-1].copy(),
        "offsets2": offsets,
        "labels": LABELS,
    }
    entry = write_arrays(tmp_path, "train", arrays, compress=True)
    entry.update(count=3, max_length=5, min_length=1)
    write_manifest(
        tmp_path, task="toy", vocab=VOCAB, num_classes=3, splits={"train": entry}, source={}, command=REBUILD
    )
    split = load_split(tmp_path, "train", rebuild_cmd=REBUILD)
    assert sorted(split.extra) == ["offsets2", "tokens2"]
    np.testing.assert_array_equal(split.extra["tokens2"], tokens[::-1])
