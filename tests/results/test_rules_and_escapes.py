"""Reference rows that say what a number means: the ListOps root-operator rule, computed from the data, and the
count of runs that escaped the plateau beside a mean over seeds; the Skyformer table's delta only for its protocol."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from results import curves
from results.__main__ import main as results_main
from results.collect import collect
from results.escapes import escape_step, escape_steps
from results.markdown import to_markdown
from results.plot_style import attention_style
from results.rules import main as rules_main
from results.rules import read_rules
from results.summary import load_reference, rules_of_sections, summarize
from tests.results.records import write_record
from tests.results.test_collect import section, table_cells


def test_rules_command_fits_on_generated_listops_and_the_table_shows_the_row(tmp_path, monkeypatch):
    from data_prep import listops

    listops.generate(tmp_path / "data", train=300, val=20, test=80, min_length=20, max_length=60, seed=0)
    monkeypatch.chdir(tmp_path)
    assert rules_main(["--tag", "default", "--data-dir", str(tmp_path / "data")]) == 0
    record = json.loads((tmp_path / "outputs/rules/listops/default.json").read_text())
    assert record["rule"] == "root-operator rule" and set(record["label_per_root"]) <= {"[MIN", "[MAX", "[MED", "[SM"}
    assert 0.0 <= record["test_acc"] <= 1.0 and len(record["data"]["test"]) == 64
    write_record(tmp_path / "outputs", "listops", "softmax", 0, 0.2, tag="default")
    rules = read_rules([tmp_path / "outputs"])
    markdown = to_markdown(summarize(collect([tmp_path / "outputs"])[0], rules), [], {})
    rows = table_cells(section(markdown, "default"))
    assert rows["root-operator rule"]["listops"] == f"{100 * record['test_acc']:.2f}"
    assert list(rows)[-2:] == ["majority class", "root-operator rule"]
    assert 0.0 <= record["val_acc"] <= 1.0 and set(record["data"]) == {"train", "val", "test"}
    assert record["test_acc"] <= record["test_ceiling"] <= 1.0  # fitted on test itself: no root-only rule beats it
    assert record["val_acc"] <= record["val_ceiling"] <= 1.0


def rule_record(tmp_path, tag, **accuracies):
    (tmp_path / "rules/listops").mkdir(parents=True, exist_ok=True)
    (tmp_path / f"rules/listops/{tag}.json").write_text(json.dumps(
        {"kind": "rule", "task": "listops", "tag": tag, "rule": "root-operator rule", **accuracies}))


def test_the_runs_table_ends_with_the_rule_on_test_and_validation(tmp_path):
    rule_record(tmp_path, "default", test_acc=0.347, val_acc=0.368)
    rule_record(tmp_path, "study_lr", test_acc=0.347)  # a record from before val_acc: that cell stays blank
    rule_record(tmp_path, "study_port", test_acc=0.347, val_acc=None)  # written by hand: blank too, not dropped
    write_record(tmp_path, "listops", "linear", 0, 0.17, tag="study_port")
    write_record(tmp_path, "listops", "softmax", 0, 0.349, tag="default")
    write_record(tmp_path, "listops", "linear", 0, 0.357, tag="study_lr")
    long, problems = collect([tmp_path])
    rules = read_rules([tmp_path])
    markdown = to_markdown(summarize(long, rules), problems, {}, long=long, rules=rules)
    tags = ("default", "study_lr", "study_port")
    runs = {tag: section(markdown, tag).split("Runs (")[1].splitlines() for tag in tags}
    default_rows = [line.split("|")[1:-1] for line in runs["default"] if line.startswith("|")]
    assert [cell.strip() for cell in default_rows[-1][:5]] == ["root-operator rule", "listops", "", "34.70", "36.80"]
    assert default_rows[-2][0].strip() == "softmax"
    study_rule = [line.split("|")[1:-1] for line in runs["study_lr"] if "root-operator rule" in line]
    assert [cell.strip() for cell in study_rule[0][3:5]] == ["34.70", ""]
    assert any("root-operator rule" in line and "34.70" in line for line in runs["study_port"])


def test_a_rule_is_shown_only_in_tags_with_runs_of_its_task(tmp_path):
    (tmp_path / "rules/listops").mkdir(parents=True)
    for tag in ("default", "quick"):
        (tmp_path / f"rules/listops/{tag}.json").write_text(json.dumps(
            {"kind": "rule", "task": "listops", "tag": tag, "rule": "root-operator rule", "test_acc": 0.347}))
    (tmp_path / "rules/listops/junk.json").write_text("[1, 2]")
    write_record(tmp_path, "listops", "softmax", 0, 0.2, tag="default")
    summary = summarize(collect([tmp_path])[0], read_rules([tmp_path]))
    assert set(summary.loc[summary["tag"] == "default", "attention"]) == {
        "softmax", "(majority class)", "(root-operator rule)"}
    assert "quick" not in set(summary["tag"])


def test_a_drift_section_on_the_same_data_shows_its_base_tags_rule():
    rules = pd.DataFrame([{"tag": "default", "task": "listops", "rule": "root-operator rule", "value": 0.347}])
    ran = {("default · task.optim.lr=0.0001", "listops"), ("default · task.data.generate.close_brackets=False",
                                                          "listops"), ("quick", "listops")}
    shown = rules_of_sections(rules, ran)
    assert list(shown["tag"]) == ["default · task.optim.lr=0.0001"] and list(shown["value"]) == [0.347]


def write_curve(record_path, accuracies, every=50):
    rows = ["epoch,step,val/acc"] + [f"0,{every * (i + 1) - 1},{acc}" for i, acc in enumerate(accuracies)]
    (record_path.parent / "csv").mkdir(exist_ok=True)
    (record_path.parent / "csv/metrics.csv").write_text("\n".join(rows) + "\n")


def test_escape_step_is_the_first_validation_at_or_over_the_threshold(tmp_path):
    escaped = write_record(tmp_path, "listops", "linear", 0, 0.36, tag="default")
    write_curve(escaped, [0.17, 0.19, 0.30, 0.36])
    stuck = write_record(tmp_path, "listops", "linear", 1, 0.19, tag="default")
    write_curve(stuck, [0.17, 0.19, 0.2999])
    steps = escape_steps(collect([tmp_path])[0]).set_index("seed")["escape_step"]
    assert steps[0] == 150 and steps.isna()[1]
    assert escape_step(steps.to_frame().assign(step=[1, 2], val_acc=[0.1, 0.2]), 0.3) is None


def test_tables_count_escaped_seeds_and_runs_list_the_escape_step(tmp_path, capsys):
    for seed, curve in enumerate([[0.17, 0.31, 0.36], [0.17, 0.18, 0.19], [0.16, 0.18, 0.35]]):
        write_curve(write_record(tmp_path / "runs", "listops", "linear", seed, curve[-1], tag="default"), curve)
    assert results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables/lra.md").read_text()
    rows = table_cells(section(markdown, "default").split("Runs (wall time")[0])
    assert rows["linear"]["listops"].strip("*").endswith("(n=3, escaped 2/3)")
    flat = " ".join(markdown.split())
    assert "| linear | listops | 0 | 36.00 | 36.00 | 100 |" in flat
    assert "| linear | listops | 1 | 19.00 | 19.00 | never |" in flat
    assert "listops_escaped" in (tmp_path / "tables/lra.csv").read_text().splitlines()[0]


def test_the_escape_count_covers_exactly_the_runs_averaged_or_is_left_out(tmp_path):
    """Counted over the cell's averaged runs (completed, with a test accuracy), and only when each has a curve."""
    for seed, curve in enumerate([[0.17, 0.18, 0.18], [0.17, 0.19, 0.19], [0.17, 0.31, 0.36]]):
        write_curve(write_record(tmp_path / "a", "listops", "linear", seed, curve[-1], tag="default"), curve)
    untested = tmp_path / "a/listops/linear/seed2-default/result.json"
    record = json.loads(untested.read_text())
    del record["metrics"]["test_acc"]  # completed, but nothing to average: not one of the cell's runs
    untested.write_text(json.dumps(record))
    for seed, (curve, test) in enumerate([([0.17, 0.31, 0.36], 0.36), ([0.17, 0.18, 0.19], 0.19), (None, 0.36)]):
        path = write_record(tmp_path / "b", "listops", "linear", seed, test, tag="default")
        if curve:
            write_curve(path, curve)
    cells = {}
    for name in ("a", "b"):
        assert results_main([str(tmp_path / name), "--out", str(tmp_path / f"tables_{name}")]) == 0
        markdown = (tmp_path / f"tables_{name}/lra.md").read_text()
        cells[name] = table_cells(section(markdown, "default").split("Runs (wall time")[0])["linear"]["listops"]
    assert cells["a"].strip("*").endswith("(n=2, escaped 0/2)")
    assert cells["b"].strip("*").endswith("(n=3)")  # one run's curve is unknown: no count of the other two
    frame = pd.read_csv(tmp_path / "tables_b/lra.csv")
    assert frame.loc[frame["attention"] == "linear", "listops_escaped"].isna().all()


def test_skyformer_table_gets_a_delta_only_beside_its_own_protocol(tmp_path):
    write_record(tmp_path, "listops", "softmax", 0, 0.40, tag="default")
    write_record(tmp_path, "listops", "softmax", 0, 0.39, tag="skyformer_port", experiment="skyformer_port")
    references = {"Skyformer port": load_reference("skyformer_port")}
    markdown = to_markdown(summarize(collect([tmp_path])[0]), [], references)
    default, sky = (table_cells(section(markdown, tag))["softmax"] for tag in ("default", "skyformer_port"))
    assert default["listops (Skyformer port)"] == "38.37" and "listops Δ (Skyformer port)" not in default
    assert sky["listops Δ (Skyformer port)"] == "+0.63"


def test_a_task_whose_runs_span_tags_gets_one_figure_of_all_its_curves(tmp_path):
    for tag, curve in (("default", [0.17, 0.18]), ("study_port", [0.17, 0.36])):
        write_curve(write_record(tmp_path / "runs", "listops", "linear", 0, curve[-1], tag=tag), curve)
    write_curve(write_record(tmp_path / "runs", "listops", "linear", 0, 0.3, tag="quick"), [0.2, 0.3])
    assert results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 0
    assert (tmp_path / "tables/lra_listops_curves_by_tag.png").stat().st_size > 0


def test_unfinished_runs_are_drawn_fainter_and_say_so_failed_ones_are_not_drawn(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    write_curve(write_record(root, "listops", "linear", 0, 0.36, tag="default"), [0.17, 0.36])
    write_curve(write_record(root, "listops", "linear", 1, tag="default", status="interrupted"), [0.17, 0.18])
    write_curve(write_record(root, "listops", "linear", 2, tag="default", status="failed"), [0.17])
    write_curve(write_record(root, "listops", "softmax", 0, 0.30, tag="study_port"), [0.2, 0.3])
    long = collect([root])[0]
    figures, close = [], plt.close
    monkeypatch.setattr(curves, "save_figure", lambda fig, path, **kwargs: figures.append(fig))
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    assert curves.plot_learning_curves(long[long["tag"] == "default"], tmp_path / "default.png")
    assert curves.plot_curves_across_tags(long, "listops", tmp_path / "by_tag.png")
    drawn = [{(ax.get_title(), line.get_label()): line.get_alpha() for ax in fig.axes if ax.get_visible()
              for line in ax.get_lines() if "seed" in line.get_label()} for fig in figures]
    faint = curves.UNFINISHED_ALPHA
    assert drawn[0] == {("listops", "linear (seed 0)"): 1.0, ("listops", "linear (seed 1, unfinished)"): faint}
    assert drawn[1] == {("default", "linear (seed 0)"): 1.0, ("default", "linear (seed 1, unfinished)"): faint,
                        ("study_port", "softmax (seed 0)"): 1.0}  # one panel per tag
    for fig in figures:
        close(fig)


def test_the_figure_across_tags_has_one_panel_per_tag_in_attention_colours(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    tags = ["default", "study_init", "study_lr", "study_port", "study_port_lr"]
    for tag in tags:
        for attention in ("linear", "softmax"):
            write_curve(write_record(root, "listops", attention, 0, 0.3, tag=tag), [0.17, 0.3])
    figures = []
    monkeypatch.setattr(curves, "save_figure", lambda fig, path, **kwargs: figures.append(fig))
    assert curves.plot_curves_across_tags(collect([root])[0], "listops", tmp_path / "by_tag.png", threshold=0.3)
    (fig,) = figures
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == tags and len(fig.axes) == 8  # 2 rows of 4, 3 panels hidden
    for ax in shown:
        colours = {line.get_label(): line.get_color() for line in ax.get_lines() if "seed" in line.get_label()}
        assert colours == {f"{a} (seed 0)": attention_style(a)[0] for a in ("linear", "softmax")}
    assert [ax.get_xlabel() for ax in shown] == ["", "training step", "training step", "training step",
                                                 "training step"]
    plt.close(fig)


def test_a_tag_of_no_experiment_takes_its_data_from_data_dir(tmp_path):
    from results.rules import data_dir_for

    assert data_dir_for("nystromformer_code", "listops", str(tmp_path)) == tmp_path / "listops"
    with pytest.raises(ValueError, match="has no experiment .* give --data-dir"):
        data_dir_for("nystromformer_code", "listops", None)
