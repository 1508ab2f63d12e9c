"""AAN TSV -> LRA Retrieval: both documents as bytes, file order, release layouts, malformed lines."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_prep import retrieval
from data_prep.byte_tokens import decode
from data_prep.compact import DataError, load_manifest, load_split
from tests.data_prep.official_fixtures import aan_rows, write_aan

REPO = Path(__file__).resolve().parents[2]
REBUILD = "python -m data_prep retrieval --source PATH --out data"
SPLITS = {"train": "train", "val": "eval", "test": "test"}


def quiet(_message):
    pass


def pairs(task_dir, split):
    data = load_split(task_dir, split, rebuild_cmd=REBUILD)
    tokens2, offsets2 = data.extra["tokens2"], data.extra["offsets2"]
    return [(int(y), decode(data.sequence(i)), decode(tokens2[offsets2[i] : offsets2[i + 1]]))
            for i, y in enumerate(data.labels)]


def expected(rows, max_length=4000):
    return [(int(float(y)), a.encode()[:max_length], b.encode()[:max_length]) for y, _, _, a, b in rows]


@pytest.fixture(scope="module")
def rows():
    return aan_rows(seed=0)


@pytest.fixture(scope="module")
def source(rows, tmp_path_factory):
    return write_aan(tmp_path_factory.mktemp("aan") / "tsv_data", rows)


@pytest.fixture(scope="module")
def task_dir(source, tmp_path_factory):
    return retrieval.convert(source, tmp_path_factory.mktemp("out"), log=quiet)


def test_round_trip_in_file_order(task_dir, rows):
    for split, name in SPLITS.items():
        assert pairs(task_dir, split) == expected(rows[name])
    manifest = load_manifest(task_dir, rebuild_cmd=REBUILD)
    assert manifest["vocab_size"] == 257 and manifest["num_classes"] == 2
    entry = manifest["splits"]["train"]
    lengths2 = [len(b.encode()) for *_, b in rows["train"]]
    assert entry["max_length2"] == max(lengths2) and entry["min_length2"] == min(lengths2)
    assert {0, 1} == set(load_split(task_dir, "train", rebuild_cmd=REBUILD).labels.tolist())


def test_truncates_each_document(source, rows, tmp_path):
    task_dir = retrieval.convert(source, tmp_path, max_length=25, log=quiet)
    assert pairs(task_dir, "test") == expected(rows["test"], max_length=25)
    assert "--max-length 25" in load_manifest(task_dir, rebuild_cmd=REBUILD)["command"]


def test_release_root_and_crlf_lines_are_accepted(rows, task_dir, tmp_path):
    folder = write_aan(tmp_path / "lra_release" / "lra_release" / "tsv_data", rows)
    for name in SPLITS.values():
        path = folder / f"new_aan_pairs.{name}.tsv"
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    other = retrieval.convert(tmp_path, tmp_path / "out", log=quiet)
    for split in SPLITS:
        assert pairs(other, split) == pairs(task_dir, split)


def test_quotes_are_plain_characters(tmp_path):
    rows = {name: [("1.0", "a", "b", '"open quote, no close', 'x"y')] for name in SPLITS.values()}
    task_dir = retrieval.convert(write_aan(tmp_path / "tsv", rows), tmp_path, log=quiet)
    assert pairs(task_dir, "val") == [(1, b'"open quote, no close', b'x"y')]


@pytest.mark.parametrize("line,problem", [
    (b"1.0\ta\tb\tonly four", "expected 5 tab-separated fields .* found 4"),
    (b"0.0\ta\tb\tt1\tt2\textra", "expected 5 .* found 6"),
    (b"2.0\ta\tb\tt1\tt2", "label '2.0' is not 0 or 1"),
    (b"yes\ta\tb\tt1\tt2", "label 'yes' is not 0 or 1"),
])
def test_malformed_line_names_file_and_line(rows, tmp_path, line, problem):
    folder = write_aan(tmp_path, rows)
    path = folder / "new_aan_pairs.eval.tsv"
    lines = path.read_bytes().split(b"\n")
    lines.insert(2, line)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=f"{path}: line 3: {problem}"):
        retrieval.convert(folder, tmp_path / "out", log=quiet)


def test_missing_files_are_named(rows, tmp_path):
    folder = write_aan(tmp_path, rows)
    (folder / "new_aan_pairs.test.tsv").unlink()
    with pytest.raises(DataError, match="missing new_aan_pairs.test.tsv"):
        retrieval.convert(folder, tmp_path / "out", log=quiet)
    with pytest.raises(DataError, match=r"no new_aan_pairs.train.tsv found.*lra_release.gz"):
        retrieval.convert(tmp_path / "nowhere", tmp_path / "out", log=quiet)


def test_cli_converts_and_reports_errors(source, task_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "data_prep", "retrieval", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    ok = cli("--source", str(source), "--out", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    for split in SPLITS:
        assert (tmp_path / "retrieval" / f"{split}.npz").read_bytes() == (task_dir / f"{split}.npz").read_bytes()
    bad = cli("--source", str(source), "--out", str(tmp_path), "--max-length", "0")
    assert bad.returncode == 2 and "--max-length must be positive" in bad.stderr and "Traceback" not in bad.stderr
    assert np.array_equal(load_split(task_dir, "train", rebuild_cmd=REBUILD).offsets[:1], [0])
