"""The batching benchmark runs end to end on tiny shapes (no timing is asserted)."""

from __future__ import annotations

import re

from benchmarks import batching

TINY = ["--train", "96", "task.data.generate.min_length=20", "task.data.generate.max_length=60",
        "task.max_len=64", "model.dim=16", "model.ffn_dim=16"]


def test_bench_batching_prints_the_padding_each_way_and_the_ratio(capsys):
    assert batching.main([*TINY, "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ")
    random, grouped = map(float, re.search(r"random ([\d.]+), length_grouped \(pool 50\) ([\d.]+)", out).groups())
    assert grouped < random
    assert re.search(r"length_grouped / random: [\d.]+x in CPU time", out)


def test_bad_settings_are_refused_with_exit_status_2(capsys):
    assert batching.main([*TINY, "task.batching_pool=0"]) == 2
    assert "task.batching_pool=0: must be an integer >= 1" in capsys.readouterr().err
    assert batching.main(["--train", "4"]) == 2
