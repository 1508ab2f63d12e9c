"""The attention microscope on tiny random models: matrices, metrics, approximation mode, record and table."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
from torch import nn

import attention_zoo
from analyses import _microscope_approx as approx
from analyses import _microscope_metrics as metrics
from analyses._microscope_capture import capture, implicit_matrix, reproduction_error, softmax_matrix
from analyses._microscope_models import finished_run
from analyses.microscope import matrices_of, parse, trained_rows
from lra.model import Encoder
from lra.run.record_compat import upgrade
from results.microscope import write_microscope_tables

REQUIRED = ("softmax", "linear", "performer", "nystrom", "based", "llops", "slay")
SMALL = {"nystrom": {"num_landmarks": 4}, "performer": {"features": 16, "seed": 0}, "llops": {"features": 8},
         "slay": {"num_prf_features": 4, "num_poly_features": 2}, "based": {"feature_dim": 4},
         "local": {"block_size": 4}, "bigbird": {"block_size": 4}, "longformer": {"window": 4},
         "sinkhorn": {"block_size": 4}, "reformer": {"chunk_len": 4}, "linformer": {"proj_dim": 8}}
TRAINED = upgrade({"model": {"depth": 2, "dim": 16}})  # the run a checkpoint's rows name (depth, width)
PARTIAL = ("flatten", "polaformer")  # their value conv (and gate) are not one N x N matrix


class Tiny(nn.Module):
    """An untrained 2-layer encoder called like the LitModules: ``model(batch)``."""

    def __init__(self, name: str):
        super().__init__()
        opts = SMALL.get(name, {})
        self.encoder = Encoder(vocab_size=12, max_len=32, dim=16, depth=2, num_heads=2, ffn_dim=16, dropout=0.0,
                               make_attention=lambda layer: attention_zoo.build(name, head_dim=8, num_heads=2,
                                                                                max_len=32, **opts))

    def forward(self, batch):
        return self.encoder(batch["tokens"], batch["lengths"])


def batch():
    generator = torch.Generator().manual_seed(1)
    return {"tokens": torch.randint(0, 12, (3, 20), generator=generator), "lengths": torch.tensor([20, 13, 7])}


@pytest.mark.parametrize("name", [n for n in attention_zoo.available() if n not in PARTIAL])
def test_matrix_times_v_is_the_modules_output(name):
    layers = capture(Tiny(name).eval(), batch())
    assert len(layers) == 2
    lengths = []
    for v, out, matrix, _ in matrices_of(layers[1:]):
        lengths.append(v.shape[-2])
        assert matrix.shape == (1, 2, v.shape[-2], v.shape[-2])
        assert reproduction_error(matrix, v, out) < 1e-4, name
    assert lengths == [20, 13, 7]


def test_softmax_against_itself_has_zero_error():
    layers = capture(Tiny("softmax").eval(), batch())
    rows, drawn = trained_rows("softmax", TRAINED, "ckpt", [[c] for c in layers], 4)
    assert [r["layer"] for r in rows] == [0, 0, 1, 1, "all"]
    for row in rows:
        assert row["rel_error"] == 0.0
        assert row["entropy"] == pytest.approx(row["entropy_softmax"])
        assert row["eff_rank"] == pytest.approx(row["eff_rank_softmax"])
        assert row["output_error"] < 1e-5 and row["sequences"] == 3
    assert set(drawn) == {0, 1}


@pytest.mark.parametrize("name", REQUIRED)
def test_metrics_in_range(name):
    layers = capture(Tiny(name).eval(), batch())
    rows, _ = trained_rows(name, TRAINED, "ckpt", [[c] for c in layers], 4)
    for row in rows:
        assert 0.0 <= row["entropy_norm"] <= 1.0 + 1e-9 and 0.0 <= row["entropy_norm_softmax"] <= 1.0 + 1e-9
        assert 0.0 < row["top_k_mass"] <= 1.0 + 1e-9
        assert 1.0 - 1e-6 <= row["eff_rank"] <= 20 and row["rel_error"] >= 0.0
        assert 0.0 <= row["negative_mass"] <= 1.0


def test_metrics_of_known_matrices():
    n = 16
    uniform, eye = torch.full((1, n, n), 1.0 / n), torch.eye(n)[None]
    assert float(metrics.row_entropy(uniform).mean()) == pytest.approx(math.log(n))
    assert float(metrics.row_entropy(eye).mean()) == pytest.approx(0.0, abs=1e-12)
    assert float(metrics.effective_rank(uniform)) == pytest.approx(1.0)
    assert float(metrics.effective_rank(eye)) == pytest.approx(n)
    assert float(metrics.top_k_mass(uniform, 4).mean()) == pytest.approx(4 / n)
    assert float(metrics.relative_frobenius(uniform, eye)) == pytest.approx(float((uniform - eye).norm() / n**0.5))
    signed = torch.tensor([[[0.75, -0.25], [1.0, 0.0]]])
    assert metrics.negative_mass(signed).tolist() == [[0.25, 0.0]]


def test_approximation_rows_and_fit():
    q, k = torch.randn(2, 4, 1, 2, 12, 8).unbind(0)
    layers = [[(q[i], k[i]) for i in range(4)]]
    rows = approx.approximation_rows(layers, ["performer", "llops", "nystrom", "based", "linear"], [8, 16],
                                     fit_sequences=2, steps=3, lr=1e-2, log=lambda line: None)
    seen = {(r["mechanism"], r["variant"], r["size"]) for r in rows}
    assert ("llops", "fitted", 16) in seen and ("performer", "no fit", 8) in seen and ("linear", "no fit", 8) in seen
    assert ("performer", "fitted", 8) not in seen
    assert all(math.isfinite(r["rel_error"]) and r["sequences"] == 2 for r in rows)
    assert {r["features"] for r in rows if r["mechanism"] == "based"} == {7, 13}
    pairs = [(q[i], k[i], softmax_matrix(q[i], k[i])) for i in range(2)]
    module, _ = approx.approximator("llops", 8, 8, 2)
    first = approx.fit(module, pairs, 1, 1e-2)
    assert approx.fit(module, pairs, 30, 1e-2) < first


def test_softmax_approximates_itself():
    q, k = torch.randn(2, 3, 1, 2, 10, 8).unbind(0)
    matrix = implicit_matrix(attention_zoo.build("softmax", head_dim=8, num_heads=2), q[0], k[0])
    assert float(metrics.relative_frobenius(matrix, softmax_matrix(q[0], k[0])).max()) < 1e-6


def test_parse_overrides():
    own, attentions, overrides = parse(["task=listops", "attention=softmax,llops", "batches=3", "mode=approx"])
    assert attentions == ["softmax", "llops"] and own["batches"] == 3 and own["mode"] == "approx"
    assert overrides == ["task=listops", "experiment=quick"]
    with pytest.raises(SystemExit):
        parse(["attention=softmax,llops", "checkpoint=x.ckpt"])
    with pytest.raises(SystemExit):
        parse(["mode=sideways"])


def test_finished_run_matches_what_was_learned(tmp_path):
    cfg = {"seed": 0, "tag": "quick", "task": {"name": "listops", "data": {"root": "a", "seed": 0}},
           "trainer": {"max_steps": 5}, "attention": {"name": "linear"}}
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"")
    moved = {**cfg, "tag": "other", "trainer": {"max_steps": 5, "enable_progress_bar": False},
             "task": {"name": "listops", "data": {"root": "b", "seed": 0}}}
    record = {"status": "completed", "best_checkpoint": "/gone/best.ckpt", "config": moved}
    (run / "result.json").write_text(json.dumps(record))
    assert upgrade(cfg).identity() == upgrade(moved).identity()
    assert finished_run(upgrade(cfg), [tmp_path]) == run / "checkpoints" / "best.ckpt"
    assert finished_run(upgrade({**cfg, "seed": 1}), [tmp_path]) is None
    assert finished_run(upgrade({**cfg, "trainer": {"max_steps": 6}}), [tmp_path]) is None  # trained other steps
    # a key added to conf/ after the run was recorded, that says how it ran, not what it learned
    assert finished_run(upgrade({**cfg, "model": {"dim": 8, "checkpoint_blocks": False}}), [tmp_path]) is None
    record["config"] = {**moved, "model": {"dim": 8}}
    (run / "result.json").write_text(json.dumps(record))
    assert finished_run(upgrade({**cfg, "model": {"dim": 8, "checkpoint_blocks": False}}), [tmp_path]) is not None
    assert finished_run(upgrade({**cfg, "model": {"dim": 16, "checkpoint_blocks": False}}), [tmp_path]) is None


def test_a_run_trained_on_other_data_is_not_reused(tmp_path, monkeypatch):
    """Before, only the settings were compared: after ListOps was regenerated, the old run's checkpoint was reused."""
    from lra.run import same_run

    cfg = {"seed": 0, "tag": "quick", "task": {"name": "listops"}, "attention": {"name": "linear"}}
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"")
    trained = {"path": "/data/quick/listops", "splits": {"train": "aaa", "val": "bbb", "test": "ccc"}}
    record = {"status": "completed", "best_checkpoint": str(run / "checkpoints" / "best.ckpt"), "config": cfg,
              "data": trained}
    (run / "result.json").write_text(json.dumps(record))
    monkeypatch.setattr(same_run, "current_data", lambda _: trained)
    assert finished_run(upgrade(cfg), [tmp_path]) == run / "checkpoints" / "best.ckpt"
    monkeypatch.setattr(same_run, "current_data", lambda _: {**trained, "splits": {**trained["splits"], "val": "x"}})
    assert finished_run(upgrade(cfg), [tmp_path]) is None


def test_a_run_that_rerun_set_aside_is_not_reused(tmp_path):
    cfg = {"seed": 0, "tag": "quick", "task": {"name": "listops"}, "attention": {"name": "linear"}}
    run = tmp_path / "linear" / "seed0" / "quick"
    old = run / "replaced" / "20261206T101500"
    for folder in (run, old):
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "checkpoints" / "best.ckpt").write_bytes(b"")
        record = {"status": "completed", "best_checkpoint": str(folder / "checkpoints" / "best.ckpt"), "config": cfg}
        (folder / "result.json").write_text(json.dumps(record))
    os.utime(run / "result.json", (1, 1))  # the set-aside record is the newer file
    assert finished_run(upgrade(cfg), [tmp_path]) == run / "checkpoints" / "best.ckpt"
    (run / "result.json").unlink()
    assert finished_run(upgrade(cfg), [tmp_path]) is None


def test_table_has_both_parts(tmp_path):
    trained = {"mode": "trained", "attention": "linear", "layer": "all", "head": "all", "rel_error": 0.5,
               "entropy_norm": 0.9, "sequences": 4}
    rows = [trained, {**trained, "layer": 0, "head": 1},
            {"mode": "approx", "mechanism": "llops", "variant": "fitted", "size": 16, "features": 16, "layer": 0,
             "rel_error": 0.25},
            {"mode": "approx", "mechanism": "based", "variant": "no fit", "size": 16, "features": 13, "layer": 0,
             "rel_error": 0.5}]
    record = {"rows": rows, "columns": list(dict.fromkeys(c for r in rows for c in r)), "notes": ["a note"],
              "config": {"attentions": ["linear"], "overrides": ["task=listops"], "top_k": 8}}
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "microscope.png").write_bytes(b"png")
    written = write_microscope_tables(record, tmp_path / "tables", tmp_path / "rec" / "result.json")
    text = (tmp_path / "tables" / "microscope.md").read_text()
    assert "## Trained models" in text and "## Approximation" in text and "| m=16 |" in text
    assert "llops (fitted)" in text and "![microscope.png](microscope.png)" in text and "- a note" in text
    assert tmp_path / "tables" / "microscope.png" in written


def test_python_m_results_renders_the_microscope_record(tmp_path):
    import time

    from analyses.record import write_analysis_record
    from results.__main__ import main as results_main

    rows = [{"mode": "approx", "mechanism": "performer", "variant": "no fit", "size": 16, "features": 16,
             "layer": 0, "rel_error": 0.5}]
    path = write_analysis_record("microscope", rows, keys=["mode", "mechanism"], config={"top_k": 8},
                                 started=time.time(), out_root=tmp_path / "records")
    (path.parent / "microscope_approx.png").write_bytes(b"png")
    results_main([str(tmp_path / "records"), "--out", str(tmp_path / "tables")])
    text = (tmp_path / "tables" / "microscope.md").read_text()
    assert "performer (no fit)" in text and (tmp_path / "tables" / "microscope_approx.png").is_file()
