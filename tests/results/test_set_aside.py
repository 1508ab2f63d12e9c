"""Records that ``rerun=true`` set aside (``<run folder>/replaced/<time>/result.json``) are never tabulated (issue 58,
point 2): a redo that failed leaves the run failed, never the old number."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from results.__main__ import main
from results.archive import archive
from results.collect import collect
from tests.results.records import write_record


def redo(tmp_path, status="failed"):
    """A completed run (test 41.23%) set aside as ``lra.run.train.set_aside`` does, and its redo's record."""
    record = write_record(tmp_path / "outputs", "listops", "linear", 0, 0.4123, tag="quick")
    aside = record.parent / "replaced" / "20261206T000000"
    aside.mkdir(parents=True)
    shutil.move(record, aside / "result.json")
    if status is not None:
        write_record(tmp_path / "outputs", "listops", "linear", 0, None, tag="quick", status=status,
                     error="RuntimeError: boom")
    return aside / "result.json"


def test_a_set_aside_record_is_listed_but_never_a_row(tmp_path):
    aside = redo(tmp_path)
    long, problems = collect([tmp_path / "outputs"])
    assert aside.as_posix() not in set(long["path"]) and set(long["status"]) == {"failed"}
    kinds = {problem.kind: problem for problem in problems}
    assert set(kinds) == {"failed", "set aside"} and kinds["set aside"].path == aside.as_posix()
    assert kinds["set aside"].tag == "quick" and "41.23" not in kinds["set aside"].message


def test_a_failed_redo_leaves_the_run_failed_in_every_table(tmp_path):
    redo(tmp_path)
    assert main([str(tmp_path / "outputs"), "--out", str(tmp_path / "tables"), "--html"]) == 0
    for name in ("lra.md", "lra.csv", "runs.csv", "lra.tex", "index.html"):
        assert "41.23" not in (tmp_path / "tables" / name).read_text(), name
    markdown = (tmp_path / "tables" / "lra.md").read_text()
    assert "- set aside: `" in markdown and "- failed: `" in markdown
    assert pd.read_csv(tmp_path / "tables" / "runs.csv")["path"].str.contains("/replaced/").sum() == 0


def test_with_no_redo_yet_the_run_has_no_number(tmp_path):
    redo(tmp_path, status=None)
    long, problems = collect([tmp_path / "outputs"])
    assert long.empty and [problem.kind for problem in problems] == ["set aside"]


def test_a_set_aside_run_is_not_archived_nor_read_from_inside(tmp_path, monkeypatch):
    aside = redo(tmp_path)
    with pytest.raises(ValueError, match="set aside"):
        archive(aside.parent, tmp_path / "runs")
    monkeypatch.chdir(aside.parent)
    with pytest.raises(ValueError, match="set aside"):
        archive(Path("."), tmp_path / "runs")
    assert not (tmp_path / "runs").exists() and collect(["."])[0].empty
    assert json.loads(aside.read_text())["status"] == "completed"
