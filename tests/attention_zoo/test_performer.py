"""Performer: orthogonal projections, unbiased kernel estimates, error falling with features, redraws."""

from __future__ import annotations

import pytest
import torch

import attention_zoo
from attention_zoo.performer import (
    PerformerAttention,
    exact_arccos_kernel,
    exact_kernel_attention,
    exact_softmax_kernel,
    orthogonal_gaussian_projection,
    performer_features,
    relu_features,
    softmax_log_features,
)
from tests.conftest import assert_close


def small_qkv(n=48, d=16, scale=0.5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, 1, 2, n, d, generator=gen).unbind(0)
    return scale * q, scale * k, v


def relative_rmse(ref, out):
    return float((ref.double() - out.double()).pow(2).mean().sqrt() / ref.double().pow(2).mean().sqrt())


def test_projection_blocks_are_orthogonal_with_chi_or_sqrt_d_norms():
    gen = torch.Generator().manual_seed(0)
    w = orthogonal_gaussian_projection(40, 16, scaling=0, generator=gen)
    assert w.shape == (40, 16)
    for block in (w[:16], w[16:32], w[32:]):
        directions = block / block.norm(dim=1, keepdim=True)
        assert_close(torch.eye(len(block)), directions @ directions.T, atol=1e-5)
    assert w.norm(dim=1).std() > 0.5  # chi_16 norms vary
    fixed = orthogonal_gaussian_projection(40, 16, scaling=1, generator=gen)
    assert torch.allclose(fixed.norm(dim=1), torch.full((40,), 4.0), atol=1e-5)


def test_projection_directions_are_isotropic():
    """QR's sign convention is undone, so no coordinate has a preferred sign."""
    gen = torch.Generator().manual_seed(0)
    w = orthogonal_gaussian_projection(4096, 8, generator=gen)
    assert (w > 0).float().mean(0).sub(0.5).abs().max() < 0.05


def test_positive_random_features_estimate_the_softmax_kernel_without_bias():
    q, k, _ = small_qkv(n=6)
    w = orthogonal_gaussian_projection(20000, 16, generator=torch.Generator().manual_seed(1))
    estimate = softmax_log_features(q, w)[0].exp() @ softmax_log_features(k, w)[0].exp().transpose(-1, -2) / len(w)
    assert_close(exact_softmax_kernel(q, k), estimate, ratio=0.03)


def test_relu_features_estimate_the_arccos_kernel():
    q, k, _ = small_qkv(n=6)
    w = orthogonal_gaussian_projection(20000, 16, generator=torch.Generator().manual_seed(1))
    estimate = relu_features(q, w) @ relu_features(k, w).transpose(-1, -2) / len(w)
    assert_close(exact_arccos_kernel(q, k), estimate, ratio=0.03)


def test_arccos_kernel_at_zero_angle_is_half_the_squared_norm():
    x = torch.randn(1, 1, 3, 16)
    diag = torch.diagonal(exact_arccos_kernel(x, x, eps=0.0), dim1=-2, dim2=-1)
    # |x'|^2 = |x|^2 / sqrt(16); the kernel is float64, so the expected value is too (a float32 sum of squares
    # is off by ~1e-7, and only the 1e-6 absolute escape of assert_close let it pass)
    assert_close((x.double().square().sum(-1) / 4) / 2, diag, ratio=1e-10, atol=0)


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_attention_error_against_the_exact_kernel_falls_with_features(kernel):
    q, k, v = small_qkv()
    ref = exact_kernel_attention(q, k, v, kernel=kernel)
    errors = [relative_rmse(ref, PerformerAttention(head_dim=16, features=m, kernel=kernel, seed=0).eval()(q, k, v))
              for m in (16, 128, 1024)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.15


def test_stabilisers_shift_by_the_largest_projection_and_ignore_pads():
    """performer-pytorch's shifts: max_i w_i.q' per query, max_{j,i} w_i.k'_j over the real keys."""
    q, k, _ = small_qkv(n=10, scale=3.0)
    k[..., 7:, :] = 50.0  # garbage pads
    mask = torch.ones(1, 10, dtype=torch.bool)
    mask[0, 7:] = False
    attn = PerformerAttention(head_dim=16, features=64, seed=0)
    phi_q, phi_k = performer_features(q, k, attn.projection, mask)
    w = attn.projection
    qs, ks = q * 16**-0.25, k[..., :7, :] * 16**-0.25
    pq, pk = qs @ w.T, ks @ w.T
    expected_q = (torch.exp(pq - qs.square().sum(-1, keepdim=True) / 2 - pq.amax(-1, keepdim=True)) + 1e-4) / 8
    shift_k = pk.amax(dim=(-1, -2), keepdim=True)
    expected_k = (torch.exp(pk - ks.square().sum(-1, keepdim=True) / 2 - shift_k) + 1e-4) / 8
    assert_close(expected_q, phi_q, ratio=1e-6)
    assert_close(expected_k, phi_k[..., :7, :], ratio=1e-6)


def test_seed_fixes_the_projection_and_none_draws_from_torch_rng():
    a = attention_zoo.build("performer", head_dim=16, num_heads=2, seed=3)
    b = attention_zoo.build("performer", head_dim=16, num_heads=2, seed=3)
    c = attention_zoo.build("performer", head_dim=16, num_heads=2, seed=4)
    assert torch.equal(a.projection, b.projection) and not torch.equal(a.projection, c.projection)
    torch.manual_seed(7)
    d = attention_zoo.build("performer", head_dim=16, num_heads=2)
    torch.manual_seed(7)
    e = attention_zoo.build("performer", head_dim=16, num_heads=2)
    assert torch.equal(d.projection, e.projection)


def test_redraw_only_in_training_every_interval_and_reproducibly():
    q, k, v = small_qkv(n=8)
    attn = PerformerAttention(head_dim=16, features=32, redraw_interval=2, seed=0)
    first = attn.projection.clone()
    attn.eval()
    for _ in range(5):
        attn(q, k, v)
    assert torch.equal(first, attn.projection)
    attn.train()
    attn(q, k, v)
    attn(q, k, v)
    assert torch.equal(first, attn.projection)
    attn(q, k, v)  # third training call: new draw
    assert not torch.equal(first, attn.projection)
    assert torch.equal(attn.projection, attn.draw_projection(1))
    clone = PerformerAttention(head_dim=16, features=32, redraw_interval=2, seed=99)
    clone.load_state_dict(attn.state_dict())
    assert (clone.seed, clone.draws, clone.calls_since_draw) == (0, 1, 1)
    assert torch.equal(clone.projection, attn.projection)


def test_redraw_interval_zero_never_redraws():
    q, k, v = small_qkv(n=8)
    attn = PerformerAttention(head_dim=16, features=32, redraw_interval=0, seed=0).train()
    first = attn.projection.clone()
    for _ in range(3):
        attn(q, k, v)
    assert torch.equal(first, attn.projection)


def test_features_are_float32_under_bf16_autocast():
    q, k, _ = small_qkv(n=8)
    attn = PerformerAttention(head_dim=16, features=32, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for kernel in ("softmax", "relu"):
            phi_q, phi_k = performer_features(q.bfloat16(), k.bfloat16(), attn.projection, kernel=kernel)
            assert phi_q.dtype == phi_k.dtype == torch.float32


def test_relu_kernel_fast_matches_naive_with_padding_and_causal():
    q, k, v = small_qkv(n=30)
    mask = torch.ones(1, 30, dtype=torch.bool)
    mask[0, 20:] = False
    for causal in (False, True):
        attn = PerformerAttention(head_dim=16, features=32, kernel="relu", seed=0, causal=causal, chunk_size=8)
        assert_close(attn.naive(q, k, v, mask)[..., :20, :], attn(q, k, v, mask)[..., :20, :], ratio=1e-5)


@pytest.mark.parametrize("bad", [{"kernel": "cos"}, {"ortho_scaling": 2}, {"features": 0}])
def test_invalid_options_name_the_valid_values(bad):
    with pytest.raises(ValueError, match="performer"):
        attention_zoo.build("performer", head_dim=16, num_heads=2, **bad)
    if "kernel" in bad:
        with pytest.raises(ValueError, match="'softmax', 'relu'"):
            attention_zoo.build("performer", head_dim=16, num_heads=2, **bad)
