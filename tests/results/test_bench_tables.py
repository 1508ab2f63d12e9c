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


def cells(text: str, first: str) -> list[list[str]]:
    """The markdown rows of ``text`` whose first cell is ``first``, as lists of stripped cells."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|")]
    return [row for row in rows if row[0] == first]


@pytest.mark.parametrize("with_floor", [True, False])
def test_run_estimate_section_shows_the_floor_when_the_csv_has_it(tmp_path, with_floor):
    row = {"attention": "llops", "cpu_step_s": 2.0, "cpu_val_pass_s": 20.0, "cpu_test_pass_s": 20.0,
           "cpu_train_min": 166.7, "cpu_validation_min": 33.3, "cpu_total_min": 200.3, "cpu_ratio_to_target": 3.3}
    if with_floor:
        row.update(step_gflop=50.0, val_pass_gflop=500.0, total_tflop=300.0, cpu_gflops=25.0, gemm_gflops=80.0,
                   cores=2, floor_min=31.25, threads=2, total_min=62.5)
    pd.DataFrame([row]).to_csv(tmp_path / "run_estimate.csv", index=False)
    assert bench_tables.main(["--bench", str(tmp_path)]) == 0
    text = (tmp_path / "tables.md").read_text()
    times, *floor = cells(text, "llops")
    assert times == (["llops", "2", "2.00", "20.0", "20.0", "200", "62.5", "3.3x"] if with_floor else
                     ["llops", "2.00", "20.0", "20.0", "200", "3.3x"])
    assert ("Matmul floor at 80 GFLOP/s per core on 2 cores" in text) == with_floor
    assert floor == ([["llops", "50.0", "500", "300", "25.0", "31.2", "2.00x"]] if with_floor else [])


def test_run_estimate_versions_section_gives_medians_and_the_paired_ratio(tmp_path):
    runs = [(0, "abc1234", 60.0), (0, "this tree", 50.0), (1, "this tree", 49.5), (1, "abc1234", 55.0),
            (2, "abc1234", 52.0), (2, "this tree", 52.0)]
    pd.DataFrame([{"round": r, "version": v, "commit": v[:3], "attention": "llops", "total_min": t, "floor_min": 25.0,
                   "gemm_gflops": 90.0} for r, v, t in runs]).to_csv(tmp_path / "run_estimate_versions.csv",
                                                                    index=False)
    assert bench_tables.main(["--bench", str(tmp_path)]) == 0
    new, old = cells((tmp_path / "tables.md").read_text(), "llops")  # this tree first, whatever ran first
    assert new == ["llops", "this tree (thi)", "3", "50.0", "25.0", "2.00x", "90.0", "0.900 (0.833-1.000)"]
    assert old == ["llops", "abc1234 (abc)", "3", "55.0", "25.0", "2.20x", "90.0", ""]


def test_the_committed_csvs_render_under_outputs_unless_committed(tmp_path, monkeypatch):
    """Issue 32.2: no command but an explicit --committed rebuild writes under results/."""
    monkeypatch.chdir(tmp_path)
    committed = bench_tables.BENCH_DIR / "tables.md"
    before = committed.read_bytes()
    assert bench_tables.main([]) == 0
    assert (tmp_path / "outputs/tables/bench/tables.md").read_bytes() == before  # the same text, elsewhere
    assert committed.read_bytes() == before


def test_thread_scaling_section_gives_medians_and_the_median_paired_speed_up(tmp_path):
    rows = [(0, 1, "matmul", 4.0), (0, 2, "matmul", 2.2), (1, 1, "matmul", 3.9), (1, 2, "matmul", 2.0),
            (0, 1, "copy", 0.5), (0, 2, "copy", 0.4), (1, 1, "copy", 0.6), (1, 2, "copy", 0.45)]
    pd.DataFrame(rows, columns=["round", "threads", "group", "seconds"]).to_csv(tmp_path / "thread_scaling.csv",
                                                                                 index=False)
    assert bench_tables.main(["--bench", str(tmp_path)]) == 0
    text = (tmp_path / "tables.md").read_text()
    assert cells(text, "matmul") == [["matmul", "3.95", "2.10", "1.88x"]]  # ratios 1.82 and 1.95
    assert cells(text, "copy") == [["copy", "0.55", "0.43", "1.29x"]]  # ratios 1.25 and 1.33


def test_every_committed_benchmark_csv_has_a_section():
    rendered = {name for name, _, _ in bench_tables.SECTIONS}
    assert {p.name for p in bench_tables.BENCH_DIR.glob("*.csv")} <= rendered


@pytest.mark.parametrize("with_default", [True, False])
def test_allocator_section_gives_each_setting_and_its_ratio_to_the_default(tmp_path, with_default):
    rows = [{"setting": "jemalloc", "thp_mode": "madvise", "step_cpu_s": 1.1, "mean_step_cpu_s": 1.2,
             "faults_mib_per_step": 0.7, "peak_mib": 1143.5}]
    if with_default:
        rows = [{"setting": "default", "thp_mode": "madvise", "step_cpu_s": 1.0, "mean_step_cpu_s": 1.0,
                 "faults_mib_per_step": 40.2, "peak_mib": 2348.0}] + rows
        for row in rows:
            row["ratio_to_default"] = row["mean_step_cpu_s"] / 1.0
    pd.DataFrame(rows).to_csv(tmp_path / "allocator.csv", index=False)
    assert bench_tables.main(["--bench", str(tmp_path)]) == 0
    (jemalloc,) = cells((tmp_path / "tables.md").read_text(), "jemalloc")
    assert jemalloc == ["jemalloc", "madvise", "1.100", "1.200", "0.7", "1,144", "1.20x" if with_default else ""]
    assert "Task, attention and threads: not recorded" in (tmp_path / "tables.md").read_text()


def test_allocator_section_names_the_case_its_csv_records(tmp_path):
    """Before, the section's title said llops, full-protocol batches and one thread, whatever the CSV measured."""
    pd.DataFrame([{"setting": "default", "thp_mode": "never", "step_cpu_s": 1.0, "mean_step_cpu_s": 1.0,
                   "faults_mib_per_step": 4.0, "peak_mib": 900.0, "ratio_to_default": 1.0, "task": "text",
                   "attention": "linear", "threads": 2, "steps": 30, "release_every": 10,
                   "overrides": "task.batch_size=8"}]).to_csv(tmp_path / "allocator.csv", index=False)
    text = bench_tables.render(tmp_path)
    assert "Each setting: text / linear, 2 thread(s), 30 steps, the heap released every 10, task.batch_size=8." in text
    assert "llops" not in text


@pytest.mark.parametrize("cpus, says", [
    (None, "Measured on: not recorded"),
    ([None, None], "Measured on: not recorded"),
    (["AMD EPYC 7B13 (avx2)"] * 2, "Measured on: AMD EPYC 7B13 (avx2)."),
    (["AMD EPYC 7B13 (avx2)", "Intel Xeon (avx512)"], "Measured on: AMD EPYC 7B13 (avx2); Intel Xeon (avx512) ("),
    (["AMD EPYC 7B13 (avx2)", None], "Measured on: AMD EPYC 7B13 (avx2); some rows do not record theirs."),
])
def test_each_section_names_the_cpu_its_rows_were_measured_on(tmp_path, cpus, says):
    """Before, no benchmark table said on which CPU its times were taken (they differ several-fold between these
    machines)."""
    frame = pd.DataFrame({"attention": ["linear", "llops"], "length": [1024, 1024], "fwd_bwd_s": [0.006, 0.025]})
    if cpus is not None:
        frame["processor"] = cpus
    frame.to_csv(tmp_path / "bench_cpu.csv", index=False)
    text = bench_tables.render(tmp_path)
    assert says in text and text.index(says) > text.index("| 1,024")


def test_a_benchmark_csv_names_this_machines_cpu_unless_its_rows_name_theirs(tmp_path, capsys):
    import benchmarks

    benchmarks.write_csv(pd.DataFrame({"x": [1, 2]}), tmp_path, "a.csv")
    assert set(pd.read_csv(tmp_path / "a.csv").processor) == {benchmarks.this_processor()}
    assert "(" in benchmarks.this_processor() and f"wrote {tmp_path / 'a.csv'}" in capsys.readouterr().out
    benchmarks.write_csv(pd.DataFrame({"x": [1], "processor": ["kept (avx2)"]}), tmp_path, "b.csv", say=False)
    assert list(pd.read_csv(tmp_path / "b.csv").processor) == ["kept (avx2)"] and capsys.readouterr().out == ""


def test_a_gpu_benchmark_names_the_gpu_not_the_host_cpu(monkeypatch):
    import torch

    import benchmarks

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert benchmarks.this_processor(torch.device("cuda")) == "cuda: NVIDIA H100 80GB HBM3"
    assert benchmarks.this_processor(torch.device("cpu")) == benchmarks.this_processor()
