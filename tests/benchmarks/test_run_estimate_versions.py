"""The paired whole-run estimate runs both versions end to end on a tiny ListOps (no timing is asserted)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import run_estimate_versions
from tests.benchmarks.test_run_estimate import TINY

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git to unpack the revision")


@needs_git
def test_this_tree_against_head_pairs_one_run_of_each(tmp_path, capsys):
    code = run_estimate_versions.main(["--against", "HEAD", "--rounds", "1", "--steps", "1", "--attentions",
                                       "linear", "--out", str(tmp_path / "out"), "experiment=quick",
                                       f"data_dir={tmp_path / 'data'}", "task.max_steps=20", "task.eval_every=10",
                                       "task.batch_size=8", *TINY])
    assert code == 0
    frame = pd.read_csv(tmp_path / "out" / "run_estimate_versions.csv")
    assert sorted(frame.version) == ["HEAD", "this tree"]
    assert (frame["round"] == 0).all() and (frame.attention == "linear").all()
    assert (frame.total_min > 0).all() and (frame.floor_min > 0).all()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| linear ")]
    assert len(rows) == 2 and "this tree" in rows[0] and "HEAD" in rows[1]  # the table results.bench_tables renders


def test_data_dir_is_made_absolute_for_the_revision_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_estimate_versions.absolute_data_dir(["a=1"]) == ["a=1", f"data_dir={tmp_path / 'data'}"]
    assert run_estimate_versions.absolute_data_dir(["data_dir=d", "b=2"]) == ["b=2", f"data_dir={tmp_path / 'd'}"]
    assert Path(run_estimate_versions.absolute_data_dir([])[0].split("=", 1)[1]).is_absolute()


@needs_git
def test_an_unknown_revision_is_refused_by_name(capsys):
    assert run_estimate_versions.main(["--against", "no-such-revision-31"]) == 2
    err = capsys.readouterr().err
    assert "--against no-such-revision-31" in err and "give a commit" in err


@needs_git
def test_commit_of_names_the_revisions_commit_and_this_trees_head():
    head = run_estimate_versions.commit_of("HEAD")
    assert len(head) >= 7 and all(c in "0123456789abcdef" for c in head)
    assert run_estimate_versions.commit_of(None).split("+")[0] == head


@needs_git
def test_unpack_refuses_a_revision_without_any_of_the_paths(tmp_path):
    from benchmarks.revision import unpack
    from lra_base.errors import UserError

    with pytest.raises(UserError, match="has none of no-such-folder"):
        unpack("HEAD", tmp_path, ["no-such-folder"])
    assert unpack("HEAD", tmp_path, ["lra", "no-such-folder"]) == ["lra"]
    assert (tmp_path / "lra" / "__init__.py").exists()


@needs_git
def test_a_failing_round_keeps_the_runs_done_before_it(tmp_path, monkeypatch, capsys):
    calls = []

    def estimate(folder, out, args):
        calls.append(folder)
        if len(calls) == 3:
            raise run_estimate_versions.UserError("run_estimate from there failed (exit 1)")
        return [{"attention": "llops", "total_min": 10.0 + len(calls), "floor_min": 5.0, "gemm_gflops": 80.0}]

    monkeypatch.setattr(run_estimate_versions, "estimate", estimate)
    code = run_estimate_versions.main(["--against", "HEAD", "--rounds", "2", "--out", str(tmp_path)])
    assert code == 2 and len(calls) == 3
    frame = pd.read_csv(tmp_path / "run_estimate_versions.csv")
    assert list(frame.total_min) == [11.0, 12.0] and list(frame["round"]) == [0, 0]
    assert "the 2 runs done before it are in" in capsys.readouterr().err
