"""PolySketchFormer: sketch pieces by hand, unbiasedness, error against the exact kernel, learned sketch."""

from __future__ import annotations

import math

import pytest
import torch

import attention_zoo
from attention_zoo.llops import polynomial_sketch
from attention_zoo.polysketch import exact_polynomial_attention, gaussian_sketch, symmetric_square_features
from tests.conftest import assert_close, random_qkv_mask


def qkv_mask(b=2, h=2, n=20, d=8):
    return random_qkv_mask(b, h, n, d)


def test_symmetric_square_features_give_the_squared_dot_product():
    a, b = torch.randn(2, 7, 5, dtype=torch.float64).unbind(0)
    phi_a, phi_b = symmetric_square_features(a), symmetric_square_features(b)
    assert phi_a.shape == (7, 15)
    assert_close((a * b).sum(-1) ** 2, (phi_a * phi_b).sum(-1), ratio=1e-12)


def test_random_sketch_is_the_hadamard_product_of_two_gaussian_projections():
    theta = gaussian_sketch(num_heads=2, head_dim=8, sketch_size=16, degree=4, seed=3)
    assert theta.shape == (2, 1, 2, 8, 16)
    g1, g2 = theta[:, 0, 0] * 16**0.25, theta[:, 0, 1] * 16**0.25  # the N(0, 1) draws
    x = torch.randn(1, 2, 5, 8)
    expected = (x @ g1) * (x @ g2) / math.sqrt(16)
    assert_close(expected, polynomial_sketch(x, theta, square=False), ratio=1e-6)
    assert 0.9 < g1.std() < 1.1


def test_random_sketch_is_unbiased_for_the_squared_dot_product():
    """E[q' . k'] = (q . k)^2: with a very wide sketch the estimate concentrates (std ~ 2 / sqrt(r))."""
    r = 40000
    theta = gaussian_sketch(num_heads=1, head_dim=8, sketch_size=r, degree=4, seed=0)
    q = torch.nn.functional.normalize(torch.randn(8), dim=0)
    k = torch.nn.functional.normalize(q + 0.5 * torch.randn(8), dim=0)
    q_sketch = polynomial_sketch(q.reshape(1, 1, 1, 8), theta, square=False).flatten()
    k_sketch = polynomial_sketch(k.reshape(1, 1, 1, 8), theta, square=False).flatten()
    assert abs(float(q_sketch @ k_sketch) - float(q @ k) ** 2) < 0.05


def test_error_against_the_exact_polynomial_kernel_falls_with_the_sketch_size():
    q, k, v, _ = qkv_mask(b=1, n=32)
    errors = []
    for r in (4, 16, 64, 256):
        per_seed = []
        for seed in range(3):
            attn = attention_zoo.build("polysketch", head_dim=8, num_heads=2, sketch_size=r, seed=seed)
            with torch.no_grad():
                exact = attn.exact(q, k, v)
                per_seed.append(float((attn(q, k, v) - exact).norm() / exact.norm()))
        errors.append(sum(per_seed) / 3)
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.5 * errors[0], errors


def test_exact_polynomial_attention_by_hand():
    q, k, v, mask = qkv_mask(b=2, h=1, n=6, d=3)
    weights = torch.einsum("bhid,bhjd->bhij", q, k) ** 4 * mask[:, None, None, :]
    expected = weights @ v / (1 + weights.sum(-1, keepdim=True))
    assert_close(expected, exact_polynomial_attention(q, k, v, mask), ratio=1e-6)


def test_exact_uses_the_module_layer_norm():
    attn = attention_zoo.build("polysketch", head_dim=8, num_heads=2)
    q, k, v, mask = qkv_mask()
    ln = torch.nn.functional.layer_norm
    with torch.no_grad():
        expected = exact_polynomial_attention(ln(q, (8,), eps=1e-5), ln(k, (8,), eps=1e-5), v, mask)
        assert_close(expected, attn.exact(q, k, v, mask), ratio=1e-6)


def test_sketch_is_a_seeded_buffer_fixed_in_training():
    a = attention_zoo.build("polysketch", head_dim=8, num_heads=2, seed=5)
    b = attention_zoo.build("polysketch", head_dim=8, num_heads=2, seed=5)
    c = attention_zoo.build("polysketch", head_dim=8, num_heads=2, seed=6)
    assert torch.equal(a.theta, b.theta) and not torch.equal(a.theta, c.theta)
    assert "theta" in a.state_dict() and all(p is not a.theta for p in a.parameters())
    q, k, v, mask = qkv_mask()
    a.train()
    first = a(q, k, v, mask)
    assert torch.equal(first, a(q, k, v, mask))
    assert torch.equal(first, a.eval()(q, k, v, mask))


def test_degree_two_approximates_the_fourth_power_of_a_linear_sketch():
    attn = attention_zoo.build("polysketch", head_dim=8, num_heads=2, degree=2, sketch_size=8)
    assert attn.theta.shape == (2, 1, 1, 8, 8)
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(attn.naive(q, k, v, mask)[keep], attn(q, k, v, mask)[keep], ratio=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_learned_sketch_matches_its_oracle_and_is_bounded(causal):
    attn = attention_zoo.build("polysketch", head_dim=8, num_heads=2, sketch="learned", sketch_size=8,
                               causal=causal, chunk_size=7).eval()
    q, k, v, mask = qkv_mask()
    sketch = attn.sketched(3 * q)
    assert sketch.shape == (2, 2, 20, 8) and sketch.abs().max() <= math.sqrt(8)
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(attn.naive(q, k, v, mask)[keep], attn(q, k, v, mask)[keep], ratio=1e-4)
    attn(q, k, v, mask).square().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in attn.parameters())
    with pytest.raises(ValueError, match="random sketch"):
        attn.exact(q, k, v)


def test_option_validation():
    with pytest.raises(ValueError, match="random, learned"):
        attention_zoo.build("polysketch", head_dim=8, num_heads=2, sketch="hadamard")
    with pytest.raises(ValueError, match="even"):
        attention_zoo.build("polysketch", head_dim=8, num_heads=2, degree=3)
    with pytest.raises(ValueError, match="degree 4"):
        attention_zoo.build("polysketch", head_dim=8, num_heads=2, sketch="learned", degree=2)
    with pytest.raises(ValueError, match="sketch_size"):
        attention_zoo.build("polysketch", head_dim=8, num_heads=2, sketch_size=0)
