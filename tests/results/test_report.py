"""What `python -m results` prints (issue 60, points 2 and 8): a tag keeps its derived sections and the command
says what `--tag` left out; a short summary instead of the tables, which `--print` shows and `--verbose` lists."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lra.config import compose
from results.__main__ import main
from results.report import left_out_lines
from tests.results.records import write_record

DRIFTED = "quick · task.max_steps=20"  # as typed: trainer.max_steps follows it (conf/trainer)


def quick_runs(root: Path) -> None:
    """A `quick` run on its protocol, one off it (`DRIFTED`) and a `default` run."""
    write_record(root, "listops", "linear", 0, 0.3, tag="quick",
                 config=compose(["task=listops", "attention=linear", "experiment=quick"]))
    write_record(root, "listops", "linear", 1, 0.4, tag="quick",
                 config=compose(["task=listops", "attention=linear", "experiment=quick", "task.max_steps=20"]))
    write_record(root, "listops", "softmax", 0, 0.5, tag="default")


def tabulated_tags(out: Path) -> set[str]:
    """The sections `lra.csv` holds."""
    return set(pd.read_csv(out / "lra.csv")["tag"])


def test_a_tag_keeps_its_derived_sections_and_says_what_it_left_out(tmp_path, capsys):
    quick_runs(tmp_path / "runs")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables"), "--tag", "quick"]) == 0
    assert tabulated_tags(tmp_path / "tables") == {"quick", DRIFTED}
    printed = capsys.readouterr().out
    assert "--tag 'quick' left out 1 run(s) in 1 section(s):\n  'default': 1 run(s)" in printed
    assert "give no --tag for all of them" in printed


def test_a_full_section_name_keeps_that_section_only(tmp_path, capsys):
    quick_runs(tmp_path / "runs")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables"), "--tag", DRIFTED]) == 0
    assert tabulated_tags(tmp_path / "tables") == {DRIFTED}
    assert "left out 2 run(s) in 2 section(s):\n  'default': 1 run(s)\n  'quick': 1 run(s)" in capsys.readouterr().out


def test_a_filter_that_leaves_nothing_out_says_nothing_of_it(tmp_path, capsys):
    write_record(tmp_path / "runs", "listops", "softmax", 0, 0.5, tag="default")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables"), "--tag", "default"]) == 0
    assert "left out" not in capsys.readouterr().out


def mixed_runs(root: Path) -> None:
    """Two completed runs, an unfinished one, a failed one and an unreadable record."""
    write_record(root, "listops", "softmax", 0, 0.40, tag="default")
    write_record(root, "listops", "softmax", 1, 0.44, tag="default")
    write_record(root, "listops", "softmax", 2, 0.30, tag="default", status="interrupted")
    write_record(root, "text", "softmax", 0, tag="quick", status="failed", error="CUDA out of memory")
    (root / "broken").mkdir()
    (root / "broken" / "result.json").write_text("{")


def test_the_command_prints_a_short_summary_not_the_tables(tmp_path, capsys):
    mixed_runs(tmp_path / "runs")
    out = tmp_path / "tables"
    assert main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    printed, errors = capsys.readouterr()
    assert "## tag" not in printed and "wrote" not in errors
    lines = printed.splitlines()
    assert len(lines) <= 5, printed
    assert lines[0].startswith(f"Tables written to {out}: lra.md")
    assert "Runs: 2 completed, 1 unfinished, 1 not averaged; 2 section(s) from 2 tag(s)" in lines
    assert "Not averaged or not read: 1 failed, 1 malformed, 1 unfinished" in printed
    assert "--print" in printed and "--verbose" in printed
    assert str(out / "lra.tex") not in printed


def test_verbose_lists_the_files_and_print_gives_the_markdown_alone_on_stdout(tmp_path, capsys):
    mixed_runs(tmp_path / "runs")
    out = tmp_path / "tables"
    assert main([str(tmp_path / "runs"), "--out", str(out), "--verbose"]) == 0
    assert f"  {out / 'lra.tex'}" in capsys.readouterr().out.splitlines()
    assert main([str(tmp_path / "runs"), "--out", str(out), "--print"]) == 0
    printed, errors = capsys.readouterr()
    assert printed == (out / "lra.md").read_text()
    assert f"Tables written to {out}" in errors


def test_left_out_sections_are_counted_under_the_tag_that_asks_for_them():
    sections = ["default", "default · task.optim.lr=0.0001", "default · yours", "quick", "quick · yours"]
    everything = pd.DataFrame({"tag": sections, "path": [f"r{i}" for i in range(len(sections))]})
    kept = everything[everything["tag"] == "quick · yours"]
    lines = left_out_lines(everything, kept, "quick · yours")
    assert lines[:3] == ["--tag 'quick · yours' left out 4 run(s) in 4 section(s):",
                         "  'default': 3 run(s) in 3 sections", "  'quick': 1 run(s)"]
    assert left_out_lines(everything, everything, "default") == []


def test_a_tag_over_no_records_says_nothing_was_found(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables"), "--tag", "quick"]) == 0
    assert "No usable result.json records with tag 'quick' found" in capsys.readouterr().out
