"""cosFormer: the cos decomposition by hand, M and positions from the true lengths, non-negative weights."""

from __future__ import annotations

import math

import torch

import attention_zoo
from attention_zoo.cosformer import cos_reweighted_features, naive_cosformer, positions_and_lengths
from tests.conftest import assert_close


def test_feature_products_are_relu_products_times_the_position_cosine():
    q, k = torch.randn(2, 1, 1, 5, 3).unbind(0)
    phi_q, phi_k = cos_reweighted_features(q), cos_reweighted_features(k)
    assert phi_q.shape == (1, 1, 5, 6)
    for i in range(5):
        for j in range(5):
            expected = torch.relu(q[0, 0, i]) @ torch.relu(k[0, 0, j]) * math.cos(math.pi / 2 * (i - j) / 5)
            assert torch.allclose(phi_q[0, 0, i] @ phi_k[0, 0, j], expected, atol=1e-6)


def test_features_by_hand_for_one_token():
    x = torch.tensor([[[[1.0, -2.0], [0.5, 3.0]]]])  # (1, 1, 2, 2): M = 2, angles pi/4 and pi/2
    s = math.sqrt(0.5)
    expected = torch.tensor([[[[s, 0.0, s, 0.0], [0.5, 3.0, 0.0, 0.0]]]])
    assert_close(expected, cos_reweighted_features(x), ratio=1e-6)


def test_positions_count_real_tokens_and_m_is_the_true_length():
    mask = torch.tensor([[True, True, True, False, False], [False, False, True, True, True]])
    positions, lengths = positions_and_lengths(mask, 2, 5, "cpu")
    assert lengths.flatten().tolist() == [3.0, 3.0]
    assert positions[0, :3].tolist() == [1.0, 2.0, 3.0] and positions[1, 2:].tolist() == [1.0, 2.0, 3.0]


def test_left_and_right_padding_give_the_unpadded_result():
    attn = attention_zoo.build("cosformer", head_dim=8, num_heads=2)
    q, k, v = torch.randn(3, 1, 2, 12, 8).unbind(0)
    ref = attn(q, k, v)
    junk = 4 * torch.randn(3, 1, 2, 5, 8)
    for left in (True, False):
        padded = [torch.cat([j, t] if left else [t, j], dim=2) for t, j in zip((q, k, v), junk)]
        mask = torch.zeros(1, 17, dtype=torch.bool)
        real = slice(5, 17) if left else slice(0, 12)
        mask[0, real] = True
        out = attn(*padded, key_padding_mask=mask)
        assert_close(ref, out[:, :, real], ratio=1e-5)


def test_weights_are_non_negative_and_the_oracle_is_normalised():
    q, k, v = torch.randn(3, 2, 2, 20, 8).unbind(0)
    phi_q, phi_k = cos_reweighted_features(q), cos_reweighted_features(k)
    assert ((phi_q @ phi_k.transpose(-1, -2)) >= -1e-6).all()
    ones = naive_cosformer(q.abs(), k.abs(), torch.ones_like(v))
    assert_close(torch.ones_like(ones), ones, ratio=1e-5)


def test_causal_module_matches_the_causal_oracle_with_small_chunks():
    attn = attention_zoo.build("cosformer", head_dim=8, num_heads=2, causal=True, chunk_size=4)
    q, k, v = torch.randn(3, 2, 2, 23, 8).unbind(0)
    mask = torch.ones(2, 23, dtype=torch.bool)
    mask[1, 15:] = False
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(attn.naive(q, k, v, mask)[keep], attn(q, k, v, mask)[keep], ratio=1e-5)


def test_features_are_float32_under_bf16_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert cos_reweighted_features(torch.randn(1, 1, 4, 8).bfloat16()).dtype == torch.float32
