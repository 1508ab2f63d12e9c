"""The leaderboard page scales with its sections, not its runs (issue 58, point 15): a figure per run took about a
second each (3,000 records: 425 s, 3,001 PNGs), so runs share their table's figure unless `--run-figures`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from results.__main__ import main
from results.html import section_id
from results.html_runs import run_id
from tests.results.leaderboard_records import write_curve
from tests.results.records import write_record


def records(root: Path, seeds: int) -> Path:
    """`seeds` runs of two attentions on ListOps and one on Text, tag quick, each with a learning curve."""
    for seed in range(seeds):
        for task, attention in (("listops", "linear"), ("listops", "softmax"), ("text", "linear")):
            write_curve(write_record(root, task, attention, seed, 0.3 + seed / 100, tag="quick"), 0.3)
    return root


def page(tmp_path: Path, seeds: int, *options: str) -> tuple[str, list[str]]:
    """The page's HTML for `seeds` seeds and the names of its images."""
    out = tmp_path / "tables"
    assert main([str(records(tmp_path / f"runs{seeds}", seeds)), "--out", str(out), "--html", *options]) == 0
    return (out / "index.html").read_text(encoding="utf-8"), sorted(p.name for p in (out / "index_files").iterdir())


def test_the_page_draws_one_curve_figure_per_section_whatever_the_number_of_runs(tmp_path):
    text, few = page(tmp_path / "few", 2)
    _, many = page(tmp_path / "many", 6)
    assert few == many and not [name for name in many if name.startswith("run-")]
    assert len([name for name in many if name.startswith("curves-")]) == 2  # quick/listops, quick/text
    for section in (section_id("quick", "listops"), section_id("quick", "text")):
        body = text.split(f'<section id="{section}">')[1].split("</section>")[0]
        assert re.search(r'<img src="index_files/curves-[0-9a-f]{12}\.png"', body)
    record = tmp_path / "few" / "runs2" / "text" / "linear" / "seed1-quick" / "result.json"
    block = text.split(f'id="{run_id(record.as_posix())}"')[1].split("</section>")[0]
    assert f'Learning curve: in <a href="#{section_id("quick", "text")}">' in block


def test_run_figures_draw_each_runs_curve_and_a_page_without_them_removes_them(tmp_path):
    _, images = page(tmp_path, 2, "--run-figures")
    assert len([name for name in images if name.startswith("run-")]) == 6
    text, images = page(tmp_path, 2)
    assert not [name for name in images if name.startswith("run-")] and "index_files/run-" not in text


def test_run_figures_need_the_page(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(records(tmp_path / "runs", 1)), "--out", str(tmp_path / "tables"), "--run-figures"])
    assert "give --html with it" in capsys.readouterr().err
