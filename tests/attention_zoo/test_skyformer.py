"""Skyformer: the Gaussian kernel, landmark sampling from real rows, determinism, error falling with m."""

from __future__ import annotations

import pytest
import torch

import attention_zoo
from attention_zoo.skyformer import (
    SkyformerAttention,
    exact_gaussian_kernel,
    gaussian_kernel,
    gaussian_kernel_attention,
    landmark_indices,
    skyformer_factors,
)
from tests.conftest import assert_close, assert_within_rounding


def test_gaussian_kernel_uses_the_head_dim_scaling():
    q, k = torch.randn(2, 1, 1, 5, 16).unbind(0)
    expected = torch.exp(-torch.cdist(q.double(), k.double()).square() / 2 / 16**0.5)
    assert_close(expected, exact_gaussian_kernel(q, k), ratio=1e-10)
    x = torch.randn(4, 3)
    diag = torch.diagonal(gaussian_kernel(x, x))
    # h = |x|^2 / 2 + |x|^2 / 2 - x . x is 0 only up to rounding: the sum of squares and the matmul's dot product
    # may round differently (on an Intel Xeon the diagonal came out 0.99999988). The clamp keeps h >= 0, so
    # the diagonal is exp(-h) <= 1 with h <= gamma_{d+2} 2|x|^2 (d = 3 terms, then + and -), 1 - exp(-h) <= h,
    # and the exp adds its own ulp or two (the + 1 term, 2 more roundings)
    assert (diag <= 1).all()
    assert_within_rounding(torch.ones(4), diag, 2 * x.double().square().sum(-1) + 1, roundings=3 + 2 + 2)


def test_landmarks_come_from_real_rows_and_split_between_queries_and_keys():
    mask = torch.zeros(3, 50, dtype=torch.bool)
    mask[0, :50], mask[1, :7], mask[2, :1] = True, True, True
    idx = landmark_indices(mask, 3, 50, 64, torch.Generator().manual_seed(0))
    assert idx.shape == (3, 64)
    assert idx[0].max() < 50 and idx[1].max() < 7 and idx[2].eq(0).all()
    assert len(idx[1].unique()) == 7  # 64 draws cover the 7 real rows
    q = torch.arange(50.0)[None, None, :, None].expand(3, 1, 50, 4)
    q_hat, _ = skyformer_factors(q, -q, mask, idx, regularization=0.1)
    assert q_hat.shape == (3, 1, 50, 64)


def test_eval_is_deterministic_and_training_resamples():
    attn = SkyformerAttention(num_landmarks=8, seed=0).eval()
    q, k, v = torch.randn(3, 2, 2, 40, 8).unbind(0)
    assert torch.equal(attn(q, k, v), attn(q, k, v))
    attn.train()
    assert not torch.equal(attn(q, k, v), attn(q, k, v))


def test_seed_option_and_state_dict_fix_the_eval_landmarks():
    q, k, v = torch.randn(3, 1, 2, 40, 8).unbind(0)
    a = attention_zoo.build("skyformer", head_dim=8, num_heads=2, num_landmarks=8, seed=1).eval()
    b = attention_zoo.build("skyformer", head_dim=8, num_heads=2, num_landmarks=8, seed=2).eval()
    assert not torch.equal(a(q, k, v), b(q, k, v))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a(q, k, v), b(q, k, v))


def test_error_against_exact_gaussian_attention_falls_with_landmarks():
    q, k, v = torch.randn(3, 1, 2, 64, 16, generator=torch.Generator().manual_seed(0)).unbind(0)
    mask = torch.ones(1, 64, dtype=torch.bool)
    mask[0, 56:] = False
    ref = gaussian_kernel_attention(q, k, v, mask)[..., :56, :]
    errors = []
    for m in (4, 32, 256):
        out = SkyformerAttention(num_landmarks=m, seed=0).eval()(q, k, v, mask)[..., :56, :]
        errors.append(float((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.15


def test_output_is_unnormalised_kernel_attention():
    """Identical rows: every kernel value is 1, so the output sums the real values (no softmax denominator)."""
    q = torch.ones(1, 1, 6, 4)
    v = torch.randn(1, 1, 6, 4)
    mask = torch.tensor([[True] * 4 + [False] * 2])
    attn = SkyformerAttention(num_landmarks=4, regularization=0.0, pinv_iterations=30, seed=0).eval()
    expected = v[..., :4, :].sum(-2, keepdim=True).expand(1, 1, 4, 4)
    assert_close(expected, attn(q, q, v, mask)[..., :4, :], ratio=1e-4)


@pytest.mark.parametrize("bad, match", [({"pinv_init": "x"}, "'original'"), ({"causal": True}, "causal"),
                                        ({"num_landmarks": 1}, "num_landmarks")])
def test_invalid_options_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        attention_zoo.build("skyformer", head_dim=8, num_heads=2, **bad)
