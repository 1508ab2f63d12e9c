"""results.bench_tables renders the benchmarks' CSVs; the committed tables file matches the committed CSVs."""

from __future__ import annotations

import pandas as pd
import pytest

from results import bench_tables


def test_kernel_and_memory_sections_from_small_csvs(tmp_path):
    pd.DataFrame({"attention": ["linear", "llops", "linear", "llops"], "length": [1024, 1024, 4096, 4096],
                  "fwd_bwd_s": [0.0061, 0.0256, 0.0289, 0.1064]}).to_csv(tmp_path / "bench_cpu.csv", index=False)
    pd.DataFrame([{"task": "text", "attention": "linear", "batch": 8, "status": "ok", "rss_before_mb": 500.0,
                   "step_peak_mb": 300.0, "fit_batch": 32, "peak_at_fit_mb": 1700.0, "extrapolated": True,
                   "fits": True},
                  {"task": "text", "attention": "sinkhorn", "batch": 8, "status": "over the 6 GiB guard",
                   "fit_batch": 32, "fits": False}]).to_csv(tmp_path / "step_memory.csv", index=False)
    assert bench_tables.main(["--bench", str(tmp_path)]) == 0
    text = (tmp_path / "tables.md").read_text()
    assert "| 4,096 |   28.9 | 106.4 |" in text
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines() if "| text" in line]
    assert rows == [["text", "linear", "8", "500", "300", "1.66 (scaled)", "yes"],
                    ["text", "sinkhorn", "", "", "", "", "no (over the 6 GiB guard)"]]
    assert "step_cpu.csv" not in text  # absent CSV, absent section


def test_no_csv_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_tables.main(["--bench", str(tmp_path)])
    assert "no benchmark CSV" in capsys.readouterr().err


def test_committed_tables_file_is_rendered_from_the_committed_csvs():
    committed = bench_tables.BENCH_DIR / "tables.md"
    assert committed.read_text() == bench_tables.render(bench_tables.BENCH_DIR), \
        "results/tables/bench/tables.md is stale: run python -m results.bench_tables"
