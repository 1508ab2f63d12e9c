"""LLoPS kernel-approximation analysis (arXiv 2610.14219): feature maps, SVD bound, q/k capture, --quick command."""

from __future__ import annotations

import csv
import json

import torch

from analyses import kernel_approx
from analyses._kernel_maps import (
    LLoPSMap,
    MLPMap,
    als_refine,
    exact_kernel,
    fit_map,
    predict,
    random_sketch,
    relative_frobenius,
    rmae,
    truncated_svd,
)
from lra.model import AttentionBlock
from tests.conftest import assert_close


def low_rank_vectors(n: int, basis: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``(1, n, d)`` unit-scale vectors in the span of ``basis`` ``(d, rank)``, plus 1% noise."""
    d, rank = basis.shape
    x = torch.randn(1, n, rank, generator=gen) @ basis.T / rank**0.5
    return x + 0.01 * torch.randn(1, n, d, generator=gen) / d**0.5


def test_random_sketch_is_unbiased_for_the_polynomial_kernel():
    """Averaged over 3000 independent draws (one per 'head'), K_hat -> (q . k)^p for p = 2 and 3."""
    gen = torch.Generator().manual_seed(0)
    draws, d, m = 3000, 6, 8
    q = torch.randn(1, 5, d, generator=gen) / d**0.5
    k = torch.randn(1, 4, d, generator=gen) / d**0.5
    for p in (2, 3):
        mean = random_sketch(q.expand(draws, -1, -1), k.expand(draws, -1, -1), p, m, gen).mean(0)  # (5, 4)
        scale = (q.norm(dim=-1)[0, :, None] * k.norm(dim=-1)[0, None, :]).pow(p)  # |q|^p |k|^p
        assert ((mean - exact_kernel(q.double(), k.double(), p)[0]).abs() / scale).max() < 0.05
        one = random_sketch(q, k, p, m, gen)[0]
        assert ((one - exact_kernel(q.double(), k.double(), p)[0]).abs() / scale).max() > 0.05  # a draw is noisy


def test_llops_fit_beats_the_random_sketch_on_low_rank_vectors():
    """Vectors in a 2-dim subspace: (q . k)^2 has rank 3 <= m, so a learned sketch fits it, a random one cannot."""
    gen = torch.Generator().manual_seed(1)
    d, m, p = 8, 8, 2
    basis = torch.linalg.qr(torch.randn(d, 2, generator=gen))[0]  # (d, 2) orthonormal
    q_fit, k_fit, q_out, k_out = (low_rank_vectors(256, basis, gen) for _ in range(4))
    exact = exact_kernel(q_out.double(), k_out.double(), p)
    llops = LLoPSMap(1, p, d, m, gen)
    losses = fit_map(llops, q_fit, k_fit, p, steps=300, batch=128, lr=1e-2, generator=gen)
    assert losses[-1] < 0.01 * losses[0]
    learned = rmae(predict(llops, q_out, k_out), exact)
    randoms = [rmae(random_sketch(q_out, k_out, p, m, gen), exact) for _ in range(4)]
    assert learned < 0.1 and learned < min(randoms) / 5


def test_als_never_raises_the_fit_error_and_reaches_a_kernel_a_sketch_can_express():
    """Vectors in a 2-dim subspace: (q . k)^p has rank p + 1 <= m there, products of linear forms express it, and
    ALS from a random sketch gets there; the fit error falls every sweep (each update is an exact solve)."""
    gen = torch.Generator().manual_seed(3)
    d, m = 8, 6
    basis = torch.linalg.qr(torch.randn(d, 2, generator=gen))[0]
    q, k = (low_rank_vectors(300, basis, gen).expand(2, -1, -1) for _ in range(2))  # two heads
    for p in (2, 3):
        fmap = LLoPSMap(2, p, d, m, gen)
        exact = exact_kernel(q.double(), k.double(), p)
        start = relative_frobenius(predict(fmap, q, k), exact)
        errors = als_refine(fmap, q, k, p, sweeps=30)
        assert all(b <= a * (1 + 1e-6) for a, b in zip(errors, errors[1:]))
        assert errors[-1] < 0.02 < 0.5 < start
        assert abs(relative_frobenius(predict(fmap, q, k), exact) - errors[-1]) < 1e-4  # written back to the map


def test_svd_bound_is_below_every_map_in_frobenius_error():
    """Eckart-Young: no rank-m map beats the truncated SVD of the same matrix in Frobenius error."""
    gen = torch.Generator().manual_seed(2)
    d, m, p = 8, 6, 2
    q_fit, k_fit = torch.randn(2, 2, 200, d, generator=gen).unbind(0)  # (H=2, n, d)
    q_out, k_out = torch.randn(2, 2, 150, d, generator=gen).unbind(0)
    exact = exact_kernel(q_out.double(), k_out.double(), p)
    bound, tail = truncated_svd(exact, m)
    svd_error = relative_frobenius(bound, exact)
    assert abs(svd_error - float(tail.sum().sqrt() / exact.norm())) < 1e-9
    assert 0.2 < svd_error < 1  # rank of (q . k)^2 on R^8 is 36 > m: the bound is not trivial
    for fmap in (LLoPSMap(2, p, d, m, gen), MLPMap(2, d, m, m, gen)):
        fit_map(fmap, q_fit, k_fit, p, steps=100, batch=100, lr=1e-2, generator=gen)
        assert relative_frobenius(predict(fmap, q_out, k_out), exact) >= svd_error
    assert relative_frobenius(random_sketch(q_out, k_out, p, m, gen), exact) >= svd_error
    full, _ = truncated_svd(exact, 36)
    assert relative_frobenius(full, exact) < 1e-10


def test_capture_reads_each_layers_query_and_key_per_head():
    run = kernel_approx.model_config(3, quick=True)
    vocab = int(run.task.own["vocab_size"])
    model = kernel_approx.ar.LitModule(run, vocab, vocab).eval()
    tokens = kernel_approx.capture_tokens(run, 3)  # (3, 64)
    captured = kernel_approx.capture_qk(model, tokens)
    heads, head_dim = run.model.heads, run.model.dim // run.model.heads
    assert len(captured) == 3
    assert all(q.shape == k.shape == (heads, 3 * 64, head_dim) for q, k in captured)
    block = next(b for b in model.encoder.blocks if isinstance(b, AttentionBlock))
    with torch.no_grad():
        x = model.encoder.tokens(tokens) + model.encoder.positions.weight[:64]
        q = block.qkv(block.norm(x))[..., : run.model.dim].unflatten(-1, (heads, head_dim))  # (B, N, H, hd)
    assert_close(q.permute(2, 0, 1, 3).flatten(1, 2), captured[0][0], ratio=1e-6)
    assert all(not b.attention._forward_pre_hooks for b in model.encoder.blocks if isinstance(b, AttentionBlock))


def test_quick_command_writes_record_table_and_png_and_reuses_the_model(tmp_path):
    out, tables = tmp_path / "out", tmp_path / "tables"
    argv = ["--quick", "--depth", "3", "--features", "8", "--out-root", str(out), "--tables", str(tables)]
    assert kernel_approx.main(argv) == 0
    [model_record] = (out / "kernel_approx").glob("model-*/result.json")
    first = json.loads(model_record.read_text(encoding="utf-8"))
    assert first["status"] == "completed" and first["config"]["analysis"] == "kernel_approx"
    record = json.loads((out / "kernel_approx" / "result.json").read_text(encoding="utf-8"))
    assert record["kind"] == "analysis" and record["published"] == "llops_rmae_table"
    assert [(r["p"], r["method"]) for r in record["rows"]] == [(p, m) for p in (2, 3) for m in kernel_approx.METHODS]
    for row in record["rows"]:
        assert {"layer0", "layer1", "layer2", "mean", "fro_mean"} <= set(row)
        svd = next(r for r in record["rows"] if r["p"] == row["p"] and r["method"] == "svd_rank_m")
        assert row["fro_mean"] >= svd["fro_mean"] - 1e-12
    with open(tables / "kernel_approx.csv", newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    llops2 = next(r for r in table if r["p"] == "2" and r["method"] == "llops")
    assert llops2["mean (published)"] == "0.022" and llops2["layer0 (published)"] == "0.008"
    assert (tables / "kernel_approx.png").stat().st_size > 1000
    assert "svd_rank_m" in (tables / "kernel_approx.md").read_text(encoding="utf-8")
    assert kernel_approx.main(argv) == 0
    assert json.loads(model_record.read_text(encoding="utf-8"))["finished_at"] == first["finished_at"]


def test_interrupted_analysis_resumes_without_remeasuring_finished_cells(tmp_path, monkeypatch, capsys):
    out, tables = tmp_path / "out", tmp_path / "tables"
    argv = ["--quick", "--depth", "3", "--features", "8", "--out-root", str(out), "--tables", str(tables)]
    measured, real = [], kernel_approx.evaluate_cell

    def failing_third(q, k, p, *args, **kwargs):
        if len(measured) == 2:
            raise RuntimeError("killed")
        measured.append(p)
        return real(q, k, p, *args, **kwargs)

    monkeypatch.setattr(kernel_approx, "evaluate_cell", failing_third)
    try:
        kernel_approx.main(argv)
    except RuntimeError:
        pass
    partial = out / "kernel_approx" / "cells.partial.json"
    assert len(json.loads(partial.read_text(encoding="utf-8"))["cells"]) == 2
    err = capsys.readouterr().err
    assert "kernel_approx: 6 cells to measure; expected ~" in err
    assert err.index("expected ~") < err.index("layer 0 p=2")

    measured.clear()
    monkeypatch.setattr(kernel_approx, "evaluate_cell",
                        lambda q, k, p, *a, **kw: measured.append(p) or real(q, k, p, *a, **kw))
    assert kernel_approx.main(argv) == 0
    assert len(measured) == 4 and not partial.exists()
    err = capsys.readouterr().err
    assert "4 cells to measure, 2 finished earlier and reused" in err and err.count("(reused)") == 2


def test_cell_cache_ignores_cells_of_other_settings(tmp_path):
    from analyses._cells import CellCache

    CellCache(tmp_path, {"features": 64}).put("p2-layer0", {"llops": {"rmae": 0.1}})
    assert "p2-layer0" in CellCache(tmp_path, {"features": 64})
    assert "p2-layer0" not in CellCache(tmp_path, {"features": 256})


def test_als_starts_prints_each_start_against_the_bound(tmp_path, capsys):
    from analyses import als_starts

    argv = ["--quick", "--depth", "3", "--features", "8", "--starts", "2", "--sweeps", "3", "--out-root", str(tmp_path)]
    assert als_starts.main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("layer ", "start "))]
    assert lines[0].startswith("layer 0 p=2 m=8: held-out SVD bound")  # (training the model prints its summary)
    assert [line.split(":")[0] for line in lines[1:]] == ["start 0", "start 1"]
    ratios = [float(line.split("= ")[1].split("x")[0]) for line in lines[1:]]
    assert all(ratio >= 1.0 for ratio in ratios)  # the SVD is the Frobenius optimum: no map beats it
