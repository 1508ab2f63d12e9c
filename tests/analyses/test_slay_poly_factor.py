"""SLAY polynomial-factor analysis: the feature maps' expectations, and the --quick command's outputs."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from analyses import slay_poly_factor
from analyses._poly_features import (
    count_sketch_matrix,
    hadamard_shared_features,
    laplace_only_nodes,
    make_poly_map,
    rademacher,
    random_maclaurin_features,
    tensor_product_features,
    tensor_sketch_features,
)
from attention_zoo.slay import positive_random_features
from attention_zoo.yat import unit


def unit_rows(n=6, d=5, seed=0):
    return unit(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)))


def gram(name, u, p, seed, **kw):
    phi = make_poly_map(name, u.shape[-1], p, torch.Generator().manual_seed(seed), **kw)(u)
    return phi.double() @ phi.double().t()


def relative_error(approx, exact):
    return float((approx - exact).norm() / exact.norm())


def test_exact_map_reproduces_the_squared_cosines():
    u = unit_rows()
    assert relative_error(gram("exact", u, 0, 0), (u @ u.t()).double().square()) < 1e-6


def independent_draws(name, u, p, draws):
    """``draws`` independent feature maps of ``u`` at once: ``(draws, n, p)``."""
    gen, d = torch.Generator().manual_seed(0), u.shape[-1]
    if name == "random_maclaurin":
        return random_maclaurin_features(u, rademacher((draws, p, d), gen), rademacher((draws, p, d), gen))
    sketches = [torch.stack([count_sketch_matrix(torch.randint(0, p, (d,), generator=gen), rademacher((d,), gen), p)
                             for _ in range(draws)]) for _ in range(2)]
    return tensor_sketch_features(u, *sketches)


@pytest.mark.parametrize("name", ["random_maclaurin", "tensorsketch"])
def test_signed_sketches_are_unbiased(name):
    """The mean over many independent draws approaches (u . v)^2 (one draw alone is far off)."""
    u = unit_rows()
    exact = (u @ u.t()).double().square()
    phi = independent_draws(name, u, 16, 2000).double()
    grams = phi @ phi.mT  # (draws, n, n)
    assert relative_error(grams.mean(0), exact) < 0.05
    assert relative_error(grams[0], exact) > 0.2


@pytest.mark.parametrize("name", ["random_maclaurin", "tensorsketch"])
def test_sketch_error_falls_as_the_budget_grows(name):
    u = unit_rows(n=12, d=6)
    exact = (u @ u.t()).double().square()
    errors = [sum(relative_error(gram(name, u, p, seed), exact) for seed in range(5)) / 5 for p in (8, 64, 512)]
    assert errors[0] > errors[1] > errors[2] and errors[2] < errors[0] / 4, errors


def test_anchor_features_are_biased_as_slay_documents():
    """E[phi_anc(u) . phi_anc(v)] = (1 + 2 x^2) / (d (d + 2)), not x^2 (slay.py, paper Table 1: not unbiased)."""
    u, d = unit_rows(), 5
    x2 = (u @ u.t()).double().square()
    mean = gram("anchor", u, 200_000, 0)
    assert relative_error(mean, (1 + 2 * x2) / (d * (d + 2))) < 0.01
    assert relative_error(mean, x2) > 0.9


def test_nystrom_is_exact_once_anchors_span_the_symmetric_matrices():
    """(u . v)^2 = <u u^T, v v^T> lives in d(d+1)/2 dimensions; more anchors than that (tiny reg) recover it."""
    u = unit_rows(d=4, seed=1)
    exact = (u @ u.t()).double().square()
    assert relative_error(gram("nystrom", u, 30, 0, nystrom_reg=1e-9), exact) < 1e-3
    assert relative_error(gram("nystrom", u, 4, 0), exact) > 0.05


def test_tensor_product_multiplies_the_two_kernels():
    gen = torch.Generator().manual_seed(0)
    poly, prf = torch.randn(1, 1, 5, 3, generator=gen), torch.randn(1, 1, 5, 2, 4, generator=gen)
    fused = tensor_product_features(poly, prf)
    expected = (poly @ poly.transpose(-1, -2)) * torch.einsum("bhnrm,bhkrm->bhnk", prf, prf)
    assert fused.shape[-1] == 24
    assert torch.allclose(fused @ fused.transpose(-1, -2), expected, atol=1e-5)


def test_laplace_only_estimates_exponentials_without_the_polynomial_factor():
    """E = sum_r (C^2/4) w_r exp(2 s_r x): no x^2 factor (one node: (C/4) exp(2x/C), low PRF variance)."""
    eps, u = 1e-3, unit(torch.randn(1, 1, 5, 4, generator=torch.Generator().manual_seed(2)))
    nodes, weights = laplace_only_nodes(1, eps)
    assert float(weights[0]) == pytest.approx((2 + eps) / 4) and float(nodes[0]) == pytest.approx(1 / (2 + eps))
    omega = torch.randn(1, 1, 4, 200_000, generator=torch.Generator().manual_seed(3))
    phi = positive_random_features(u, omega, nodes, weights).flatten(-2)
    x = (u @ u.transpose(-1, -2)).double()
    expected = sum(float(w) * torch.exp(2 * float(s) * x) for s, w in zip(nodes, weights))
    assert relative_error((phi @ phi.transpose(-1, -2)).double(), expected) < 0.02


def test_hadamard_shared_features_are_positive_with_r_m_columns():
    u = unit(torch.randn(2, 3, 7, 4, generator=torch.Generator().manual_seed(0)))
    nodes, weights = laplace_only_nodes(2, 1e-3)
    phi = hadamard_shared_features(u, torch.randn(2, 3, 4, 5), nodes, weights)
    assert phi.shape == (2, 3, 7, 10) and (phi >= 0).all()


def test_quick_command_writes_record_table_and_png(tmp_path):
    out_root, tables = tmp_path / "out", tmp_path / "tables"
    assert slay_poly_factor.main(["--quick", "--out-root", str(out_root), "--tables", str(tables)]) == 0
    record = json.loads((out_root / "slay_poly_factor" / "result.json").read_text())
    rows = {row["method"]: row for row in record["rows"]}
    assert set(rows) == set(slay_poly_factor.METHODS) and record["published"] == "slay_poly_approx_table"
    assert rows["exact"]["poly_rel_l2"] < 1e-5 and rows["exact"]["poly_cosine"] > 0.99999
    assert rows["anchor"]["poly_rel_l2"] > 0.9  # reported biased, not hidden by the kernel normalisation
    assert rows["quadrature"]["rel_l2"] < rows["exact"]["rel_l2"] < rows["anchor"]["rel_l2"]
    assert rows["anchor"]["neg_den_frac"] == 0 and rows["laplace_only"]["latency_ms"] > 0
    assert rows["random_maclaurin"]["rel_l2"] > rows["anchor"]["rel_l2"]
    with (tables / "slay_poly_factor.csv").open() as handle:
        table = {row["method"]: row for row in csv.DictReader(handle)}
    assert float(table["anchor"]["rel_l2 (published)"]) == pytest.approx(0.527)
    assert table["random_maclaurin"]["rel_l2 (published)"] == ""
    assert (tables / "slay_poly_factor.md").read_text().count("|") > 50
    assert (tables / "slay_poly_factor.png").stat().st_size > 10_000
    assert (out_root / "slay_poly_factor" / "sweep.csv").exists()


def test_one_seed_has_no_std_rather_than_a_zero_one():
    """Before, --seeds 1 wrote rel_l2_std 0.0, which reads as no spread."""
    assert slay_poly_factor.mean_std([0.5]) == (0.5, None)
    assert slay_poly_factor.mean_std([None, None]) == (None, None)
    mean, std = slay_poly_factor.mean_std([0.5, 0.7, None])
    assert mean == pytest.approx(0.6) and std == pytest.approx(0.1414, abs=1e-4)


def test_one_seed_draws_its_figure_without_error_bars(tmp_path):
    """The std of one seed is None now (not 0.0); the figure drew its bars from it and raised."""
    out_root, tables = tmp_path / "out", tmp_path / "tables"
    assert slay_poly_factor.main(["--quick", "--seeds", "1", "--out-root", str(out_root), "--tables", str(tables)]) == 0
    record = json.loads((out_root / "slay_poly_factor" / "result.json").read_text())
    assert {row["rel_l2_std"] for row in record["rows"]} == {None}
    assert (tables / "slay_poly_factor.png").stat().st_size > 10_000
