"""LLoPS and BASED: feature maps against their defining formulas, LLoPS reproducing BASED, LLoPS at large scale."""

from __future__ import annotations

import itertools
import math
from functools import partial

import pytest
import torch

import attention_zoo
from attention_zoo._chunked_attention import chunked_kernel_attention
from attention_zoo._sketch import ChunkSketch
from attention_zoo.based import BasedAttention, taylor_feature_map
from attention_zoo.kernel import kernel_attention, naive_kernel_attention, values_and_ones
from attention_zoo.llops import LLoPSAttention, naive_polynomial_sketch, polynomial_sketch
from tests.conftest import assert_close, random_qkv_mask


def qkv_mask(b=2, h=3, n=30, d=8):
    return random_qkv_mask(b, h, n, d, real=21, row=0)


def test_taylor_features_give_the_second_order_exp_expansion():
    x, y = torch.randn(2, 5, 16).unbind(0)
    s = (x * y).sum(-1)
    kernel = (taylor_feature_map(x) * taylor_feature_map(y)).sum(-1)
    assert_close(1 + s / 4 + s**2 / 32, kernel, ratio=1e-6)
    assert taylor_feature_map(x).shape[-1] == 1 + 16 + 256


@pytest.mark.parametrize("causal", [False, True])
def test_llops_from_based_reproduces_based(causal):
    based = BasedAttention(head_dim=8, num_heads=3, feature_dim=4, causal=causal, chunk_size=7)
    llops = LLoPSAttention.from_based(based)
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 3, -1)
    assert_close(based(q, k, v, mask)[keep], llops(q, k, v, mask)[keep], ratio=1e-6)


def test_llops_based_init_equals_based_with_those_projections():
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2, degree=2, features=9, rank=1, square=False,
                                constant=True, linear_features=3, init="based", eps=1e-12)
    based = BasedAttention(head_dim=8, num_heads=2, feature_dim=3)
    with torch.no_grad():  # recover W from the linear term: W / r^(1/4)
        based.w_q.copy_(llops.linear_q * 3**0.25)
        based.w_k.copy_(llops.linear_k * 3**0.25)
    q, k, v, mask = qkv_mask(h=2)
    assert_close(based(q, k, v, mask), llops(q, k, v, mask), ratio=1e-5)


def test_based_init_refuses_incompatible_shapes():
    with pytest.raises(ValueError, match="BASED initialisation needs degree=2"):
        attention_zoo.build("llops", head_dim=8, num_heads=2, init="based")


def test_polynomial_sketch_is_the_projection_of_explicit_tensor_power_features():
    """phi(x)_c = <vec(x (x) x (x) x), vec(theta_1c (x) theta_2c (x) theta_3c)>, summed over rank."""
    h, t, p, d, m = 1, 2, 3, 3, 5
    theta = torch.randn(h, t, p, d, m, dtype=torch.float64)
    x = torch.randn(1, h, 4, d, dtype=torch.float64)
    explicit = torch.zeros(1, h, 4, m, dtype=torch.float64)
    for c, r in itertools.product(range(m), range(t)):
        for idx in itertools.product(range(d), repeat=p):
            mono = math.prod(x[..., i] for i in idx)  # x_{i1} x_{i2} x_{i3}
            coef = math.prod(float(theta[0, r, j, i, c]) for j, i in enumerate(idx))
            explicit[..., c] += coef * mono
    assert_close(explicit, polynomial_sketch(x, theta, square=False), ratio=1e-10)
    assert_close(explicit**2, naive_polynomial_sketch(x, theta, square=True), ratio=1e-10)


def test_squared_llops_weights_are_non_negative():
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2, degree=4, features=16)
    q, k, _, _ = qkv_mask(h=2)
    weights = llops.features_of(q, "q") @ llops.features_of(k, "k").transpose(-1, -2)
    assert (weights >= 0).all()


def test_llops_separate_query_and_key_maps_and_rank():
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2, degree=3, features=10, rank=2)
    assert llops.theta_q.shape == llops.theta_k.shape == (2, 2, 3, 8, 10)
    assert not torch.equal(llops.theta_q, llops.theta_k)


def test_features_are_float32_under_bf16_autocast():
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2)
    q = torch.randn(1, 2, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert llops.features_of(q, "q").dtype == torch.float32


LARGE = {"fused": {}, "causal": {"causal": True, "chunk_size": 7}, "unsquared, rank 2": {"square": False, "rank": 2}}


@pytest.mark.parametrize("path", LARGE)
def test_llops_rescaling_is_exact_at_ordinary_scale(path):
    """Powers of two scale floats exactly: outputs and all gradients equal the unscaled computation's, bit for bit."""
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2, degree=4, features=12, **LARGE[path])
    q, k, v, mask = qkv_mask(h=2)
    results = []
    for rescale in (True, False):
        llops.zero_grad()
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        if rescale:
            out = llops(*leaves, mask)
        elif llops.causal:
            out = kernel_attention(llops.features_of(leaves[0], "q"), llops.features_of(leaves[1], "k"), leaves[2],
                                   mask, eps=llops.eps, causal=True, chunk_size=7)
        else:
            out = chunked_kernel_attention(*leaves[:2], values_and_ones(leaves[2], mask), llops.theta_q, llops.theta_k,
                                           partial(ChunkSketch, square=llops.square), eps=llops.eps,
                                           key_padding_mask=mask)  # the same length groups: the same sums
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out] + [t.grad for t in leaves] + [p.grad.clone() for p in llops.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("path", LARGE)
@pytest.mark.parametrize("scale", [1e2, 1e4])
def test_llops_large_inputs_match_the_unscaled_float64_kernel(path, scale):
    """Degree-8 features of |q|, |k| ~ 100 overflowed float32 (and the oracle); rescaled, both stay exact."""
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2, degree=4, features=12, **LARGE[path])
    q, k, v, mask = qkv_mask(h=2)
    q, k = q * scale, k * scale
    k[1, :, 21:] *= 1e3  # padded keys' garbage does not set the keys' scale
    runs = []
    for fn in (llops, llops.naive, None):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        if fn is None:  # float64, unscaled: phi ~ 1e37, weights ~ 1e75 still fit
            theta_q, theta_k = llops.theta_q.detach().double(), llops.theta_k.detach().double()
            phi_q = naive_polynomial_sketch(leaves[0].double(), theta_q, llops.square)
            phi_k = naive_polynomial_sketch(leaves[1].double(), theta_k, llops.square)
            out = naive_kernel_attention(phi_q, phi_k, leaves[2].double(), mask, eps=llops.eps, causal=llops.causal)
        else:
            out = fn(*leaves, mask)
        assert out.dtype == (torch.float64 if fn is None else torch.float32)
        out.pow(2).sum().backward()
        runs.append([out] + [t.grad for t in leaves])
    keep = mask[:, None, :].expand(-1, 2, -1)
    for run, what in zip(runs[:2], ["fast", "oracle"]):
        assert_close(runs[2][0][keep], run[0][keep], ratio=1e-4, what=f"{what} output")
        for ref, grad, x in zip(runs[2][1:], run[1:], "qkv"):
            assert_close(ref, grad, ratio=1e-3, what=f"{what} grad {x}")
