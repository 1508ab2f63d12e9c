"""analyses.ar_ablation --settings: the issue-33 comparison (wide row, m = 256 and 64, 3 seeds) is 9 runs."""

from __future__ import annotations

import pytest

from analyses import ar_ablation

WIDE = ["--settings", "width192", "--features", "256", "64", "--seeds", "3", "--steps", "3000", "--lrs", "0.003"]


def test_the_wide_row_at_two_m_and_three_seeds_is_nine_runs(tmp_path):
    rows, _, jobs = ar_ablation.plan(ar_ablation.parse_args([*WIDE, "--out-root", str(tmp_path)]))
    assert {(r["setting"], r["method"], r.get("m")) for r in rows} == {
        ("width192", "based", None), ("width192", "llops", 256), ("width192", "llops", 64)}
    assert len(jobs) == 9
    methods = sorted(run.attention.name for run, _ in jobs.values())
    assert methods == ["based"] * 3 + ["llops"] * 6
    assert {run.model.dim for run, _ in jobs.values()} == {96}
    assert {run.task.max_steps for run, _ in jobs.values()} == {3000}
    assert sorted(run.seed for run, _ in jobs.values()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert sorted(run.attention.options.get("features") for run, _ in jobs.values()
                  if run.attention.name == "llops") == [64, 64, 64, 256, 256, 256]


def test_every_setting_is_planned_by_default(tmp_path):
    rows, _, _ = ar_ablation.plan(ar_ablation.parse_args(["--out-root", str(tmp_path)]))
    assert {r["setting"] for r in rows} == set(ar_ablation.SETTINGS)


def test_an_unknown_setting_is_refused(capsys):
    with pytest.raises(SystemExit):
        ar_ablation.parse_args(["--settings", "width256"])
    assert "width192" in capsys.readouterr().err


def test_the_quick_command_trains_tabulates_and_records(tmp_path):
    """The command end to end (its main had gone untested and failed after the runs, on a Run read as a dict)."""
    import json

    code = ar_ablation.main(["--quick", "--settings", "width192", "--jobs", "1", "--out-root", str(tmp_path / "runs"),
                             "--tables", str(tmp_path / "tables")])
    assert code == 0
    record = json.loads((tmp_path / "runs" / "ar_ablation" / "result.json").read_text())
    assert record["keys"] == list(ar_ablation.KEYS) and len(record["rows"]) == 2
    assert "20 steps" in record["notes"][0]  # the runs' own max_steps (QUICK)
    assert (tmp_path / "tables" / "ar_ablation.md").is_file()
