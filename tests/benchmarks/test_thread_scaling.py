"""The thread-scaling benchmark times one and two threads on a tiny ListOps and groups every op (no timing asserted)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import thread_scaling
from tests.benchmarks.test_run_estimate import TINY


def test_ops_fall_into_their_groups():
    assert thread_scaling.group_of("aten::bmm") == "matmul"
    assert thread_scaling.group_of("aten::copy_") == "copy"
    assert thread_scaling.group_of("aten::mul_") == "product"
    assert thread_scaling.group_of("_ChunkedAttentionBackward") == "other"


def test_both_thread_counts_are_timed_in_every_round(tmp_path, capsys):
    code = thread_scaling.main(["--steps", "1", "--warmup", "1", "--rounds", "1", "--out", str(tmp_path / "out"),
                                "experiment=quick", f"data_dir={tmp_path / 'data'}", "task.batch_size=4", *TINY])
    assert code == 0
    frame = pd.read_csv(tmp_path / "out" / "thread_scaling.csv")
    assert set(frame.threads) == {1, 2} and set(frame["round"]) == {0}
    for threads, part in frame.groupby("threads"):
        groups = dict(zip(part.group, part.seconds))
        assert groups["matmul"] > 0 and groups[thread_scaling.WALL] > 0, threads
    out = capsys.readouterr().out
    assert "matmul: 1 thread" in out and "speed-up" in out and "the largest ops of 'other'" in out


def test_one_thread_against_itself_is_refused():
    with pytest.raises(SystemExit):
        thread_scaling.main(["--threads", "1"])
