"""Archiving finished runs for the repository, the learning curves read back from them, the runs table."""

import json

import pandas as pd
import pytest

from results.__main__ import main
from results.archive import archive
from results.curves import validation_curve
from tests.results.records import write_record

METRICS = """epoch,lr-AdamW,step,train/acc,train/loss,val/acc,val/loss
0,5e-06,49,,,,
0,,49,0.09,2.27,,
0,,49,,,0.092,2.29
0,,99,,,0.185,2.10
"""


def finished_run(root, status="completed", **extra):
    record = write_record(root / "outputs", "listops", "llops", 0, 0.37, tag="default", status=status,
                          wall_time_s=7200.0, tokens_per_s=41234.5, **extra)
    (record.parent / "csv").mkdir()
    (record.parent / "csv" / "metrics.csv").write_text(METRICS)
    (record.parent / "checkpoints").mkdir()
    (record.parent / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    return record.parent


def test_archive_copies_the_record_and_curve_but_no_checkpoint(tmp_path):
    run_dir = finished_run(tmp_path)
    dest = archive(run_dir, tmp_path / "runs")
    assert dest == tmp_path / "runs" / "listops" / "llops" / "seed0-default"  # its path below outputs/
    assert json.loads((dest / "result.json").read_text()) == json.loads((run_dir / "result.json").read_text())
    assert (dest / "metrics.csv").read_text() == METRICS and not (dest / "checkpoints").exists()


def test_archive_refuses_an_unfinished_run(tmp_path):
    with pytest.raises(ValueError, match="only completed runs"):
        archive(finished_run(tmp_path, status="interrupted"), tmp_path / "runs")


def test_validation_curve_from_the_csv_logger_rows(tmp_path):
    curve = validation_curve(finished_run(tmp_path) / "result.json")
    assert curve["step"].tolist() == [50, 100] and curve["val_acc"].tolist() == pytest.approx([0.092, 0.185])
    assert validation_curve(tmp_path / "nowhere" / "result.json").empty


def test_tables_list_each_full_protocol_run_with_time_and_throughput_and_plot_curves(tmp_path):
    archive(finished_run(tmp_path), tmp_path / "runs")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables" / "lra.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| llops ") and "2.00 h" in line)
    assert "41,234" in row and "37.00" in row and "abc123" in row
    assert (tmp_path / "tables" / "lra_default_curves.png").stat().st_size > 1000
    assert pd.read_csv(tmp_path / "tables" / "lra.csv")["listops_mean"].tolist()[0] == pytest.approx(37.0)


def test_a_crafted_tag_cannot_write_plots_outside_the_output_folder(tmp_path):
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.30, tag="../../escaped")
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "out" / "tables")]) == 0
    assert not list(tmp_path.glob("*.png")) and not list((tmp_path / "out").glob("*.png"))
    assert list((tmp_path / "out" / "tables").glob("lra_*escaped_accuracy.png"))


def test_archive_unfinished_keeps_an_interrupted_runs_curve_until_its_completed_record_replaces_it(tmp_path):
    runs = tmp_path / "runs"
    stopped = finished_run(tmp_path / "a", status="interrupted")
    dest = archive(stopped, runs, unfinished=True)
    assert json.loads((dest / "result.json").read_text())["status"] == "interrupted"
    assert (dest / "metrics.csv").read_text() == METRICS
    with pytest.raises(ValueError, match="only completed runs and, with --unfinished, interrupted"):
        archive(finished_run(tmp_path / "b", status="failed"), runs, unfinished=True)
    assert archive(finished_run(tmp_path / "c"), runs) == dest  # the same run completed later
    assert json.loads((dest / "result.json").read_text())["status"] == "completed"
    with pytest.raises(ValueError, match="holds this run's completed record"):
        archive(stopped, runs, unfinished=True)
    assert json.loads((dest / "result.json").read_text())["status"] == "completed"


def test_archive_unfinished_names_sigterm_for_a_run_still_training(tmp_path):
    run_dir = finished_run(tmp_path)
    (run_dir / "result.json").unlink()
    with pytest.raises(ValueError, match="stop it with SIGTERM"):
        archive(run_dir, tmp_path / "runs", unfinished=True)


@pytest.mark.parametrize("extra, wall", [({}, ""), ({"earlier_segments_s": 3600.0}, "2.00 h")],
                         ids=["last segment only", "all segments"])
def test_tables_list_an_unfinished_run_with_its_curve_so_far_and_never_average_it(tmp_path, extra, wall):
    archive(finished_run(tmp_path / "a", status="interrupted", **extra), tmp_path / "runs", unfinished=True)
    assert main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables" / "lra.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| llops ") and "unfinished" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # how far it validated, its best val so far, no escape yet, and
    assert cells[3:7] == ["unfinished (validated to step 100)", "18.50", "not by 100", wall]
    # the wall time only where the record kept its earlier segments' time (records before that timed the last one)
    assert "- unfinished: " in markdown and "rerunning its command resumes it from last.ckpt" in markdown
    assert pd.read_csv(tmp_path / "tables" / "lra.csv").empty or \
        pd.read_csv(tmp_path / "tables" / "lra.csv")["listops_mean"].isna().all()
