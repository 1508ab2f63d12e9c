"""Exact spherical Yat attention: the kernel against its definition, blocks, scale invariance, options."""

from __future__ import annotations

import math

import pytest
import torch

import attention_zoo
from attention_zoo import yat
from attention_zoo.yat import chunked_yat, naive_yat, spherical_yat_kernel, unit
from tests.conftest import assert_close, random_qkv_mask


def qkv_mask(b=2, h=2, n=45, d=8):
    return random_qkv_mask(b, h, n, d, real=30, row=1)


def test_kernel_is_the_yat_product_of_unit_vectors():
    """x^2 / (C - 2x) = (q^ . k^)^2 / (|q^ - k^|^2 + eps) on the sphere; a 2-d case by hand."""
    q, k = torch.randn(2, 50, 6, dtype=torch.float64).unbind(0)
    q_hat, k_hat = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    eps = 1e-3
    definition = (q_hat * k_hat).sum(-1) ** 2 / ((q_hat - k_hat).square().sum(-1) + eps)
    assert_close(definition, spherical_yat_kernel((q_hat * k_hat).sum(-1), eps), ratio=1e-12)
    x = torch.tensor(1 / math.sqrt(2), dtype=torch.float64)  # (1, 0) against (1, 1)
    assert float(spherical_yat_kernel(x, 0.5)) == pytest.approx(0.5 / (2.5 - math.sqrt(2)))


def test_kernel_is_bounded_by_one_over_eps_and_zero_when_orthogonal():
    x = torch.linspace(-1, 1, 2001)
    kernel = spherical_yat_kernel(x, 1e-3)
    assert (kernel >= 0).all() and float(kernel.max()) == pytest.approx(1e3, rel=1e-3)
    assert float(spherical_yat_kernel(torch.tensor(0.0), 1e-3)) == 0.0


def test_attention_weights_by_hand():
    """One query, three keys: out = sum_j K_j v_j / (sum_j K_j + delta)."""
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[2.0, 0.0], [0.0, 3.0], [-1.0, 1.0]]]])
    v = torch.tensor([[[[1.0], [5.0], [2.0]]]])
    eps, delta = 0.1, 1e-6
    x = [1.0, 0.0, -1 / math.sqrt(2)]
    weights = [xi * xi / (2 + eps - 2 * xi) for xi in x]
    expected = (weights[0] * 1 + weights[1] * 5 + weights[2] * 2) / (sum(weights) + delta)
    attn = attention_zoo.build("yat", head_dim=2, num_heads=1, eps=eps, delta=delta)
    assert float(attn(q, k, v)) == pytest.approx(expected, rel=1e-6)


def test_invariant_to_positive_rescaling_of_queries_and_keys():
    q, k, v, mask = qkv_mask()
    attn = attention_zoo.build("yat", head_dim=8, num_heads=2)
    scale_q, scale_k = torch.rand(2, 2, 2, 45, 1).add(0.1).unbind(0)
    assert_close(attn(q, k, v, mask), attn(q * scale_q, k * 7 * scale_k, v, mask), ratio=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk_size", [7, None])
def test_blocks_match_the_oracle_with_gradients(causal, chunk_size):
    """Every block size (and the checkpointed backward) gives the full-matrix result."""
    q, k, v, mask = qkv_mask()
    outs, grads = [], []
    for fn in (naive_yat, lambda *a, **kw: chunked_yat(*a, chunk_size=chunk_size, **kw)):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        out = fn(qq, kk, vv, mask, causal=causal)
        out[mask[:, None, :].expand(-1, 2, -1)].square().sum().backward()
        outs.append(out)
        grads.append(torch.cat([t.grad.flatten() for t in (qq, kk, vv)]))
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(outs[0][keep], outs[1][keep], ratio=1e-5)
    assert_close(grads[0], grads[1], ratio=1e-4)


def test_block_rows_bound_the_block_size(monkeypatch):
    q = torch.zeros(2, 3, 10, 4)
    assert yat.block_rows(q, 1000) == yat.BLOCK_ELEMENTS["cpu"] // 6000
    assert yat.block_rows(torch.zeros(64, 2, 1, 4), 2**20) == 1
    monkeypatch.setitem(yat.BLOCK_ELEMENTS, "cpu", 2 * 3 * 45 * 4)  # 4 rows per block
    q, k, v, mask = qkv_mask(b=2, h=3)
    assert_close(naive_yat(q, k, v, mask), chunked_yat(q, k, v, mask), ratio=1e-5)


def test_bf16_autocast_computes_in_float32():
    q, k, v, mask = qkv_mask()
    attn = attention_zoo.build("yat", head_dim=8, num_heads=2)
    ref = attn(q, k, v, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q, k, v, mask)
    assert out.dtype == torch.float32
    assert_close(ref, out, ratio=1e-6)


def test_unit_keeps_zero_rows_finite():
    assert torch.equal(unit(torch.zeros(1, 3)), torch.zeros(1, 3))


@pytest.mark.parametrize("bad", [{"eps": 0.0}, {"delta": -1.0}, {"chunk_size": 0}])
def test_invalid_options_raise(bad):
    with pytest.raises(ValueError, match="yat needs"):
        attention_zoo.build("yat", head_dim=8, num_heads=2, **bad)
