"""Tests of the ListOps generator, its TSV export/import and the ``python -m data_prep listops`` CLI.

Labels and format are checked against code written here from the published rules (a parser of the
parenthesised pair form, an evaluator, a recursive reference sampler), not against the generator's own.
"""

import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_prep import listops
from data_prep.compact import DataError, load_manifest, load_split
from data_prep.listops_tsv import TOKEN_IDS, evaluate, source_strings, tokenize

REPO = Path(__file__).resolve().parents[2]
SIZES = {"train": 300, "val": 50, "test": 50}
RULES = {"min_length": 20, "max_length": 100, "max_depth": 10, "max_args": 10}
REBUILD = "python -m data_prep listops --out data"
SPLITS = ("train", "val", "test")


def quiet(_message):
    pass


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("listops_data")
    return listops.generate(out, **SIZES, **RULES, seed=0, fmt="tsv", log=quiet)


@pytest.fixture(scope="module")
def splits(task_dir):
    return {split: load_split(task_dir, split, rebuild_cmd=REBUILD) for split in SPLITS}


def parse_pairs(words, i=0):
    """Parse the published form: an atom, or '( left right )'. Returns (node, next index)."""
    if words[i] != "(":
        return words[i], i + 1
    left, i = parse_pairs(words, i + 1)
    right, i = parse_pairs(words, i)
    assert words[i] == ")", f"pair not closed at word {i}"
    return (left, right), i + 1


def unwind(node):
    """(operator, arguments) of an operator node ((((op, a1), a2) ...), ']'), or (None, digit)."""
    if isinstance(node, str):
        return None, int(node)
    spine, end = node
    assert end == "]"
    arguments = []
    while isinstance(spine, tuple):
        spine, argument = spine
        arguments.insert(0, argument)
    return spine, arguments


def value_and_depth(node):
    """Value of a parsed tree and the depth of its deepest node (root depth 1)."""
    op, arguments = unwind(node)
    if op is None:
        return arguments, 1
    assert 2 <= len(arguments) <= RULES["max_args"]
    results = [value_and_depth(a) for a in arguments]
    values = [v for v, _ in results]
    value = {
        "[MIN": min(values),
        "[MAX": max(values),
        "[MED": int(statistics.median(values)),
        "[SM": sum(values) % 10,
    }[op]
    return value, 1 + max(d for _, d in results)


def read_rows(path):
    text = path.read_bytes().decode()
    assert text.startswith("Source\tTarget\r\n")
    return [line.split("\t") for line in text.split("\r\n")[1:-1]]


def words_without_parens(source):
    return [w for w in source.split() if w not in "()"]


def test_tsv_labels_match_independent_evaluator(task_dir):
    for split in SPLITS:
        rows = read_rows(task_dir / f"basic_{split}.tsv")
        assert len(rows) == SIZES[split]
        for source, target in rows:
            words = source.split()
            tree, end = parse_pairs(words)
            assert end == len(words)
            value, depth = value_and_depth(tree)
            assert value == int(target)
            assert depth <= RULES["max_depth"]


def test_compact_matches_tsv_and_labels(task_dir, splits):
    vocab = load_manifest(task_dir, rebuild_cmd=REBUILD)["vocab"]
    for split in SPLITS:
        rows = read_rows(task_dir / f"basic_{split}.tsv")
        data = splits[split]
        for i, (source, target) in enumerate(rows):
            assert [vocab[t] for t in data.sequence(i)] == words_without_parens(source)
            assert data.labels[i] == int(target) == evaluate(source)


def test_lengths_strictly_within_bounds(splits):
    for data in splits.values():
        assert data.lengths.min() > RULES["min_length"]
        assert data.lengths.max() < RULES["max_length"]


def test_counts_vocab_and_manifest(task_dir, splits):
    manifest = load_manifest(task_dir, rebuild_cmd=REBUILD)
    assert manifest["task"] == "listops" and manifest["num_classes"] == 10
    assert manifest["vocab"] == ["<pad>", *"0123456789", "[MIN", "[MAX", "[MED", "[SM", "]"]
    assert {s: e["count"] for s, e in manifest["splits"].items()} == SIZES
    assert {s: len(d) for s, d in splits.items()} == SIZES
    assert manifest["command"] == (
        f"python -m data_prep listops --out {task_dir.parent} --train 300 --val 50 --test 50 --min-length 20 "
        "--max-length 100 --max-depth 10 --max-args 10 --seed 0 --format tsv"
    )
    assert all(d.tokens.dtype == np.uint8 for d in splits.values())
    assert len(set(np.concatenate([d.labels for d in splits.values()]).tolist())) >= 8


def test_no_duplicates_within_or_across_splits(splits):
    trees = [d.sequence(i).tobytes() for d in splits.values() for i in range(len(d))]
    assert len(set(trees)) == len(trees) == sum(SIZES.values())


def test_same_seed_same_data_other_seed_differs():
    first = listops.sample_trees(100, **RULES, seed=3, log=quiet)
    again = listops.sample_trees(100, **RULES, seed=3, log=quiet)
    other = listops.sample_trees(100, **RULES, seed=4, log=quiet)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    assert first[1].shape != other[1].shape or not np.array_equal(first[0], other[0])


def test_splits_follow_generation_order(splits):
    tokens, offsets, labels, _ = listops.sample_trees(sum(SIZES.values()), **RULES, seed=0, log=quiet)
    np.testing.assert_array_equal(np.concatenate([d.labels for d in splits.values()]), labels)
    np.testing.assert_array_equal(splits["test"].tokens, tokens[offsets[SIZES["train"] + SIZES["val"]] :])


def reference_length(rng, depth):
    """Length of one tree drawn by the published recursive rules (random.Random stream)."""
    if depth < RULES["max_depth"] and rng.random() <= listops.VALUE_P:
        return 2 + sum(reference_length(rng, depth + 1) for _ in range(rng.randint(2, RULES["max_args"])))
    return 1


def test_length_distribution_matches_recursive_reference():
    rng = random.Random(0)
    reference = np.array([reference_length(rng, 1) for _ in range(30000)])
    generator = np.random.default_rng(0)
    ours = []
    for _ in range(4):
        _, lengths, complete = listops._draw_shapes(generator, RULES["max_depth"], RULES["max_args"], 10**6)
        ours.append(lengths[complete])
    ours = np.concatenate(ours)
    for low, high in [(0, 2), (3, 5), (5, 20), (20, 100), (100, 400)]:
        expected = np.mean((reference > low) & (reference < high))
        observed = np.mean((ours > low) & (ours < high))
        assert abs(observed - expected) < 5 * np.sqrt(expected * (1 - expected) / 15000), (low, high)
    assert abs(np.mean(ours == 1) - 0.75) < 0.01


def test_source_strings_known_examples():
    ids = TOKEN_IDS
    max_2_9 = [ids["[MAX"], ids["2"], ids["9"], ids["]"]]
    nested = [ids["[MIN"], *max_2_9, ids["3"], ids["]"]]
    strings = source_strings(np.array(max_2_9 + nested + [ids["7"]]), np.array([0, 4, 11, 12]))
    assert strings == ["( ( ( [MAX 2 ) 9 ) ] )", "( ( ( [MIN ( ( ( [MAX 2 ) 9 ) ] ) ) 3 ) ] )", "7"]
    assert [evaluate(s) for s in strings] == [9, 3, 7]


@pytest.mark.parametrize("word", ["[FOO", "<pad>", "X"])
def test_tokenize_rejects_unknown_token(word):
    with pytest.raises(ValueError, match=re.escape(word)):
        tokenize(f"( ( ( [MAX 1 ) {word} ) ] )")


def test_tsv_import_round_trip(task_dir, splits, tmp_path):
    imported = listops.import_tsv(task_dir, tmp_path, log=quiet)
    assert imported == tmp_path / "listops"
    for split in SPLITS:
        again = load_split(imported, split, rebuild_cmd=REBUILD)
        np.testing.assert_array_equal(again.tokens, splits[split].tokens)
        np.testing.assert_array_equal(again.offsets, splits[split].offsets)
        np.testing.assert_array_equal(again.labels, splits[split].labels)
    assert "--source" in load_manifest(imported, rebuild_cmd=REBUILD)["command"]


@pytest.mark.parametrize(
    "bad_line, problem",
    [
        ("( ( [FOO 1 ) ] )\t1", "FOO"),
        ("( ( ( [MAX 2 ) 9 ) ] )", "Target"),
        ("( ( ( [MAX 2 ) 9 ) ]\t9", "unbalanced"),
        ("( ( ( [MAX 2 ) 9 ) ] )\t12", "Target"),
        ("] 2 3 [MAX\t3", "closes no operator"),
        ("( ( ( [MAX 2 ) 9 ) ] )\t7", "Target is 7 but the expression's value is 9"),
        ("( ( [MAX ) ] )\t1", "before any argument"),
        ("( ( ( [MAX 2 ) 9 ) ] ) 4\t9", "follows a complete expression"),
        ("\t3", "no expression"),
    ],
)
def test_malformed_tsv_line_names_file_and_line(task_dir, tmp_path, bad_line, problem):
    source = tmp_path / "source"
    source.mkdir()
    for split in SPLITS:
        lines = (task_dir / f"basic_{split}.tsv").read_bytes().split(b"\r\n")
        if split == "val":
            lines[4] = bad_line.encode()
        (source / f"basic_{split}.tsv").write_bytes(b"\r\n".join(lines))
    with pytest.raises(DataError, match=problem) as error:
        listops.import_tsv(source, tmp_path / "out", log=quiet)
    assert "basic_val.tsv: line 5: " in str(error.value)


def official_copy(task_dir, folder, edit=None):
    """The three TSVs of ``task_dir`` in ``folder``; ``edit(split, lines)`` may change the lines of one."""
    folder.mkdir(exist_ok=True)
    for split in SPLITS:
        lines = (task_dir / f"basic_{split}.tsv").read_bytes().split(b"\r\n")
        (folder / f"basic_{split}.tsv").write_bytes(b"\r\n".join(edit(split, lines) if edit else lines))
    return folder


def test_non_utf8_byte_names_file_and_line(task_dir, tmp_path):
    def bad_byte(split, lines):
        if split == "test":
            lines[3] = lines[3][:7] + b"\xff" + lines[3][7:]
        return lines

    with pytest.raises(DataError, match=r"basic_test.tsv: line 4: byte 8 is not UTF-8"):
        listops.import_tsv(official_copy(task_dir, tmp_path / "source", bad_byte), tmp_path / "out", log=quiet)


def test_empty_split_is_refused(task_dir, tmp_path):
    source = official_copy(task_dir, tmp_path / "source", lambda split, lines: lines[:1] if split == "val" else lines)
    with pytest.raises(DataError, match="basic_val.tsv: no rows after the header"):
        listops.import_tsv(source, tmp_path / "out", log=quiet)


def test_failed_import_leaves_the_data_already_there(task_dir, splits, tmp_path):
    good = listops.import_tsv(official_copy(task_dir, tmp_path / "good"), tmp_path / "out", log=quiet)
    before = {p.name: p.read_bytes() for p in good.iterdir()}

    def bad_last_split(split, lines):
        if split == "test":
            lines[2] = b"] 2 3 [MAX\t3"
        return lines

    with pytest.raises(DataError, match="basic_test.tsv: line 3"):
        listops.import_tsv(official_copy(task_dir, tmp_path / "bad", bad_last_split), tmp_path / "out", log=quiet)
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["listops"]  # no staging folder left behind
    np.testing.assert_array_equal(load_split(good, "val", rebuild_cmd=REBUILD).labels, splits["val"].labels)


def test_missing_header_is_an_error(task_dir, tmp_path):
    for split in SPLITS:
        lines = (task_dir / f"basic_{split}.tsv").read_bytes().split(b"\r\n")
        (tmp_path / f"basic_{split}.tsv").write_bytes(b"\r\n".join(lines[1:]))
    with pytest.raises(DataError, match="line 1: header") as error:
        listops.import_tsv(tmp_path, tmp_path / "out", log=quiet)
    assert "basic_train.tsv" in str(error.value)


def run_cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "data_prep", "listops", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_rebuilds_identical_files(task_dir, tmp_path):
    options = [f"--{k}={v}" for k, v in SIZES.items()] + ["--min-length", "20", "--max-length", "100"]
    result = run_cli("--out", "data", *options, "--seed", "0", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "train 300" in result.stdout
    expected = load_manifest(task_dir, rebuild_cmd=REBUILD)["splits"]
    rebuilt = load_manifest(tmp_path / "data" / "listops", rebuild_cmd=REBUILD)
    assert {s: e["sha256"] for s, e in rebuilt["splits"].items()} == {
        s: e["sha256"] for s, e in expected.items()
    }
    assert rebuilt["command"].startswith("python -m data_prep listops --out data --train 300")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "x", "--train", "many"], "invalid int value"),
        (["--train", "5"], "--out"),
        (["--out", "x", "--min-length", "90", "--max-length", "50"], "no tree"),
        (["--out", "x", "--source", "nowhere"], "basic_train.tsv"),
    ],
)
def test_cli_user_errors_exit_nonzero_with_message(tmp_path, args, message):
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
