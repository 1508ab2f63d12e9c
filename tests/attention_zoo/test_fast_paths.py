"""The hand-written autograd nodes (chunked polynomial sketch, global kernel attention) against oracles."""

from __future__ import annotations

import pytest
import torch

import attention_zoo
from attention_zoo._sketch import naive_polynomial_sketch, polynomial_sketch
from attention_zoo.kernel import kernel_attention, naive_kernel_attention
from tests.conftest import assert_close, random_qkv_mask


def one_token_chunks(t: int, p: int, m: int, b: int = 2, h: int = 3) -> int:
    """``chunk_bytes`` that makes every float64 chunk a single token."""
    return b * h * t * p * m * 8


@pytest.mark.parametrize("t, p, square", [(1, 4, True), (2, 3, False), (1, 1, True), (3, 2, True)])
@pytest.mark.parametrize("chunking", ["one token", "uneven", "whole"])
def test_sketch_values_and_gradients_match_the_per_factor_oracle(t, p, square, chunking):
    x = torch.randn(2, 3, 11, 5, dtype=torch.float64, requires_grad=True)
    theta = torch.randn(3, t, p, 5, 6, dtype=torch.float64, requires_grad=True)
    chunk_bytes = {"one token": 1, "uneven": 4, "whole": 1000}[chunking] * one_token_chunks(t, p, 6)
    out = polynomial_sketch(x, theta, square, chunk_bytes=chunk_bytes)
    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    x_ref, theta_ref = (t.detach().clone().requires_grad_(True) for t in (x, theta))
    ref = naive_polynomial_sketch(x_ref, theta_ref, square)
    (ref * weights).sum().backward()
    assert_close(ref, out, ratio=1e-12)
    assert_close(x_ref.grad, x.grad, ratio=1e-12, what="grad x")
    assert_close(theta_ref.grad, theta.grad, ratio=1e-12, what="grad theta")


def test_sketch_gradcheck_with_zero_projections():
    """Zero factors are handled without division (leave-one-out products, not phi / a_j)."""
    x = torch.randn(1, 2, 4, 3, dtype=torch.float64, requires_grad=True)
    theta = torch.randn(2, 1, 3, 3, 4, dtype=torch.float64)
    theta[:, 0, 1, :, 0] = 0  # one factor of feature 0 is identically zero
    theta.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: polynomial_sketch(a, b, True, chunk_bytes=200), (x, theta))


def test_sketch_saves_only_its_inputs_for_backward():
    """Memory: autograd keeps x and Theta, not the t p m projections per token."""
    x = torch.randn(2, 2, 64, 8, requires_grad=True)
    theta = torch.randn(2, 1, 4, 8, 16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        polynomial_sketch(x, theta, True)
    assert sorted(saved) == sorted([x.numel(), theta.numel()])


def test_sketch_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match=r"x \(B, H, N, d\) and theta \(H, t, p, d, m\)"):
        polynomial_sketch(torch.randn(2, 3, 4, 5), torch.randn(2, 1, 2, 5, 6), True)


LLOPS_PATHS = {"fused": {}, "fused, rank 2, unsquared": {"rank": 2, "square": False},
               "features then kernel attention": {"rank": 2, "linear_features": 3, "constant": True},
               "causal": {"causal": True}}


@pytest.mark.parametrize("path", LLOPS_PATHS)
def test_llops_parameter_gradients_match_the_oracle(path):
    llops = attention_zoo.build("llops", head_dim=8, num_heads=2, degree=4, features=12,
                                **LLOPS_PATHS[path]).double()
    q, k, v, mask = (t.double() if t.is_floating_point() else t for t in random_qkv_mask(h=2))
    grads = []
    for run in (llops, llops.naive):
        llops.zero_grad()
        run(q, k, v, mask).pow(2).sum().backward()
        grads.append({name: p.grad.clone() for name, p in llops.named_parameters()})
    for name in grads[0]:
        assert_close(grads[1][name], grads[0][name], ratio=1e-9, what=name)


@pytest.mark.parametrize("masked", [False, True])
def test_global_kernel_attention_gradients_match_the_explicit_weights(masked):
    q, k, v, mask = (t.double() if t.is_floating_point() else t for t in random_qkv_mask(n=13))
    phi_q, phi_k = q.exp(), k.exp()
    mask = mask if masked else None
    inputs = [t.clone().requires_grad_(True) for t in (phi_q, phi_k, v)]
    assert torch.autograd.gradcheck(lambda a, b, c: kernel_attention(a, b, c, mask), inputs)
    out = kernel_attention(*inputs, mask)
    assert_close(naive_kernel_attention(phi_q, phi_k, v, mask), out, ratio=1e-12)


def test_fused_llops_keeps_no_feature_sized_tensor_for_backward():
    """Memory O(N d): nothing of size N x m (m = 64 features > d + 1 = 9) is saved."""
    b, h, n, d, m = 2, 2, 512, 8, 64  # Theta (h p d m = 4096 numbers) is smaller than N (d + 1)
    llops = attention_zoo.build("llops", head_dim=d, num_heads=h, features=m)
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        llops(q, k, v, torch.ones(b, n, dtype=torch.bool))
    assert max(saved) <= b * h * n * (d + 1) < b * h * n * m
