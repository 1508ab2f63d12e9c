"""Collector and tables on hand-made `result.json` records; the CLI through a subprocess."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from results.collect import collect
from results.markdown import to_markdown
from results.summary import MAJORITY, load_reference, summarize
from tests.results.records import write_record

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runs(tmp_path):
    """Listops: 2 attentions x seeds 0,1, nystrom 1 seed, a failed run, a malformed file, a default run."""
    root = tmp_path / "outputs"
    write_record(root, "listops", "softmax", 0, 0.40)
    write_record(root, "listops", "softmax", 1, 0.44)
    write_record(root, "listops", "llops", 0, 0.50)
    write_record(root, "listops", "llops", 1, 0.46)
    write_record(root, "listops", "nystrom", 0, 0.45)
    write_record(root, "listops", "softmax", 2, 0.99, status="failed",
                 error="RuntimeError: boom\nTraceback (most recent call last): ...")
    bad = root / "listops" / "llops" / "seed2-quick" / "result.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"task": "listops", "attention": ')
    write_record(root, "listops", "softmax", 0, 0.30, tag="default")
    return root


def section(markdown, tag):
    """The text of one tag's section."""
    return markdown.split(f"## tag `{tag}`")[1].split("\n## ")[0]


def table_cells(text):
    """{attention: {column: cell}} from the first pipe table in `text`."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    header, body = split[0], split[2:]
    return {row[0]: dict(zip(header, row, strict=True)) for row in body}


def cell(summary, tag, attention, column):
    return summary.set_index(["tag", "attention"]).loc[(tag, attention), column]


def test_collect_long_table_and_problems(runs):
    long, problems = collect([runs])
    assert set(long.columns) >= {"task", "attention", "seed", "tag", "status", "metric", "value", "path"}
    assert len(long) == 7 * 3  # six completed + one failed, three metrics each
    assert set(long["tag"]) == {"quick", "default"}
    kinds = {(p.kind, Path(p.path).parent.name) for p in problems}
    assert kinds == {("failed", "seed2-quick"), ("malformed", "seed2-quick")}
    failed = next(p for p in problems if p.kind == "failed")
    assert failed.message == "RuntimeError: boom" and "softmax" in failed.path
    assert next(p for p in problems if p.kind == "malformed").path.endswith("llops/seed2-quick/result.json")


def test_summary_mean_std_and_failed_run_not_averaged(runs):
    summary = summarize(collect([runs])[0])
    assert cell(summary, "quick", "softmax", "listops_mean") == pytest.approx(42.0)
    assert cell(summary, "quick", "softmax", "listops_std") == pytest.approx(math.sqrt(8.0))
    assert cell(summary, "quick", "softmax", "listops_n") == 2
    assert cell(summary, "quick", "llops", "listops_mean") == pytest.approx(48.0)
    assert cell(summary, "quick", "nystrom", "listops_n") == 1
    assert math.isnan(cell(summary, "quick", "nystrom", "listops_std"))
    assert cell(summary, "default", "softmax", "listops_mean") == pytest.approx(30.0)
    assert cell(summary, "quick", MAJORITY, "listops_mean") == pytest.approx(17.0)


def test_missing_tasks_are_blank_not_zero(runs):
    summary = summarize(collect([runs])[0])
    assert math.isnan(cell(summary, "quick", "softmax", "text_mean"))
    assert math.isnan(cell(summary, "quick", "softmax", "average_mean"))
    markdown = to_markdown(summary, [], {"LLoPS paper": load_reference()})
    row = table_cells(section(markdown, "quick"))["softmax"]
    assert "text" not in row and "average" not in row  # only tasks some attention of this tag has run
    assert "Missing (no completed run): text, retrieval, image, pathfinder for every attention here." in markdown
    assert "0.00" not in section(markdown, "quick").split("\n- ")[0]


def test_average_only_with_all_five_tasks(tmp_path):
    accs = {"listops": 0.4, "text": 0.6, "retrieval": 0.7, "image": 0.5, "pathfinder": 0.8}
    for task, acc in accs.items():
        write_record(tmp_path, task, "softmax", 0, acc, tag="default")
    write_record(tmp_path, "listops", "llops", 0, 0.5, tag="default")
    summary = summarize(collect([tmp_path])[0])
    assert cell(summary, "default", "softmax", "average_mean") == pytest.approx(60.0)
    references = {"LLoPS paper": load_reference(), "Skyformer port": load_reference("skyformer_port"),
                  "Nystromformer port": load_reference("nystromformer_port")}
    rows = table_cells(section(to_markdown(summary, [], references), "default"))
    assert rows["softmax"]["average"] == "**60.00**" and rows["softmax"]["average (LLoPS paper)"] == "69.90"
    assert "average Δ (LLoPS paper)" not in rows["softmax"]  # its own protocol: shown, never subtracted
    assert rows["softmax"]["average (Skyformer port)"] == "57.37"  # 50,000 steps: context, no delta
    assert "average Δ (Skyformer port)" not in rows["softmax"]
    assert rows["softmax"]["average (Nystromformer port)"] == "58.77"  # default departs from it (lr 1e-3, ...)
    assert "average Δ (Nystromformer port)" not in rows["softmax"]
    assert rows["llops"]["average"] == "" and rows["llops"]["average (LLoPS paper)"] == "67.16"
    assert cell(summary, "default", "softmax", "average_n") == 1
    assert math.isnan(cell(summary, "default", "llops", "average_mean"))


def test_the_nystromformer_port_delta_stands_beside_study_port_with_its_remaining_differences(tmp_path):
    write_record(tmp_path, "listops", "softmax", 0, 0.36, tag="study_port")
    write_record(tmp_path, "listops", "softmax", 0, 0.35, tag="default")
    summary = summarize(collect([tmp_path])[0])
    markdown = to_markdown(summary, [], {"Nystromformer port": load_reference("nystromformer_port")})
    port = section(markdown, "study_port")
    assert table_cells(port)["softmax"]["listops Δ (Nystromformer port)"] == "−1.10"
    assert "fp16 autocast" in port and "the official split against our generated one" in port
    assert "Δ" not in section(markdown, "default").split("\n\n- ")[0]  # shown for context only


def test_markdown_has_paper_columns_and_lists_problems(runs):
    long, problems = collect([runs])
    references = {"LLoPS paper": load_reference(), "LRA paper": load_reference("lra_paper")}
    markdown = to_markdown(summarize(long), problems, references)
    quick = section(markdown, "quick")
    rows = table_cells(quick)
    assert list(rows) == ["softmax", "nystrom", "llops", "majority class"]  # only attentions we ran
    assert rows["softmax"]["listops"] == "42.00 ± 2.83 (n=2)"
    assert list(rows["softmax"]) == ["attention", "listops"]  # a pipeline check: no published column, no delta
    assert rows["nystrom"]["listops"] == "45.00 (n=1)"
    default = table_cells(section(to_markdown(summarize(long), problems, references, published_rows=True),
                                  "default"))
    assert default["softmax"]["listops (LLoPS paper)"] == "48.49" and "listops (LRA paper)" not in default["softmax"]
    assert default["hedgehog"]["listops"] == "" and default["hedgehog"]["listops (LLoPS paper)"] == "41.03"
    assert rows["majority class"]["listops"] == "17.00"
    assert "**Pipeline check at reduced scale**" in quick and "Pipeline check" not in section(markdown, "default")
    assert "failed: `" in quick and "RuntimeError: boom" in quick and "Traceback" not in quick
    assert "2610.14219" in markdown.split("## tag")[0] and "2011.04006" in markdown.split("## tag")[0]
    assert "Missing (no completed run): text, retrieval, image, pathfinder for every attention here." in quick
    assert "malformed: `" in markdown.split("## Unreadable records")[1]


def test_duplicate_seed_counts_once(tmp_path):
    write_record(tmp_path / "a", "listops", "softmax", 0, 0.40, finished_at="2026-01-01T00:00:00")
    write_record(tmp_path / "b", "listops", "softmax", 0, 0.50, finished_at="2026-02-01T00:00:00")
    long, problems = collect([tmp_path])
    summary = summarize(long)
    assert cell(summary, "quick", "softmax", "listops_mean") == pytest.approx(50.0)
    assert cell(summary, "quick", "softmax", "listops_n") == 1
    assert [p.kind for p in problems] == ["duplicate"] and "/a/" in problems[0].path


def test_percent_accuracy_is_rejected(tmp_path):
    write_record(tmp_path, "listops", "softmax", 0, 42.0)
    long, problems = collect([tmp_path])
    assert {p.kind for p in problems} == {"bad value", "missing test_acc"}
    assert "softmax" not in set(summarize(long)["attention"])


def test_reference_table():
    reference = load_reference()
    assert reference.loc["softmax", "listops"] == pytest.approx(48.49)
    assert reference.loc["llops", "average"] == pytest.approx(67.16)
    assert "2610.14219" in reference.attrs["source"]


def run_cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "results", *map(str, args)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_cli_writes_tables(runs, tmp_path):
    out = tmp_path / "tables"
    result = run_cli(runs, "--out", out, "--print", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plots = {f"lra_{tag}_{kind}.png" for tag in ("default", "quick") for kind in ("accuracy", "time")}
    assert {p.name for p in out.iterdir()} == {"runs.csv", "lra.md", "lra.csv", "lra.tex"} | plots
    assert all((out / name).read_bytes().startswith(b"\x89PNG") for name in plots)
    assert result.stdout == (out / "lra.md").read_text()
    wide = pd.read_csv(out / "lra.csv")
    softmax = wide[(wide["tag"] == "quick") & (wide["attention"] == "softmax")].iloc[0]
    assert softmax["listops_mean"] == pytest.approx(42.0) and softmax["listops_n"] == 2
    assert pd.isna(softmax["text_mean"])
    assert len(pd.read_csv(out / "runs.csv")) == 21


def test_cli_tag_filter(runs, tmp_path):
    out = tmp_path / "tables"
    result = run_cli(runs, "--out", out, "--tag", "default", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    markdown = (out / "lra.md").read_text()
    assert "## tag `default`" in markdown and "## tag `quick`" not in markdown
    assert "--tag 'default' left out" in result.stdout and "'quick':" in result.stdout
    assert set(pd.read_csv(out / "lra.csv")["tag"]) == {"default"}


def test_cli_without_records_exits_zero(tmp_path):
    result = run_cli(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "No usable result.json records found under: results/runs, outputs" in result.stdout
    assert not (tmp_path / "results").exists() and not (tmp_path / "outputs").exists()


def test_cli_writes_the_users_tables_and_leaves_the_committed_ones(tmp_path):
    write_record(tmp_path / "outputs", "listops", "softmax", 0, 0.40, tag="default")
    committed = tmp_path / "results" / "tables"
    committed.mkdir(parents=True)
    (committed / "lra.md").write_text("committed table\n")
    result = run_cli(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "40.00 (n=1)" in (tmp_path / "outputs" / "tables" / "lra.md").read_text()
    assert (committed / "lra.md").read_text() == "committed table\n"
    empty = run_cli("--committed", cwd=tmp_path)  # no results/runs here: nothing rewritten
    assert empty.returncode == 0 and "Nothing written" in empty.stdout
    assert (committed / "lra.md").read_text() == "committed table\n"


def test_a_run_archived_and_still_in_outputs_counts_once(tmp_path):
    original = write_record(tmp_path / "outputs", "listops", "softmax", 0, 0.40, tag="default",
                            started_at="2026-12-01T00:00:00+00:00", finished_at="2026-12-01T05:00:00+00:00")
    copy = tmp_path / "runs" / "listops" / "softmax" / "seed0" / "default" / "result.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(original.read_text())
    long, problems = collect([tmp_path / "runs", tmp_path / "outputs"])
    assert long["path"].unique().tolist() == [copy.as_posix()] and problems == []
