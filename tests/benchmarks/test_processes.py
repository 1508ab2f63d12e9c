"""The processes benchmark takes turns between its two ways (ABBA), pairs them by round and writes its CSV; both
ways' settings compose into a valid run (the runs themselves: tests/lra/test_run.py's DDP test)."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import processes
from lra.settings import Run
from tests.lra.conftest import compose_config


def test_the_ways_take_turns_and_each_round_is_paired(tmp_path, monkeypatch, capsys):
    calls = []

    def fake(way, args, folder):
        calls.append((way, folder.name))
        return {"threads": 100.0, "ddp": 80.0 + len(calls)}[way]

    monkeypatch.setattr(processes, "fit_seconds", fake)
    assert processes.main(["--rounds", "3", "--out", str(tmp_path)]) == 0
    assert [way for way, _ in calls] == ["threads", "ddp", "ddp", "threads", "threads", "ddp"]
    assert len({folder for _, folder in calls}) == 6  # a fresh run folder each time
    frame = pd.read_csv(tmp_path / "processes.csv")
    assert list(frame.columns) == ["round", "way", "fit_s", "processor"] and len(frame) == 6
    out = capsys.readouterr().out
    median = next(line for line in out.splitlines() if line.startswith("| median"))
    assert [cell.strip() for cell in median.strip("|").split("|")] == ["median", "100.0", "83.0", "0.83x"]


@pytest.mark.parametrize("way", list(processes.WAYS))
def test_each_way_is_a_valid_run_configuration(way):
    Run.parse(compose_config(["task=listops", "attention=llops", *processes.WAYS[way][1]]))


def test_a_run_of_no_steps_is_refused():
    with pytest.raises(SystemExit):
        processes.main(["--steps", "0"])
