"""PolaFormer: polarity parts, learnable power and the same/opposite-sign branches, by hand computations."""

from __future__ import annotations

import math

import pytest
import torch

import attention_zoo
from attention_zoo.polaformer import polarity_parts, polarity_power
from tests.conftest import assert_close, assert_within_rounding, random_qkv_mask


def qkv_mask(b=2, h=2, n=20, d=8):
    return random_qkv_mask(b, h, n, d)


def test_power_starts_at_one_plus_half_alpha_and_stays_in_range():
    attn = attention_zoo.build("polaformer", head_dim=8, num_heads=2, alpha=4.0)
    power = polarity_power(attn.power_logit, attn.alpha)  # 1 + 4 sigmoid(0): a vectorised exp and a division,
    assert power.shape == (2, 8)  # right to an ulp or two, not bit for bit on every CPU
    assert_within_rounding(torch.full((2, 8), 3.0), power, torch.full((2, 8), 3.0), roundings=4)
    extremes = polarity_power(torch.tensor([-50.0, 50.0]), 4.0)
    assert extremes[0] >= 1 and extremes[1] <= 5


def test_polarity_parts_by_hand():
    x = torch.tensor([-2.0, 0.5, 0.0]).reshape(1, 1, 1, 3)
    scale = torch.zeros(1, 3)
    power = torch.tensor([[3.0, 2.0, 3.0]])
    pos, neg = polarity_parts(x, scale, power)
    ln2 = math.log(2)
    assert_close(torch.tensor([0.0, (0.5 / ln2) ** 2, 0.0]), pos.flatten(), ratio=1e-6)
    assert_close(torch.tensor([(2 / ln2) ** 3, 0.0, 0.0]), neg.flatten(), ratio=1e-6)


def test_same_and_opposite_sign_branches_by_hand():
    """First half of the channels: weights q+.k+ + q-.k-; second half: q-.k+ + q+.k-; each normalised."""
    attn = attention_zoo.build("polaformer", head_dim=4, num_heads=1, kernel_size=0, alpha=4.0)
    q, k, v, _ = qkv_mask(b=1, h=1, n=6, d=4)
    p, s = 3.0, math.log(2)
    qs, ks = q[0, 0] / s, k[0, 0] / s
    out = torch.zeros(6, 4)
    for i in range(6):
        same = torch.zeros(6)
        opposite = torch.zeros(6)
        for j in range(6):
            for c in range(4):
                a, b = float(qs[i, c]), float(ks[j, c])
                a_pos, a_neg, b_pos, b_neg = max(a, 0), max(-a, 0), max(b, 0), max(-b, 0)
                same[j] += (a_pos * b_pos) ** p + (a_neg * b_neg) ** p
                opposite[j] += (a_neg * b_pos) ** p + (a_pos * b_neg) ** p
        out[i, :2] = same @ v[0, 0, :, :2] / (same.sum() + 1e-6)
        out[i, 2:] = opposite @ v[0, 0, :, 2:] / (opposite.sum() + 1e-6)
    with torch.no_grad():
        assert_close(out, attn(q, k, v)[0, 0], ratio=1e-5)


def test_conv_is_added_to_the_attention_output():
    with_conv = attention_zoo.build("polaformer", head_dim=8, num_heads=2)
    without = attention_zoo.build("polaformer", head_dim=8, num_heads=2, kernel_size=0)
    q, k, v, mask = qkv_mask()
    with torch.no_grad():
        assert_close(without(q, k, v, mask) + with_conv.dwc(v, mask), with_conv(q, k, v, mask), ratio=1e-6)


def test_gate_multiplies_attention_plus_conv_and_matches_the_oracle():
    attn = attention_zoo.build("polaformer", head_dim=8, num_heads=2)
    assert attention_zoo.extra_inputs(attn) == ("gate",)
    assert attention_zoo.extra_inputs(attention_zoo.build("polaformer", head_dim=8, num_heads=2, gate=False)) == ()
    q, k, v, mask = qkv_mask()
    gate = torch.randn_like(q)
    with torch.no_grad():
        assert_close(attn(q, k, v, mask) * gate, attn(q, k, v, mask, gate=gate), ratio=1e-6)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, gate)]
    upstream = torch.randn_like(v) * mask[:, None, :, None]
    grads = []
    for fn in (attn.naive, attn):
        xs = [t.clone().detach().requires_grad_(True) for t in leaves]
        (fn(*xs[:3], mask, gate=xs[3]) * upstream).sum().backward()
        grads.append([t.grad for t in xs])
    for ref, out, label in zip(*grads, ("q", "k", "v", "gate")):
        assert_close(ref, out, ratio=1e-4, what=f"d{label}")


def test_the_block_projects_the_gate_as_a_fourth_slice():
    from lra.model import AttentionBlock

    torch.manual_seed(0)
    attn = attention_zoo.build("polaformer", head_dim=4, num_heads=2)
    block = AttentionBlock(8, 2, attn, dropout=0.0)
    assert block.qkv.weight.shape == (32, 8)
    x, mask = torch.randn(2, 10, 8), torch.ones(2, 10, dtype=torch.bool)
    q, k, v, g = block.qkv(block.norm(x)).view(2, 10, 4, 2, 4).permute(2, 0, 3, 1, 4)
    y = attn(q, k, v, mask) * g
    expected = x + block.out(y.transpose(1, 2).reshape(2, 10, 8))
    with torch.no_grad():
        assert_close(expected, block(x, mask), ratio=1e-6)
    ungated = AttentionBlock(8, 2, attention_zoo.build("polaformer", head_dim=4, num_heads=2, gate=False), 0.0)
    assert ungated.qkv.weight.shape == (24, 8)


def test_learnable_scale_power_and_conv_receive_gradients():
    attn = attention_zoo.build("polaformer", head_dim=8, num_heads=2)
    q, k, v, mask = qkv_mask()
    attn(q, k, v, mask).square().sum().backward()
    for p in (attn.scale, attn.power_logit, attn.dwc.conv.weight):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_causal_matches_naive_with_key_positions_and_causal_conv():
    attn = attention_zoo.build("polaformer", head_dim=8, num_heads=2, max_len=30, key_positions=True,
                               causal=True, chunk_size=7)
    with torch.no_grad():
        attn.key_positions.table.normal_()
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(attn.naive(q, k, v, mask)[keep], attn(q, k, v, mask)[keep], ratio=1e-4)


def test_option_validation():
    with pytest.raises(ValueError, match="even"):
        attention_zoo.build("polaformer", head_dim=7, num_heads=2)
    with pytest.raises(ValueError, match="alpha"):
        attention_zoo.build("polaformer", head_dim=8, num_heads=2, alpha=0.0)
    with pytest.raises(ValueError, match="kernel_size"):
        attention_zoo.build("polaformer", head_dim=8, num_heads=2, kernel_size=-1)
    with pytest.raises(ValueError, match="max_len"):
        attention_zoo.build("polaformer", head_dim=8, num_heads=2, key_positions=True)
