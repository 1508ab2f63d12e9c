"""The MHLA head-count sweep: the order of the heads per setting and the settings that give the paper's order."""

from __future__ import annotations

from analyses import mhla_sweep


def test_orders_rank_the_heads_and_name_the_settings_with_h_d2_lowest():
    sweep = mhla_sweep.Sweep(heads=(4, 8, 16), lrs=(1e-2, 3e-2), scales=(1.0,))
    mse = {(1e-2, 4): 1e-4, (1e-2, 8): 1e-7, (1e-2, 16): 1e-5, (3e-2, 4): 1e-16, (3e-2, 8): 1e-9, (3e-2, 16): 1e-3}
    rows = [{"lr": lr, "init_scale": 1.0, "heads": h, "train_mse": v} for (lr, h), v in mse.items()]
    table, papers = mhla_sweep.orders(rows, sweep)
    assert {r["order"] for r in table if r["lr"] == 1e-2} == {"H=8 < H=16 < H=4"}
    assert {r["order"] for r in table if r["lr"] == 3e-2} == {"H=4 < H=8 < H=16"}
    assert papers == ["lr 0.03, init x1 (H=4 at 1e-16)"]


def test_quick_command_writes_the_table(tmp_path, capsys):
    assert mhla_sweep.main(["--quick", "--out-root", str(tmp_path), "--tables", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    assert "expected ~" in err and err.index("expected ~") < err.index("train MSE")  # the estimate comes first
    text = (tmp_path / "t" / "mhla_sweep.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| lr"))
    assert header.split("|")[-2].strip() == "order" and "H=4" in text and "The paper's order" in text
