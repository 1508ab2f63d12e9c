"""Best per column, deltas to the published tables, LaTeX output and the reference tables."""

import math

import pandas as pd
import pytest

from results.__main__ import main
from results.collect import CLASSIC_TASKS, collect
from results.latex import escape, to_latex
from results.markdown import format_delta, to_markdown
from results.summary import MAJORITY, REFERENCE_DIR, REFERENCES, add_published, best_flags, load_reference, summarize
from tests.results.records import write_record


def table_rows(markdown, tag):
    """{attention: {column: cell}} of one tag's table."""
    text = markdown.split(f"## tag `{tag}`")[1].split("\n## ")[0]
    lines = [line for line in text.splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return {row[0]: dict(zip(split[0], row, strict=True)) for row in split[2:]}


@pytest.fixture
def summary(tmp_path):
    """Quick listops: llops and based tie at 48.00, softmax 42.00; majority 17; a default tag with one run."""
    for attention, accs in {"softmax": (0.40, 0.44), "llops": (0.50, 0.46), "based": (0.48,)}.items():
        for seed, acc in enumerate(accs):
            write_record(tmp_path, "listops", attention, seed, acc)
    write_record(tmp_path, "listops", "my_attn", 0, 0.30, tag="default")
    write_record(tmp_path, "listops", "softmax", 0, 0.24, tag="default")
    return summarize(collect([tmp_path])[0])


def flag(flags, summary, tag, attention, column):
    return bool(flags[(summary["tag"] == tag) & (summary["attention"] == attention)][column].iloc[0])


def test_best_flags_ties_all_majority_never(summary):
    flags = best_flags(summary)
    assert flag(flags, summary, "quick", "llops", "listops_mean") and flag(flags, summary, "quick", "based",
                                                                          "listops_mean")
    assert not flag(flags, summary, "quick", "softmax", "listops_mean")
    assert flag(flags, summary, "default", "my_attn", "listops_mean")  # each tag has its own best
    assert not flags[summary["attention"] == MAJORITY].any().any()
    assert not flags["text_mean"].any()  # no run: nothing to mark


def test_best_flags_compare_at_shown_decimals():
    frame = pd.DataFrame({"tag": ["t"] * 4, "attention": ["a", "b", "c", MAJORITY],
                          "listops_mean": [50.001, 50.004, 49.99, 9.0]})
    assert best_flags(frame)["listops_mean"].tolist() == [True, True, False, False]


def test_a_best_mean_that_does_not_beat_the_majority_class_or_the_rule_is_not_bold():
    frame = pd.DataFrame({"tag": ["t"] * 3 + ["u"] * 3,
                          "attention": ["a", "b", MAJORITY, "a", MAJORITY, "(root-operator rule)"],
                          "listops_mean": [15.80, 12.0, 15.80, 34.0, 17.0, 34.70]})
    assert not best_flags(frame)["listops_mean"].any()  # t: ties the majority; u: under the rule
    frame.loc[0, "listops_mean"] = 15.81
    assert best_flags(frame)["listops_mean"].tolist() == [True, False, False, False, False, False]


def test_markdown_bold_best_and_delta_columns(summary):
    references = {"LLoPS paper": load_reference(), "Nystromformer port": load_reference("nystromformer_port")}
    markdown = to_markdown(summary, [], references)
    rows = table_rows(markdown, "quick")
    assert rows["llops"]["listops"] == "**48.00 ± 2.83 (n=2)**" and rows["based"]["listops"] == "**48.00 (n=1)**"
    assert rows["softmax"] == {"attention": "softmax", "listops": "42.00 ± 2.83 (n=2)"}  # quick: no published
    default = table_rows(markdown, "default")
    assert default["softmax"]["listops (Nystromformer port)"] == "37.10"
    assert "listops Δ (Nystromformer port)" not in default["softmax"]  # default departs from the port's protocol
    assert default["softmax"]["listops (LLoPS paper)"] == "48.49"
    assert "listops Δ (LLoPS paper)" not in default["softmax"]
    assert default["majority class"]["listops (Nystromformer port)"] == ""


def test_format_delta():
    assert [format_delta(v) for v in (1.2, -3.4, 0.0, -0.001, math.nan)] == ["+1.20", "−3.40", "0.00", "0.00", ""]


def test_add_published_columns(summary):
    references = {"lra_llops_table": load_reference(), "lra_paper": load_reference("lra_paper"),
                  "skyformer_port": load_reference("skyformer_port")}
    wide = add_published(summary, references)
    quick = wide[(wide["tag"] == "quick") & (wide["attention"] == "softmax")].iloc[0]
    assert quick.filter(like="_lra_").isna().all() and quick.filter(like="_skyformer_port").isna().all()
    row = wide[(wide["tag"] == "default") & (wide["attention"] == "softmax")].iloc[0]
    assert row["listops_lra_llops_table"] == pytest.approx(48.49) and math.isnan(row["listops_delta_lra_llops_table"])
    assert row["listops_skyformer_port"] == pytest.approx(38.37)  # shown beside default for context
    assert math.isnan(row["listops_delta_skyformer_port"])  # 50,000 steps: its own protocol, skyformer_port
    assert math.isnan(row["listops_lra_paper"]) and math.isnan(row["listops_delta_lra_paper"])  # JAX protocol
    assert math.isnan(row["text_delta_skyformer_port"])  # published, but we have no text run
    assert "pathx_lra_llops_table" not in wide and "pathx_lra_paper" in wide  # only tasks a table reports
    majority = wide[wide["attention"] == MAJORITY]
    assert majority["listops_lra_llops_table"].isna().all() and majority["listops_delta_lra_paper"].isna().all()
    assert list(wide.columns[: len(summary.columns)]) == list(summary.columns)


def test_latex_tables(summary):
    tex = to_latex(summary, {"LLoPS paper": load_reference(), "LRA paper": load_reference("lra_paper")})
    assert tex.count(r"\begin{tabular}") == 2 and tex.count(r"\toprule") == 2 and tex.count(r"\bottomrule") == 2
    default, quick = tex.split(r"\begin{table}")[1:]
    assert r"\label{tab:lra-default}" in default and r"\label{tab:lra-quick}" in quick
    assert r"llops & \textbf{48.00 $\pm$ 2.83} \\" in quick and r"based & \textbf{48.00} \\" in quick
    assert r"softmax & 42.00 $\pm$ 2.83 \\" in quick and r"majority class & 17.00 \\" in quick
    assert r"\emph{LLoPS paper}" in default and r"softmax & 48.49 \\" in default.split(r"\emph{LLoPS paper}")[1]
    assert r"\emph{" not in quick and r"\emph{LRA paper}" not in default  # only published tables shown beside a tag
    assert r"my\_attn & \textbf{30.00} \\" in default and "Not the full protocol" in quick
    assert "Not the full protocol" not in default


def test_escape():
    assert escape("a_b & 50% #1 {x} $y$") == r"a\_b \& 50\% \#1 \{x\} \$y\$"


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_tables(name):
    frame = load_reference(name)
    assert frame.attrs["source"] and frame.index.is_unique and frame.index.str.fullmatch("[a-z_]+").all()
    assert set(frame.columns) <= {*CLASSIC_TASKS, "pathx", "average"}
    assert f"`{name}.csv`" in (REFERENCE_DIR / "README.md").read_text()


@pytest.mark.parametrize("name", ["nystromformer_port", "skyformer_port", "xformers_port", "lra_llops_table"])
def test_reference_averages_match_their_tasks(name):
    frame = load_reference(name)
    assert (frame[list(CLASSIC_TASKS)].mean(axis=1) - frame["average"]).abs().max() < 0.006  # rounding only


def test_port_tables_values():
    assert load_reference("nystromformer_port").loc["nystrom", "retrieval"] == pytest.approx(79.56)
    assert load_reference("skyformer_port").loc["skyformer", "average"] == pytest.approx(59.39)
    assert load_reference("xformers_port").loc["softmax", "listops"] == pytest.approx(37.5)


def test_main_writes_latex_and_delta_csv(tmp_path):
    write_record(tmp_path / "runs", "listops", "softmax", 0, 0.40, tag="default")
    write_record(tmp_path / "runs", "listops", "softmax", 0, 0.36, tag="study_port")
    out = tmp_path / "tables"
    assert main([str(tmp_path / "runs"), "--out", str(out), "--reference", "all"]) == 0
    wide = pd.read_csv(out / "lra.csv")
    row = wide[(wide["attention"] == "softmax") & (wide["tag"] == "default")].iloc[0]
    assert math.isnan(row["listops_delta_skyformer_port"]) and row["listops_skyformer_port"] == pytest.approx(38.37)
    assert math.isnan(row["listops_delta_nystromformer_port"]) and row["listops_nystromformer_port"] == 37.10
    port = wide[(wide["attention"] == "softmax") & (wide["tag"] == "study_port")].iloc[0]
    assert port["listops_delta_nystromformer_port"] == pytest.approx(36.0 - 37.10)
    assert row["listops_xformers_port"] == pytest.approx(37.5) and math.isnan(row["listops_delta_xformers_port"])
    assert r"\emph{Skyformer port}" in (out / "lra.tex").read_text()
    assert "listops Δ (Nystromformer port)" in (out / "lra.md").read_text()


def test_the_quick_note_gives_the_steps_its_runs_took(tmp_path):
    write_record(tmp_path, "listops", "linear", 0, 0.3, tag="quick", steps=100)
    write_record(tmp_path, "listops", "softmax", 0, 0.3, tag="quick", steps=1500)
    long, problems = collect([tmp_path])
    markdown = to_markdown(summarize(long), problems, {}, long=long)
    assert "(short sequences, 100-1,500 steps on a CPU)" in markdown and "1.5k" not in markdown
