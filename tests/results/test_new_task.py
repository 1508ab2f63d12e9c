"""Adding a task needs no edit in results/: a task the collector does not name gets its own columns, after the
LRA benchmark's six, and stays out of the LRA average."""

from results.collect import collect
from results.summary import summarize
from tests.results.records import write_record


def test_an_unnamed_task_gets_its_own_columns(tmp_path):
    write_record(tmp_path, "listops", "softmax", 0, 0.40)
    write_record(tmp_path, "brand_new", "softmax", 0, 0.75)
    long, problems = collect([tmp_path])
    summary = summarize(long)
    assert problems == [] and sorted(long["task"].unique()) == ["brand_new", "listops"]
    row = summary[summary["attention"] == "softmax"].iloc[0]
    assert row["brand_new_mean"] == 75.0 and row["brand_new_n"] == 1
    columns = [c for c in summary.columns if c.endswith("_mean")]
    assert columns.index("brand_new_mean") == columns.index("pathx_mean") + 1
    assert row.isna()["average_mean"]  # the average needs the five classic LRA tasks
