"""The attention version comparison runs end to end on tiny shapes (no timing is asserted), checks that both
versions compute the same outputs, and names what is missing: data, an attention, a revision."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from benchmarks import attention_versions

TINY = ["--batches", "1", "--rounds", "1", "--warmup", "0", "task.batch_size=3", "model.dim=16",
        "attention.degree=2", "attention.features=8"]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git to unpack the revision")


@pytest.fixture()
def data_dir(tmp_path):
    lengths = np.arange(20, 60, 5)
    (tmp_path / "listops").mkdir()
    np.savez(tmp_path / "listops" / "train.npz", tokens=np.zeros(lengths.sum(), np.uint8),
             offsets=np.concatenate([[0], np.cumsum(lengths)]), labels=np.zeros(len(lengths), np.int64))
    return tmp_path


@needs_git
def test_this_tree_against_head_prints_a_ratio_and_the_outputs_gap(data_dir, capsys):
    assert attention_versions.main(["--against", "HEAD", f"data_dir={data_dir}", *TINY]) == 0
    out = capsys.readouterr().out
    assert "'name': 'llops'" in out and "'degree': 2" in out and "'features': 8" in out  # the config, overridden
    assert "1 batches of 3" in out
    assert float(re.search(r"ratio ([0-9.]+)", out).group(1)) > 0
    assert float(re.search(r"differ by at most ([0-9.e+-]+)", out).group(1)) < 1e-5


@needs_git
def test_missing_data_names_the_command_and_an_unknown_attention_lists_the_known(tmp_path, data_dir, capsys):
    assert attention_versions.main([f"data_dir={tmp_path / 'none'}", *TINY]) == 2
    assert "python -m data_prep listops --out" in capsys.readouterr().err
    assert attention_versions.main([f"data_dir={data_dir}", "--attention", "no_such", *TINY[:-2]]) == 2
    err = capsys.readouterr().err
    assert "no_such" in err and "llops" in err


@needs_git
def test_a_bad_option_is_refused_by_name(data_dir, capsys):
    assert attention_versions.main([f"data_dir={data_dir}", *TINY, "attention.degree=0"]) == 2
    assert "degree" in capsys.readouterr().err
