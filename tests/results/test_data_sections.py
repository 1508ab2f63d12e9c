"""Runs of one tag and task on other data (their records' split checksums differ) are never averaged together: the
runs on the data most of them used stay, the others get a section per data (``results.data_sections``)."""

from __future__ import annotations

import json

from lra.identity import digest
from results.__main__ import main as results_main
from results.collect import collect
from tests.results.records import write_record
from tests.results.test_collect import section, table_cells


def on_data(path, test_sha: str | None) -> None:
    """Give the record at ``path`` a data identity whose test split has checksum ``test_sha`` (None: none)."""
    record = json.loads(path.read_text())
    if test_sha is not None:
        record["data"] = {"path": "/data/listops", "splits": {"train": "a" * 64, "val": "b" * 64, "test": test_sha}}
    path.write_text(json.dumps(record))


def splits_digest(test_sha: str) -> str:
    return digest({"train": "a" * 64, "val": "b" * 64, "test": test_sha})


def test_runs_on_other_data_get_their_own_section_and_unnamed_data_stays(tmp_path):
    for seed, (acc, sha) in enumerate([(0.30, "c" * 64), (0.34, "c" * 64), (0.50, "d" * 64), (0.32, None)]):
        on_data(write_record(tmp_path / "runs", "listops", "softmax", seed, acc, tag="default"), sha)
    assert results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables/lra.md").read_text()
    usual = table_cells(section(markdown, "default").split("Runs (wall time")[0])["softmax"]["listops"]
    assert usual.strip("*").startswith("32.00 ± 2.00 (n=3")  # seeds 0, 1 and the one that names no data
    other = f"default · data {splits_digest('d' * 64)}"
    assert table_cells(section(markdown, other).split("Runs (wall time")[0])["softmax"]["listops"].strip("*") \
        .startswith("50.00 (n=1")
    assert "trained on other data than the rest of this section's runs" in section(markdown, other)
    assert "differ from tag" not in section(markdown, other)  # no setting differs


def test_one_data_for_every_run_changes_nothing(tmp_path):
    for seed, acc in enumerate([0.30, 0.34]):
        on_data(write_record(tmp_path / "runs", "listops", "softmax", seed, acc, tag="default"), "c" * 64)
    assert results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables/lra.md").read_text()
    assert "## tag `default · data" not in markdown
    cells = table_cells(section(markdown, "default").split("Runs (wall time")[0])
    assert cells["softmax"]["listops"].strip("*").startswith("32.00 ± 2.83 (n=2")


def test_your_runs_never_outvote_the_committed_ones_on_which_data_is_usual(tmp_path):
    committed, yours = tmp_path / "results/runs", tmp_path / "outputs"
    for seed in (0, 1):
        on_data(write_record(committed, "listops", "softmax", seed, 0.30, tag="default"), "c" * 64)
    for seed in (2, 3, 4):
        on_data(write_record(yours, "listops", "softmax", seed, 0.50, tag="default"), "d" * 64)
    long, _ = collect([committed, yours], committed=committed)
    tags = long.drop_duplicates("path").set_index("seed")["tag"]
    assert list(tags) == ["default"] * 2 + [f"default · data {splits_digest('d' * 64)} · yours"] * 3
