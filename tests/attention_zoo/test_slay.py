"""SLAY: quadrature, positive random features, anchor features, fusion, convergence to the Yat kernel."""

from __future__ import annotations

import math

import pytest
import torch

import attention_zoo
from attention_zoo.slay import (
    anchor_features,
    exact_poly_features,
    exact_spherical_yat,
    laguerre_nodes,
    positive_random_features,
    quadrature_yat_kernel,
)
from attention_zoo.yat import spherical_yat_kernel, unit
from tests.conftest import assert_close


def build(d=16, h=2, **opts):
    return attention_zoo.build("slay", head_dim=d, num_heads=h, **opts)


def relative_error(out, ref):
    return float((out - ref).norm() / ref.norm())


@pytest.mark.parametrize("num_nodes", [1, 2, 3])
def test_laguerre_rule_integrates_polynomials_against_exp_minus_s_c(num_nodes):
    """sum_r w_r s_r^p = int_0^inf exp(-s C) s^p ds = p! / C^(p+1), exact for p < 2R."""
    eps = 1e-3
    nodes, weights = laguerre_nodes(num_nodes, eps)
    for p in range(2 * num_nodes):
        exact = math.factorial(p) / (2 + eps) ** (p + 1)
        assert float((weights.double() * nodes.double() ** p).sum()) == pytest.approx(exact, rel=1e-5)


def test_quadrature_kernel_converges_to_the_yat_kernel():
    """Fast (geometric) in R for cosines up to 0.5; slow near x = 1, where 1 / (C - 2x) peaks at 1 / eps."""
    for top, gain in ((0.5, 1e-5), (0.9, 1e-1)):
        x = torch.linspace(-1, top, 400, dtype=torch.float64)
        exact = spherical_yat_kernel(x, 1e-3)
        errors = [relative_error(quadrature_yat_kernel(x, 1e-3, r), exact) for r in (1, 2, 4, 8)]
        assert errors == sorted(errors, reverse=True) and errors[-1] < gain * errors[0], (top, errors)


def test_positive_random_features_estimate_the_exponential_kernel():
    """E[phi_prf(u; s) . phi_prf(v; s)] = exp(2 s u . v) for unit u, v (weight 1, one node)."""
    gen = torch.Generator().manual_seed(0)
    u = unit(torch.randn(1, 1, 6, 5, generator=gen))
    omega = torch.randn(1, 1, 5, 200_000, generator=gen)
    s, w = torch.tensor([0.4]), torch.tensor([1.0])
    phi = positive_random_features(u, omega, s, w)[..., 0, :]  # (1, 1, 6, M)
    assert (phi > 0).all()
    estimate = phi @ phi.transpose(-1, -2)
    assert_close(torch.exp(2 * 0.4 * (u @ u.transpose(-1, -2))), estimate, ratio=1e-2)


def test_anchor_features_are_non_negative_and_biased_as_documented():
    """Random unit anchors: E[phi(u) . phi(v)] = (1 + 2 x^2) / (d (d + 2)), not x^2 (paper Table 1)."""
    gen = torch.Generator().manual_seed(0)
    d = 6
    u = unit(torch.randn(1, 1, 8, d, generator=gen))
    anchors = unit(torch.randn(400_000, d, generator=gen))
    weights = anchor_features(u, anchors) @ anchor_features(u, anchors).transpose(-1, -2)
    assert (weights >= 0).all()
    x = u @ u.transpose(-1, -2)
    assert_close((1 + 2 * x**2) / (d * (d + 2)), weights, ratio=1e-2)


def test_fused_features_are_the_tensor_product_per_node():
    slay = build(d=4, h=1, num_prf_features=3, num_poly_features=2, num_quadrature_nodes=2)
    u = torch.randn(1, 1, 5, 4)
    psi = slay.features(u)
    assert psi.shape == (1, 1, 5, slay.num_features) == (1, 1, 5, 12) and (psi >= 0).all()
    u_hat = unit(u)
    poly = anchor_features(u_hat, slay.anchors)
    prf = positive_random_features(u_hat, slay.omega, slay.nodes, slay.weights)
    for r in range(2):
        for p in range(2):
            assert_close(poly[..., p, None] * prf[..., r, :], psi[..., r * 6 + p * 3: r * 6 + p * 3 + 3])


def test_default_feature_budget_and_float32_under_autocast():
    slay = build(d=32, h=2)
    assert slay.num_features == 256  # R * P * M = 2 * 8 * 16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert slay.features(torch.randn(1, 2, 3, 32)).dtype == torch.float32


@pytest.mark.parametrize("poly", ["anchor", "exact"])
def test_error_against_the_exact_yat_kernel_falls_with_features(poly):
    """Relative output error vs exact spherical Yat attention, mean over 3 seeds, as M and P grow."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 64, 16).unbind(0)
    ref = exact_spherical_yat(q, k, v)
    budgets = [(4, 4), (16, 16), (64, 64)] if poly == "anchor" else [(4, 1), (256, 1)]
    errors = []
    for m, p in budgets:
        runs = [relative_error(build(num_prf_features=m, num_poly_features=p, poly=poly, seed=s)(q, k, v), ref)
                for s in range(3)]
        errors.append(sum(runs) / len(runs))
    assert errors == sorted(errors, reverse=True), errors
    assert errors[-1] < 0.85 * errors[0], errors


def test_exact_poly_features_give_the_squared_cosine():
    slay = build(d=5, h=1, poly="exact")
    assert slay.anchors is None and slay.num_features == 2 * 16 * 25
    u, w = unit(torch.randn(2, 1, 1, 3, 5)).unbind(0)
    assert_close((u @ w.transpose(-1, -2)) ** 2, exact_poly_features(u) @ exact_poly_features(w).transpose(-1, -2))


def test_seed_fixes_the_buffers_and_eval_is_deterministic():
    a, b, c = build(seed=3), build(seed=3), build(seed=4)
    assert torch.equal(a.omega, b.omega) and torch.equal(a.anchors, b.anchors)
    assert not torch.equal(a.omega, c.omega)
    q, k, v = torch.randn(3, 1, 2, 10, 16).unbind(0)
    assert torch.equal(a(q, k, v), a(q, k, v)) and torch.equal(a(q, k, v), b(q, k, v))
    assert {"omega", "anchors"} <= set(a.state_dict())


@pytest.mark.parametrize("bad", [{"poly": "tensorsketch"}, {"num_prf_features": 0}, {"eps": 0.0}])
def test_invalid_options_raise(bad):
    with pytest.raises(ValueError, match="anchor, exact" if "poly" in bad else "slay needs"):
        build(**bad)


@pytest.mark.parametrize("poly", ["anchor", "exact"])
def test_chunked_path_equals_the_materialised_features(poly, monkeypatch):
    """Non-causal SLAY runs on token chunks (features never stored): the same output and gradients as
    ``kernel_attention`` on the full (N, m) features, with padding and chunks that split the sequence (real
    tokens: the engine skips chunks past a sequence's end)."""
    import attention_zoo._chunked_attention as engine
    from attention_zoo.kernel import kernel_attention

    torch.manual_seed(0)
    attn = build(d=8, h=2, poly=poly)
    q, k, v = (torch.randn(2, 2, 37, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 37, dtype=torch.bool)
    mask[1, 30:] = False
    real = mask[:, None, :, None]
    g = torch.randn(2, 2, 37, 8) * real
    chunks = []
    monkeypatch.setitem(engine.chunked_kernel_attention.__kwdefaults__, "chunk_bytes", 4 * 256 * 4 * 5)
    real_chunks = engine.token_chunks
    monkeypatch.setattr(engine, "token_chunks", lambda *a: chunks.append(real_chunks(*a)) or chunks[-1])
    out = attn(q, k, v, mask)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    assert len(chunks[0]) >= 8  # 5 tokens or fewer per chunk: the sequence is split
    ref = kernel_attention(attn.features(q), attn.features(k), v, mask, eps=attn.delta)
    assert_close(ref * real, out * real, ratio=1e-5)
    for a, b in zip(grads, torch.autograd.grad((ref * g).sum(), (q, k, v))):
        assert_close(b, a, ratio=1e-4)
