"""FLatten (focused linear attention) and the shared depthwise value convolution, by hand computations."""

from __future__ import annotations

import math

import pytest
import torch

import attention_zoo
from attention_zoo._dwconv import DepthwiseSequenceConv, naive_depthwise_sequence_conv
from attention_zoo.flatten import focus, positive_scaled
from tests.conftest import assert_close, random_qkv_mask


def qkv_mask(b=2, h=2, n=20, d=8):
    return random_qkv_mask(b, h, n, d)


def test_positive_scaled_is_relu_plus_eps_over_softplus():
    x = torch.tensor([[[[-1.0, 0.0, 2.0]]]])  # (1, 1, 1, 3)
    scale = torch.tensor([[0.0, 0.0, 1.0]])
    expected = torch.tensor([1e-6 / math.log(2), 1e-6 / math.log(2), (2 + 1e-6) / math.log(1 + math.e)])
    assert_close(expected, positive_scaled(x, scale)[0, 0, 0], ratio=1e-6)


def test_focus_keeps_the_norm_and_takes_the_direction_of_the_power():
    x = torch.tensor([1.0, 2.0, 3.0])
    cubed = torch.tensor([1.0, 8.0, 27.0])
    expected = math.sqrt(14) * cubed / math.sqrt(1 + 64 + 729)
    assert_close(expected, focus(x, 3.0), ratio=1e-6)
    y = torch.rand(5, 8) + 1e-3
    assert_close(y.norm(dim=-1), focus(y, 3.0).norm(dim=-1), ratio=1e-6)


def test_focusing_norms_span_all_heads_of_a_token():
    """f_p over the C = H d channels of a token (the paper and flatten_swin.py), not per head."""
    attn = attention_zoo.build("flatten", head_dim=4, num_heads=2)
    x = torch.randn(1, 2, 5, 4)
    flat = positive_scaled(x, attn.scale).transpose(1, 2).reshape(1, 5, 8)  # (B, N, C)
    expected = focus(flat, 3.0).reshape(1, 5, 2, 4).transpose(1, 2)
    assert_close(expected, attn.features(x), ratio=1e-6)
    y = x.clone()
    y[:, 1] *= 3.0  # another head's channels change head 0's features
    assert not torch.allclose(attn.features(x)[:, 0], attn.features(y)[:, 0])


def test_focus_does_not_underflow_for_tiny_inputs():
    x = torch.tensor([1e-20, 2e-20, 3e-20])
    direct = x.norm() * x**3 / (x**3).norm()  # x^3 underflows to 0: 0 / 0
    assert not torch.isfinite(direct).all()
    assert_close(1e-20 * focus(torch.tensor([1.0, 2.0, 3.0]), 3.0), focus(x, 3.0), ratio=1e-5)


def test_focus_gradient_matches_the_direct_formula():
    x = (torch.rand(4, 6, dtype=torch.float64) + 0.1).requires_grad_(True)
    g = torch.randn(4, 6, dtype=torch.float64)
    (focus(x, 3.0) * g).sum().backward()
    ours = x.grad.clone()
    x.grad = None
    (x.norm(dim=-1, keepdim=True) * x**3 / (x**3).norm(dim=-1, keepdim=True) * g).sum().backward()
    assert_close(x.grad, ours, ratio=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_depthwise_conv_against_a_hand_loop(causal):
    conv = DepthwiseSequenceConv(channels=3, kernel_size=5, causal=causal)
    v = torch.randn(1, 2, 9, 3)
    w, b = conv.conv.weight[:, 0], conv.conv.bias  # (d, k), (d,)
    pad = 4 if causal else 2
    expected = torch.zeros_like(v)
    for i in range(9):
        for t in range(5):
            j = i + t - pad
            if 0 <= j < 9:
                expected[..., i, :] += w[:, t] * v[..., j, :]
    expected += b
    with torch.no_grad():
        assert_close(expected, conv(v), ratio=1e-6)
        assert_close(expected, naive_depthwise_sequence_conv(v, w, b, causal=causal), ratio=1e-6)


def test_depthwise_conv_zeroes_padded_values_and_causal_sees_no_future():
    conv = DepthwiseSequenceConv(channels=4, kernel_size=5)
    v = torch.randn(1, 1, 10, 4)
    mask = torch.ones(1, 10, dtype=torch.bool)
    mask[0, 7:] = False
    garbage = v.clone()
    garbage[..., 7:, :] = 100.0
    with torch.no_grad():
        assert_close(conv(v, mask), conv(garbage, mask), ratio=1e-7)
        causal = DepthwiseSequenceConv(channels=4, kernel_size=5, causal=True)
        assert_close(causal(v)[..., :7, :], causal(garbage)[..., :7, :], ratio=1e-7)


def test_features_and_output_by_hand_without_conv():
    attn = attention_zoo.build("flatten", head_dim=4, num_heads=1, kernel_size=0)
    q, k, v, _ = qkv_mask(b=1, h=1, n=5, d=4)

    def phi(x):
        x = (torch.relu(x) + 1e-6) / math.log(2)
        return x.norm(dim=-1, keepdim=True) * x**3 / (x**3).norm(dim=-1, keepdim=True)

    weights = phi(q) @ phi(k).transpose(-1, -2)
    expected = (weights @ v / 5) / (weights.mean(-1, keepdim=True) + 1e-6)  # the reference's mean + eps
    with torch.no_grad():
        assert_close(expected, attn(q, k, v), ratio=1e-5)


def test_conv_is_added_to_the_attention_output():
    with_conv = attention_zoo.build("flatten", head_dim=8, num_heads=2)
    without = attention_zoo.build("flatten", head_dim=8, num_heads=2, kernel_size=0)
    q, k, v, mask = qkv_mask()
    with torch.no_grad():
        assert_close(without(q, k, v, mask) + with_conv.dwc(v, mask), with_conv(q, k, v, mask), ratio=1e-6)


def test_key_positions_need_max_len_and_are_learned_per_position():
    with pytest.raises(ValueError, match="max_len"):
        attention_zoo.build("flatten", head_dim=8, num_heads=2, key_positions=True)
    attn = attention_zoo.build("flatten", head_dim=8, num_heads=2, max_len=20, key_positions=True)
    assert attn.key_positions.table.shape == (2, 20, 8)
    q, k, v, mask = qkv_mask()
    before = attn(q, k, v, mask)
    with torch.no_grad():
        attn.key_positions.table.normal_()
    assert not torch.allclose(before, attn(q, k, v, mask))
    with pytest.raises(ValueError, match="20 positions"):
        attn(*qkv_mask(n=21)[:3])


def test_option_validation():
    with pytest.raises(ValueError, match="kernel_size"):
        attention_zoo.build("flatten", head_dim=8, num_heads=2, kernel_size=4)
    attention_zoo.build("flatten", head_dim=8, num_heads=2, kernel_size=4, causal=True)
    with pytest.raises(ValueError, match="focusing_factor"):
        attention_zoo.build("flatten", head_dim=8, num_heads=2, focusing_factor=0.5)


def test_features_are_float32_under_bf16_autocast():
    attn = attention_zoo.build("flatten", head_dim=8, num_heads=2)
    q, k, v, mask = qkv_mask()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attn.features(q.bfloat16()).dtype == torch.float32
        assert attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask).dtype == torch.bfloat16
