"""The version comparison runs end to end on tiny shapes (no timing is asserted) and refuses an unknown revision."""

from __future__ import annotations

import re
import shutil

import pytest

from benchmarks import step_versions

TINY = ["--batch", "2", "--rounds", "1", "--warmup", "0", "model.dim=16", "model.ffn_dim=32", "task.max_len=64"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to unpack the revision")
def test_this_tree_against_head_prints_every_part_with_a_ratio(capsys):
    assert step_versions.main(["--against", "HEAD", *TINY]) == 0
    out = capsys.readouterr().out
    for part in step_versions.PARTS:
        line = next(line for line in out.splitlines() if line.strip().startswith(f"{part}:"))
        ratio = float(re.search(r"ratio ([0-9.]+)", line).group(1))
        assert ratio > 0, line


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to unpack the revision")
def test_two_threads_are_timed_by_the_wall_clock(capsys):
    assert step_versions.main(["--against", "HEAD", "--threads", "2", "--parts", "step", *TINY]) == 0
    assert "2 threads (wall time)" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to unpack the revision")
def test_an_unknown_revision_is_refused_by_name(capsys):
    assert step_versions.main(["--against", "no-such-revision-31", *TINY]) == 2
    err = capsys.readouterr().err
    assert "--against no-such-revision-31" in err and "give a commit" in err
