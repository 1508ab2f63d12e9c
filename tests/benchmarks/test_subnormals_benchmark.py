"""The subnormals benchmark: the two modes take turns (ABBA), each in its own process, and it times a real
checkpoint's training step both ways."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import subnormals
from lra.run import train
from tests.lra.conftest import TINY, compose_run


def test_the_modes_take_turns_and_the_ratio_is_kept_over_flushed(tmp_path, monkeypatch, capsys):
    calls = []

    def fake(mode, args):
        calls.append(mode)
        return {"trained": 2.0 if mode == "kept" else 1.0, "initialised": 1.5}

    monkeypatch.setattr(subnormals, "one_process", fake)
    monkeypatch.setattr(subnormals, "checkpoint_step", lambda path: 1500)
    checkpoint = tmp_path / "last.ckpt"
    checkpoint.write_bytes(b"")
    assert subnormals.main(["--checkpoint", str(checkpoint), "--rounds", "3", "--out", str(tmp_path)]) == 0
    assert calls == ["kept", "flushed", "flushed", "kept", "kept", "flushed"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]]
            for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "model" not in line}
    assert rows["trained (step 1,500)"] == ["2.000", "1.000", "2.00x"]
    assert rows["initialised"] == ["1.500", "1.500", "1.00x"]
    frame = pd.read_csv(tmp_path / "subnormals.csv")
    assert list(frame.columns) == ["round", "subnormals", "model", "step_s", "checkpoint_step", "settings", "processor"]
    assert len(frame) == 12


def test_a_missing_checkpoint_is_named(tmp_path):
    with pytest.raises(SystemExit):
        subnormals.main(["--checkpoint", str(tmp_path / "nowhere.ckpt"), "--out", str(tmp_path)])


def test_a_run_checkpoint_is_timed_trained_and_initialised(tmp_path):
    run = compose_run(["attention=softmax", "experiment=quick", f"data_dir={tmp_path / 'data'}", *TINY,
                       "task.max_steps=2", "trainer.enable_progress_bar=false"])
    train.run(run, tmp_path / "run")
    times = subnormals.measure(tmp_path / "run" / "checkpoints" / "last.ckpt", batches=1, data_dir=None)
    assert set(times) == {"trained", "initialised"} and all(0 < s < 60 for s in times.values())


def test_settings_change_the_checkpoints_config_and_an_unknown_one_is_named():
    cfg = {"model": {"attention_dropout": 0.1}, "data_dir": "data"}
    assert subnormals.with_settings(cfg, ["model.attention_dropout=0.0"])["model"]["attention_dropout"] == 0.0
    assert cfg["model"]["attention_dropout"] == 0.1  # a copy
    with pytest.raises(ValueError, match="model.dropuot: not a setting"):
        subnormals.with_settings(cfg, ["model.dropuot=0"])
    with pytest.raises(ValueError, match="expected dotted.key=value"):
        subnormals.with_settings(cfg, ["model.attention_dropout"])
