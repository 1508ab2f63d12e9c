"""The benchmark harness runs end to end on tiny sizes (no timing is asserted)."""

from __future__ import annotations

import pandas as pd

from benchmarks import attention as attention_bench


def test_bench_writes_csv_plot_and_ratios(tmp_path, capsys):
    attention_bench.main(["--names", "softmax", "linear", "llops", "--lengths", "64", "128", "--batch", "1",
                "--repeats", "1", "--warmup", "0", "--set", "llops.features=8", "--out", str(tmp_path)])
    frame = pd.read_csv(tmp_path / "bench_cpu.csv")
    assert len(frame) == 6 and (tmp_path / "bench_cpu.png").stat().st_size > 0
    assert (frame.loc[frame.attention == "linear", "vs_linear"] == 1.0).all()
    assert (frame.loc[frame.attention == "softmax", "vs_softmax"] == 1.0).all()
    llops = frame[frame.attention == "llops"]
    assert (llops["options"] == "features=8").all() and (llops["fwd_bwd_gflop"] > 0).all()
    assert (frame["memory_mb"] > 0).all()
    assert "matmul rate" in capsys.readouterr().out


def test_flop_count_includes_in_place_accumulations():
    """Fused LLoPS: per feature map 4 sketch matmuls (forward, recompute, grad x, grad Theta) of
    2 BHN d p m, plus 6 attention matmuls of 2 BHN m (D + 1); the in-place ``+=`` ones must count."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    import attention_zoo

    b, h, n, d, p, m = 2, 2, 64, 8, 4, 16
    llops = attention_zoo.build("llops", head_dim=d, num_heads=h, degree=p, features=m)
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    with FlopCounterMode(display=False, custom_mapping=attention_bench.IN_PLACE_FLOPS) as counter:
        llops(q, k, v).sum().backward()
    rows = b * h * n
    assert counter.get_total_flops() == 2 * 4 * 2 * rows * d * p * m + 6 * 2 * rows * m * (d + 1)
