"""The benchmark harness runs end to end on tiny sizes (no timing is asserted)."""

from __future__ import annotations

import pandas as pd

from attention_zoo import bench


def test_bench_writes_csv_plot_and_ratios(tmp_path, capsys):
    bench.main(["--names", "softmax", "linear", "llops", "--lengths", "64", "128", "--batch", "1",
                "--repeats", "1", "--warmup", "0", "--set", "llops.features=8", "--out", str(tmp_path)])
    frame = pd.read_csv(tmp_path / "bench_cpu.csv")
    assert len(frame) == 6 and (tmp_path / "bench_cpu.png").stat().st_size > 0
    assert (frame.loc[frame.attention == "linear", "vs_linear"] == 1.0).all()
    assert (frame.loc[frame.attention == "softmax", "vs_softmax"] == 1.0).all()
    llops = frame[frame.attention == "llops"]
    assert (llops["options"] == "features=8").all() and (llops["fwd_bwd_gflop"] > 0).all()
    assert (frame["memory_mb"] > 0).all()
    assert "matmul rate" in capsys.readouterr().out
