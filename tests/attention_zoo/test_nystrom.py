"""Nystromformer: landmarks from real tokens only, Newton-Schulz pseudo-inverse, the conv skip, options."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attention_zoo
from attention_zoo._pinv import newton_schulz_pinv
from attention_zoo.nystrom import NystromAttention, conv_as_matrix, nystrom_factors, segment_mean_weights
from attention_zoo.softmax import naive_softmax
from tests.conftest import assert_close


def test_segment_means_are_plain_block_means_when_the_length_divides():
    x = torch.randn(1, 1, 12, 3)
    means = segment_mean_weights(None, 1, 12, 4, "cpu")[:, None] @ x
    assert_close(x.reshape(1, 1, 4, 3, 3).mean(-2), means, ratio=1e-6)


def test_segment_means_by_hand_with_fractional_segments_and_pads():
    mask = torch.tensor([[True] * 5 + [False] * 3])  # L = 5, c = 2: segments [0, 2.5), [2.5, 5)
    weights = segment_mean_weights(mask, 1, 8, 2, "cpu")[0]
    expected = torch.tensor([[1, 1, 0.5, 0, 0, 0, 0, 0], [0, 0, 0.5, 1, 1, 0, 0, 0]]) / 2.5
    assert_close(expected, weights, ratio=1e-6)


def test_landmarks_ignore_padding_length():
    q = torch.randn(1, 2, 10, 4)
    short = nystrom_factors(q, q, torch.ones(1, 10, dtype=torch.bool), 4)
    padded_q = torch.cat([q, 9 * torch.randn(1, 2, 6, 4)], dim=2)
    mask = torch.tensor([[True] * 10 + [False] * 6])
    long = nystrom_factors(padded_q, padded_q, mask, 4)
    assert_close(short[1], long[1], ratio=1e-6)  # pinv(A) depends on the landmarks only
    assert_close(short[2], long[2][..., :10], ratio=1e-6)
    assert long[2][..., 10:].abs().max() == 0


def test_one_landmark_per_real_token_and_a_converged_pinv_is_exact_softmax():
    attn = NystromAttention(num_heads=2, num_landmarks=20, conv_kernel_size=0, pinv_iterations=40)
    q, k, v = torch.randn(3, 1, 2, 26, 8).unbind(0)
    mask = torch.tensor([[True] * 20 + [False] * 6])
    ref = naive_softmax(q[..., :20, :], k[..., :20, :], v[..., :20, :])
    assert_close(ref, attn(q, k, v, mask)[..., :20, :], ratio=1e-3)


def test_newton_schulz_converges_to_the_pseudo_inverse():
    a = torch.softmax(torch.randn(3, 6, 6) + 4 * torch.eye(6), dim=-1)
    for init in ("original", "per_matrix"):
        assert_close(torch.linalg.inv(a), newton_schulz_pinv(a, 12, init), ratio=1e-5)
    singular = torch.tensor([[1.0, 1.0], [1.0, 1.0]]) / 2  # duplicated landmark: pinv, not inverse
    assert_close(torch.linalg.pinv(singular), newton_schulz_pinv(singular, 20), ratio=1e-5)


def test_newton_schulz_one_step_by_hand():
    a = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    z = a.T / 1.25  # max column sum
    az = a @ z
    eye = torch.eye(2)
    expected = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    assert_close(expected, newton_schulz_pinv(a, 1), ratio=1e-7)


def test_original_init_shares_one_scale_over_the_batch():
    a = torch.softmax(torch.randn(2, 5, 5), dim=-1)
    alone = newton_schulz_pinv(a[:1], 2)
    together = newton_schulz_pinv(torch.cat([a[:1], 3 * a[1:]]), 2)
    assert not torch.allclose(alone, together[:1])
    assert_close(newton_schulz_pinv(a[:1], 2, "per_matrix"), newton_schulz_pinv(a, 2, "per_matrix")[:1])


def test_conv_skip_is_depthwise_over_the_sequence_and_matches_its_matrix():
    conv = torch.nn.Conv2d(2, 2, (5, 1), padding=(2, 0), groups=2, bias=False)
    v = torch.randn(1, 2, 9, 3)
    expected = conv_as_matrix(conv.weight, 9) @ v
    assert_close(expected, F.conv2d(v, conv.weight, padding=(2, 0), groups=2), ratio=1e-6)
    assert conv.weight.shape == (2, 1, 5, 1)


def test_the_conv_sees_no_pad_values():
    attn = NystromAttention(num_heads=2, num_landmarks=4)
    q, k, v = torch.randn(3, 1, 2, 10, 8).unbind(0)
    mask = torch.tensor([[True] * 7 + [False] * 3])
    v2 = v.clone()
    v2[..., 7:, :] = float("inf")
    assert_close(attn(q, k, v, mask)[..., :7, :], attn(q, k, v2, mask)[..., :7, :], ratio=1e-6)


@pytest.mark.parametrize("bad, match", [({"conv_kernel_size": 4}, "odd"), ({"pinv_init": "x"}, "'original'"),
                                        ({"causal": True}, "causal"), ({"num_landmarks": 0}, "num_landmarks")])
def test_invalid_options_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        attention_zoo.build("nystrom", head_dim=8, num_heads=2, **bad)


def test_no_conv_option_has_no_parameters():
    assert not list(attention_zoo.build("nystrom", head_dim=8, num_heads=2, conv_kernel_size=0).parameters())
