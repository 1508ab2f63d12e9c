"""CIFAR-10 -> LRA Image: restricted unpickling, grey levels as tf.image.rgb_to_grayscale, 90/10 split."""

import os
import pickle
import pickletools
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from data_prep import image, safe_pickle
from data_prep.compact import DataError, load_manifest, load_split
from tests.data_prep.official_fixtures import cifar_batches, python2_batch_pickle, write_cifar

REPO = Path(__file__).resolve().parents[2]
REBUILD = "python -m data_prep image --source PATH --out data"


def quiet(_message):
    pass


@pytest.fixture(scope="module")
def batches():
    return cifar_batches(seed=0)


@pytest.fixture(scope="module")
def task_dir(batches, tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    write_cifar(root, batches)
    return image.convert(root, root / "out", log=quiet)


def reference_grey(r: int, g: int, b: int) -> tuple[int, bool]:
    """TF's rule in exact arithmetic: floor(255.5 * (0.2989 R + 0.5870 G + 0.1140 B) / 255), and whether
    the value lies so close to an integer that float32 rounding may decide it."""
    value = Fraction(2989 * r + 5870 * g + 1140 * b, 10000) * Fraction(511, 2) / 255
    level = int(value)
    return level, min(value - level, level + 1 - value) < Fraction(1, 10**4)


def test_python2_pickle_is_read_exactly(batches):
    data, labels = batches["data_batch_1"]
    loaded = safe_pickle.loads(python2_batch_pickle(data, labels))
    assert loaded[b"data"].dtype == np.uint8 and np.array_equal(loaded[b"data"], data)
    assert loaded[b"labels"] == labels and loaded[b"batch_label"] == b"training batch 1 of 5"


def test_known_colours_follow_tensorflow_not_rounding():
    pixels = {(0, 0, 0): 0, (255, 255, 255): 255, (255, 0, 0): 76, (0, 0, 255): 29, (0, 255, 0): 149}
    rows = np.zeros((len(pixels), 3072), np.uint8)
    for i, (r, g, b) in enumerate(pixels):
        rows[i].reshape(3, 1024)[:, 7] = (r, g, b)
    grey = image.to_grey(rows)[:, 7]
    assert grey.tolist() == list(pixels.values())
    assert round(0.5870 * 255) == 150  # pure green: rounding would give 150, TF's truncating cast 149


def test_grey_levels_match_exact_reference(task_dir, batches):
    data = np.concatenate([batches[f"data_batch_{i}"][0] for i in range(1, 6)])
    grey = np.concatenate([load_split(task_dir, s, rebuild_cmd=REBUILD).tokens for s in ("train", "val")])
    rgb = data.reshape(-1, 3, 1024).transpose(0, 2, 1).reshape(-1, 3)
    ambiguous = 0
    for (r, g, b), got in zip(rgb.tolist(), grey.tolist()):
        level, near_boundary = reference_grey(r, g, b)
        ambiguous += near_boundary
        assert got == level or (near_boundary and abs(got - level) == 1), (r, g, b, got, level)
    assert ambiguous < len(rgb) // 1000


def test_splits_sizes_order_and_labels(task_dir, batches):
    train_labels = sum((batches[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    splits = {s: load_split(task_dir, s, rebuild_cmd=REBUILD) for s in ("train", "val", "test")}
    cut = round(0.9 * len(train_labels))
    assert splits["train"].labels.tolist() == train_labels[:cut]
    assert splits["val"].labels.tolist() == train_labels[cut:]
    assert splits["test"].labels.tolist() == batches["test_batch"][1]
    for split in splits.values():
        assert np.all(split.lengths == 1024) and split.tokens.dtype == np.uint8
    expected_test = image.to_grey(batches["test_batch"][0]).reshape(-1)
    assert np.array_equal(splits["test"].tokens, expected_test)
    manifest = load_manifest(task_dir, rebuild_cmd=REBUILD)
    assert manifest["vocab_size"] == 256 and manifest["num_classes"] == 10
    assert manifest["command"].startswith("python -m data_prep image --source ")


def test_numpy_resaved_batches_give_identical_files(task_dir, batches, tmp_path):
    write_cifar(tmp_path, batches, style="numpy")
    other = image.convert(tmp_path / "cifar-10-batches-py", tmp_path / "out", log=quiet)
    for split in ("train", "val", "test"):
        assert (other / f"{split}.npz").read_bytes() == (task_dir / f"{split}.npz").read_bytes()


class RunsCommand:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class CallsEval:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


@pytest.mark.parametrize("make_payload", [
    lambda marker: RunsCommand(f"touch {marker}"),
    lambda marker: {b"data": CallsEval(f"open({str(marker)!r}, 'w')"), b"labels": []},
], ids=["os.system", "nested-eval"])
def test_crafted_pickle_is_refused_and_runs_nothing(batches, tmp_path, make_payload):
    marker = tmp_path / "pwned"
    folder = write_cifar(tmp_path, batches)
    blob = pickle.dumps(make_payload(marker), protocol=2)
    globals_named = {arg for op, arg, _ in pickletools.genops(blob) if op.name == "GLOBAL"}
    assert globals_named & {f"{os.system.__module__} system", "__builtin__ eval"}  # the payload is live
    (folder / "data_batch_3").write_bytes(blob)
    with pytest.raises(DataError, match=r"data_batch_3: not a CIFAR-10 python batch .*refusing to load global"):
        image.convert(tmp_path, tmp_path / "out", log=quiet)
    assert not marker.exists()


@pytest.mark.parametrize("blob,problem", [
    (pickle.dumps({b"labels": [1]}, protocol=2), "'data' is not a uint8 array"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [1, 2]}, protocol=2), "'data' is not"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, protocol=2), "'labels' is not a list"),
    (pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, protocol=2), "outside 0-9"),
    (pickle.dumps([1, 2], protocol=2), "expected a dict"),
    (b"\x80\x02}q\x00(U\x04data", "not a CIFAR-10 python batch"),
], ids=["no-data", "float-data", "label-count", "label-range", "not-dict", "truncated"])
def test_malformed_batch_names_file_and_problem(batches, tmp_path, blob, problem):
    folder = write_cifar(tmp_path, batches)
    (folder / "test_batch").write_bytes(blob)
    with pytest.raises(DataError, match=problem) as err:
        image.convert(tmp_path, tmp_path / "out", log=quiet)
    assert str(folder / "test_batch") in str(err.value)


def test_missing_batches_are_named(batches, tmp_path):
    folder = write_cifar(tmp_path, batches)
    (folder / "data_batch_4").unlink()
    with pytest.raises(DataError, match="missing data_batch_4"):
        image.convert(tmp_path, tmp_path / "out", log=quiet)
    with pytest.raises(DataError, match="cifar-10-python.tar.gz"):
        image.convert(tmp_path / "nowhere", tmp_path / "out", log=quiet)


def test_cli_converts_and_reports_errors(batches, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    folder = write_cifar(tmp_path, batches)
    ok = subprocess.run([sys.executable, "-m", "data_prep", "image", "--source", str(folder), "--out",
                         str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert load_manifest(tmp_path / "out" / "image", rebuild_cmd=REBUILD)["splits"]["test"]["count"] == 6
    bad = subprocess.run([sys.executable, "-m", "data_prep", "image", "--source", str(tmp_path / "no"), "--out",
                          str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no CIFAR-10 batches found" in bad.stderr and "Traceback" not in bad.stderr
