"""Hedgehog: the two-sided softmax feature map by hand, separate q/k maps, inits, option validation, and the
chunked non-causal path (same outputs and gradients as materialised features, O(N d) kept for backward)."""

from __future__ import annotations

from functools import partial

import pytest
import torch

import attention_zoo
from attention_zoo._chunked_attention import chunked_kernel_attention
from attention_zoo.hedgehog import HedgehogChunkMap, hedgehog_feature_map
from attention_zoo.kernel import kernel_attention, values_and_ones
from tests.conftest import assert_close, random_qkv_mask, saved_bytes


def qkv_mask(b=2, h=2, n=20, d=8):
    return random_qkv_mask(b, h, n, d)


def test_feature_map_by_hand():
    x = torch.tensor([1.0, -2.0]).reshape(1, 1, 1, 2)
    weight = torch.tensor([[[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]]])  # (1, 2, 3)
    bias = torch.tensor([[0.0, 0.5, 0.0]])
    y = torch.tensor([1.0, -1.5, 0.0])  # x W + b
    expected = torch.cat([y.exp() / y.exp().sum(), (-y).exp() / (-y).exp().sum()])
    assert_close(expected, hedgehog_feature_map(x, weight, bias).flatten(), ratio=1e-6)


def test_features_are_two_distributions_and_clamped():
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=16)
    q = 100 * torch.randn(2, 2, 5, 8)
    phi = attn.features(q, "q")
    assert phi.shape == (2, 2, 5, 32)
    assert_close(torch.ones(2, 2, 5, 2), phi.unflatten(-1, (2, 16)).sum(-1), ratio=1e-5)
    assert (phi >= 1e-12).all()


def test_output_by_hand():
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=4)
    q, k, v, mask = qkv_mask()

    def phi(x, w, b):
        y = torch.einsum("bhnd,hdf->bhnf", x, w) + b[:, None, :]
        return torch.cat([torch.softmax(y, -1), torch.softmax(-y, -1)], -1)

    with torch.no_grad():
        attn.b_q.normal_()
        weights = phi(q, attn.w_q, attn.b_q) @ phi(k, attn.w_k, attn.b_k).transpose(-1, -2)
        weights = weights * mask[:, None, None, :]
        expected = weights @ v / weights.sum(-1, keepdim=True)
        keep = mask[:, None, :].expand(-1, 2, -1)
        assert_close(expected[keep], attn(q, k, v, mask)[keep], ratio=1e-5)


def test_query_and_key_maps_are_separate_and_learnable():
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=16)
    assert attn.w_q.shape == attn.w_k.shape == (2, 8, 16)
    assert attn.b_q.shape == (2, 16)
    assert not torch.equal(attn.w_q, attn.w_k)
    q, k, v, mask = qkv_mask()
    attn(q, k, v, mask).square().sum().backward()
    for p in (attn.w_q, attn.w_k, attn.b_q, attn.b_k):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_per_feature_bias_matters_but_a_per_head_constant_cancels():
    """A per-head scalar bias (lolcats' shape) is a no-op under the softmax; a per-feature one is not."""
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=16)
    q = torch.randn(1, 2, 5, 8)
    before = attn.features(q, "q")
    with torch.no_grad():
        attn.b_q.copy_(torch.tensor([[3.0], [-1.0]]).expand(2, 16))
    assert_close(before, attn.features(q, "q"), ratio=1e-6)
    with torch.no_grad():
        attn.b_q.normal_()
    assert not torch.allclose(before, attn.features(q, "q"))


def test_inits_and_no_bias():
    ident = attention_zoo.build("hedgehog", head_dim=4, num_heads=2, feature_dim=6, init="identity",
                                bias=False)
    assert torch.equal(ident.w_q[1], torch.eye(4, 6)) and ident.b_q is None
    kaiming = attention_zoo.build("hedgehog", head_dim=32, num_heads=2)
    assert kaiming.w_q.abs().max() <= (6 / (32 * 64)) ** 0.5  # Kaiming-uniform bound, fan_in = d * f
    normal = attention_zoo.build("hedgehog", head_dim=32, num_heads=2, init="normal")
    assert 0.1 < normal.w_q.std() < 0.25  # N(0, 1/d)


def test_option_validation():
    with pytest.raises(ValueError, match="kaiming, identity, normal"):
        attention_zoo.build("hedgehog", head_dim=8, num_heads=2, init="xavier")
    with pytest.raises(ValueError, match="feature_dim"):
        attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=0)


def test_features_are_float32_under_bf16_autocast():
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2)
    q, k, v, mask = qkv_mask()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attn.features(q.bfloat16(), "k").dtype == torch.float32
        assert attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask).dtype == torch.bfloat16


def materialised(attn, q, k, v, mask):
    """The features as whole tensors, then ``kernel_attention``: the causal path's way, non-causal."""
    return kernel_attention(attn.features(q, "q"), attn.features(k, "k"), v, mask, eps=attn.eps)


@pytest.mark.parametrize("bias", [True, False])
def test_chunked_map_matches_materialised_features_in_outputs_and_all_gradients(bias):
    """Several token chunks (a tiny ``chunk_bytes``), spiky maps (some features clamped), padded keys."""
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=6, bias=bias)
    with torch.no_grad():
        for w in (attn.w_q, attn.w_k):
            w.normal_(0, 6.0)
        if bias:
            attn.b_q.normal_()
    q, k, v, mask = random_qkv_mask(2, 2, 45, 8, real=30)
    upstream = torch.randn(2, 2, 45, 8) * mask[:, None, :, None]

    def chunked(q, k, v, mask):
        v1 = values_and_ones(v, mask)
        make = partial(HedgehogChunkMap, bias=bias)
        return chunked_kernel_attention(q, k, v1, attn.map_param("q"), attn.map_param("k"), make,
                                        eps=attn.eps, chunk_bytes=2 * 2 * 12 * 4 * 7)  # 7 tokens a chunk

    results = []
    for fn in (materialised, chunked, attn.forward):
        attn.zero_grad()
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        args = leaves + [mask] if fn is not materialised else [attn, *leaves, mask]
        (fn(*args) * upstream).sum().backward()
        results.append([fn(*args).detach(), *(t.grad for t in leaves), *(p.grad.clone() for p in attn.parameters())])
    assert (attn.features(q, "q") == 1e-12).any()  # the clamp's gradient mask is exercised
    for ref, out in zip(results[0], results[1]):
        assert_close(ref, out, ratio=1e-5)
    for ref, out in zip(results[0], results[2]):
        assert_close(ref, out, ratio=1e-5)


def test_non_causal_keeps_no_feature_tensor_for_backward():
    """Autograd keeps O(N d) (q, k, [v, 1], output), not the (N, 2f) features or their softmax copies."""
    attn = attention_zoo.build("hedgehog", head_dim=8, num_heads=2, feature_dim=32)  # 2f = 8 d
    q, k, v = (torch.randn(2, 2, 1024, 8, requires_grad=True) for _ in range(3))
    saved = saved_bytes(attn, q, k, v)
    assert saved < 6 * q.nbytes
    assert saved_bytes(materialised, attn, q, k, v, None) > 4 * saved  # what the materialised features keep
