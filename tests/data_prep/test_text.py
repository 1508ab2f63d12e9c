"""IMDB -> LRA Text: bytes as ids b + 1, truncation, seeded val hold-out, both source layouts, CLI."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_prep import text
from data_prep.__main__ import main as data_prep_main
from data_prep.byte_tokens import decode
from data_prep.compact import DataError, load_manifest, load_split
from tests.data_prep.official_fixtures import imdb_reviews, write_aclimdb

REPO = Path(__file__).resolve().parents[2]
REBUILD = "python -m data_prep text --source PATH --out data"
SPLITS = ("train", "val", "test")


def quiet(_message):
    pass


def examples(task_dir, split):
    data = load_split(task_dir, split, rebuild_cmd=REBUILD)
    return [(int(y), decode(data.sequence(i))) for i, y in enumerate(data.labels)]


def expected(reviews, split, max_length=0):
    pairs = [(text.LABELS[c], r.encode("utf-8")) for c, texts in reviews[split].items() for r in texts]
    return sorted((y, b[:max_length] if max_length else b) for y, b in pairs)


@pytest.fixture(scope="module")
def reviews():
    return imdb_reviews(seed=0)


@pytest.fixture(scope="module")
def source(reviews, tmp_path_factory):
    return write_aclimdb(tmp_path_factory.mktemp("imdb"), reviews)


@pytest.fixture(scope="module")
def task_dir(source, tmp_path_factory):
    return text.convert(source.parent, tmp_path_factory.mktemp("out"), log=quiet)


def test_round_trip_bytes_labels_and_hold_out(task_dir, reviews):
    got = {split: examples(task_dir, split) for split in SPLITS}
    assert sorted(got["train"] + got["val"]) == expected(reviews, "train")
    assert got["test"] == expected(reviews, "test")
    n_train = len(expected(reviews, "train"))
    assert len(got["val"]) == round(0.1 * n_train) and len(got["train"]) == n_train - len(got["val"])
    manifest = load_manifest(task_dir, rebuild_cmd=REBUILD)
    assert manifest["vocab_size"] == 257 and manifest["vocab"][0] == "<pad>" and manifest["num_classes"] == 2
    assert manifest["source"]["max_length"] == 4096 and manifest["source"]["val_fraction"] == 0.1
    assert manifest["command"].startswith("python -m data_prep text --source ")


def test_utf8_bytes_become_ids_plus_one(task_dir):
    data = load_split(task_dir, "test", rebuild_cmd=REBUILD)
    assert data.tokens.min() >= 1 and data.tokens.max() <= 256
    all_ids = data.tokens.astype(np.int64).tolist()
    e_acute = [b + 1 for b in "é".encode()]  # [0xC3 + 1, 0xA9 + 1]
    assert any(all_ids[i : i + 2] == e_acute for i in range(len(all_ids) - 1))


def test_truncation_keeps_the_first_bytes(source, reviews, tmp_path):
    task_dir = text.convert(source, tmp_path, max_length=40, log=quiet)
    assert examples(task_dir, "test") == expected(reviews, "test", max_length=40)
    assert load_manifest(task_dir, rebuild_cmd=REBUILD)["splits"]["test"]["max_length"] == 40
    assert "--max-length 40" in load_manifest(task_dir, rebuild_cmd=REBUILD)["command"]


def test_hold_out_is_seeded(source, task_dir, tmp_path):
    same = text.convert(source, tmp_path / "same", log=quiet)
    other = text.convert(source, tmp_path / "other", seed=1, log=quiet)
    assert (same / "val.npz").read_bytes() == (task_dir / "val.npz").read_bytes()
    assert examples(other, "val") != examples(task_dir, "val")
    assert sorted(examples(other, "train") + examples(other, "val")) == sorted(
        examples(task_dir, "train") + examples(task_dir, "val"))


def test_parquet_without_engine_says_how_to_fix(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("pyarrow", "fastparquet") else real_find_spec(name, *a))
    folder = tmp_path / "plain_text"
    folder.mkdir()
    for name in text.PARQUET_FILES.values():
        (folder / name).write_bytes(b"PAR1")
    with pytest.raises(DataError, match=r"needs pyarrow.*pip install pyarrow.*aclImdb"):
        text.convert(tmp_path, tmp_path / "out", log=quiet)


def test_parquet_layout_gives_identical_files(reviews, task_dir, tmp_path):
    import pandas as pd

    folder = tmp_path / "plain_text"
    folder.mkdir()
    for split, name in text.PARQUET_FILES.items():
        rows = [(r, text.LABELS[c]) for c, texts in reviews[split].items() for r in texts]
        pd.DataFrame(rows, columns=["text", "label"]).to_parquet(folder / name)
    other = text.convert(tmp_path, tmp_path / "out", log=quiet)
    for split in SPLITS:
        assert (other / f"{split}.npz").read_bytes() == (task_dir / f"{split}.npz").read_bytes()


def test_missing_source_names_what_is_expected(source, tmp_path):
    with pytest.raises(DataError, match=r"no IMDB data found.*aclImdb_v1.tar.gz.*stanfordnlp/imdb"):
        text.convert(tmp_path, tmp_path / "out", log=quiet)
    broken = write_aclimdb(tmp_path, {"train": {"pos": ["good"]}, "test": {"neg": ["bad"], "pos": ["ok"]}})
    with pytest.raises(DataError, match="missing folder.*train/neg"):
        text.convert(broken, tmp_path / "out", log=quiet)


@pytest.mark.parametrize("option,value", [("max_length", -1), ("val_fraction", 0.0), ("val_fraction", 1.0)])
def test_bad_options_are_refused(source, tmp_path, option, value):
    with pytest.raises(ValueError, match=option.replace("_", "-")):
        text.convert(source, tmp_path, **{option: value}, log=quiet)


def test_cli_rebuilds_identical_files_and_reports_errors(source, task_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "data_prep", "text", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    ok = cli("--source", str(source.parent), "--out", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    for split in SPLITS:
        assert (tmp_path / "text" / f"{split}.npz").read_bytes() == (task_dir / f"{split}.npz").read_bytes()
    bad = cli("--source", str(tmp_path / "nowhere"), "--out", str(tmp_path))
    assert bad.returncode == 2 and "no IMDB data found" in bad.stderr and "Traceback" not in bad.stderr


def test_a_review_linking_outside_the_folder_is_refused(reviews, tmp_path):
    source = write_aclimdb(tmp_path / "imdb", reviews)
    secret = tmp_path / "secret.txt"
    secret.write_text("not a review")
    (source / "train" / "pos" / "0_8.txt").unlink()
    os.symlink(secret, source / "train" / "pos" / "0_8.txt")
    with pytest.raises(DataError, match=r"0_8\.txt: a link that leads outside"):
        text.convert(source, tmp_path / "out", log=quiet)
    assert not (tmp_path / "out" / "text").exists()


@pytest.mark.parametrize("task, where", [("text", "aclImdb_v1.tar.gz"), ("retrieval", "lra_release.gz"),
                                         ("image", "cifar-10-python.tar.gz")])
def test_cli_without_source_says_where_the_files_come_from(tmp_path, capsys, task, where):
    assert data_prep_main([task, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--source PATH is required" in err and where in err
    assert f"python -m data_prep {task} --source PATH --out {tmp_path}" in err


def test_reviews_lose_their_surrounding_whitespace_in_both_layouts_as_tfds_reads_them(reviews, tmp_path):
    import pandas as pd

    padded = {split: {c: [f" \n{r}\t \r\n" if i % 2 else r for i, r in enumerate(texts)]
                      for c, texts in classes.items()} for split, classes in reviews.items()}
    folder = text.convert(write_aclimdb(tmp_path / "a", padded).parent, tmp_path / "out_a", log=quiet)
    assert examples(folder, "test") == expected(reviews, "test")  # the bytes tfds imdb_reviews yields
    assert load_manifest(folder, rebuild_cmd=REBUILD)["source"]["strip"].startswith("surrounding ASCII whitespace")
    plain = tmp_path / "p" / "plain_text"
    plain.mkdir(parents=True)
    for split, name in text.PARQUET_FILES.items():
        rows = [(r, text.LABELS[c]) for c, texts in padded[split].items() for r in texts]
        pd.DataFrame(rows, columns=["text", "label"]).to_parquet(plain / name)
    other = text.convert(plain.parent, tmp_path / "out_p", log=quiet)
    for split in SPLITS:
        assert (other / f"{split}.npz").read_bytes() == (folder / f"{split}.npz").read_bytes()


def test_a_review_of_whitespace_only_is_refused_naming_the_file(reviews, tmp_path):
    source = write_aclimdb(tmp_path, reviews)
    blank = source / "train" / "neg" / "0_3.txt"
    blank.write_bytes(b" \n\t ")
    with pytest.raises(DataError, match=r"0_3\.txt: an empty review \(whitespace only\)"):
        text.convert(source.parent, tmp_path / "out", log=quiet)
