"""Longformer: window and global tokens against hand-built cases, the chunked form against the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo import _recomputed_softmax
from attention_zoo._attention_dropout import attention_dropout, dropout_seed
from attention_zoo._blocks import masked_softmax, scaled_scores
from attention_zoo.longformer import naive_longformer
from attention_zoo.softmax import naive_softmax
from tests.conftest import assert_close, random_qkv_mask

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def qkv_mask(b=2, h=2, n=29, d=8):
    return random_qkv_mask(b, h, n, d, real=20)


def build(**opts):
    return attention_zoo.build("longformer", head_dim=8, num_heads=2, **opts)


def test_window_zero_attends_only_to_itself():
    q, k, v, _ = qkv_mask()
    assert_close(v, build(window=0, chunk_size=4)(q, k, v), ratio=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_window_covering_the_sequence_is_softmax_attention(causal):
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    ref = naive_softmax(q, k, v, mask, causal=causal)
    assert_close(ref[keep], build(window=60, chunk_size=8, causal=causal)(q, k, v, mask)[keep], ratio=1e-6)


def test_window_is_w_over_2_each_side():
    q, k, v, _ = qkv_mask(b=1, h=1)
    out = build(window=4, chunk_size=5)(q, k, v)
    for i in (0, 9, 28):
        sl = slice(max(i - 2, 0), i + 3)
        ref = naive_softmax(q[:, :, i:i + 1], k[:, :, sl], v[:, :, sl])
        assert_close(ref, out[:, :, i:i + 1], ratio=1e-6)


def test_global_tokens_attend_everywhere_and_are_attended():
    q, k, v, _ = qkv_mask(b=1, h=1)
    out = build(window=2, num_global=2, chunk_size=4)(q, k, v)
    assert_close(naive_softmax(q[:, :, :2], k, v), out[:, :, :2], ratio=1e-6)
    i, keys = 10, [0, 1, 9, 10, 11]
    ref = naive_softmax(q[:, :, i:i + 1], k[:, :, keys], v[:, :, keys])
    assert_close(ref, out[:, :, i:i + 1], ratio=1e-6)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window, num_global, chunk",
                         [(6, 0, 4), (7, 3, 5), (1, 1, 3), (10, 2, 32), (512, 1, 256)])
def test_chunked_form_matches_oracle_with_padding(window, num_global, chunk, causal):
    attn = build(window=window, num_global=num_global, chunk_size=chunk, causal=causal)
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    ref = naive_longformer(q, k, v, mask, window=window, num_global=num_global, causal=causal)
    assert_close(ref[keep], attn(q, k, v, mask)[keep], ratio=1e-6)


def test_padding_invariance_with_globals_and_a_small_window():
    attn = build(window=4, num_global=2, chunk_size=3)
    q, k, v, _ = qkv_mask(b=1)
    junk = torch.randn(3, 1, 2, 11, 8)
    mask = torch.cat([torch.ones(1, 29, dtype=torch.bool), torch.zeros(1, 11, dtype=torch.bool)], 1)
    padded = attn(*(torch.cat([t, j], 2) for t, j in zip((q, k, v), junk)), key_padding_mask=mask)
    assert_close(attn(q, k, v), padded[:, :, :29], ratio=1e-6)


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="window"):
        build(window=-1)
    conf = yaml.safe_load((CONF / "longformer.yaml").read_text())
    assert conf.pop("name") == "longformer"
    assert conf == attention_zoo.options("longformer")


def dense_longformer(q, k, v, mask, *, window, num_global, causal, p, seed):
    """Autograd through the explicit ``(B, H, N, N)`` weights, dropped by query and key position as the
    chunked form names them (band, global columns and global rows alike)."""
    pos = torch.arange(q.shape[-2])
    offset = pos[None, :] - pos[:, None]
    allowed = (offset.abs() <= window // 2) | (pos[:, None] < num_global) | (pos[None, :] < num_global)
    if causal:
        allowed = allowed & (offset <= 0)
    probs = masked_softmax(scaled_scores(q, k), allowed & mask[:, None, None, :])
    if seed is not None:
        probs = attention_dropout(probs, p, seed, pos[:, None], pos[None, :])
    return probs @ v.float()


@pytest.mark.parametrize("block_bytes", [1, 20000, 2**30])
@pytest.mark.parametrize("p", [0.0, 0.3])
@pytest.mark.parametrize("window, num_global, chunk, causal", [(6, 0, 4, False), (7, 3, 5, True), (10, 2, 32, False)])
def test_blocked_recomputing_form_matches_autograd_outputs_gradients_and_masks(monkeypatch, block_bytes, p, window,
                                                                                num_global, chunk, causal):
    monkeypatch.setattr(_recomputed_softmax, "BLOCK_BYTES", block_bytes)  # 1: one chunk per block
    attn = build(window=window, num_global=num_global, chunk_size=chunk, causal=causal, dropout=p).train()
    q, k, v, mask = qkv_mask()
    inputs = [t.double().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(5)
    out = attn(*inputs, mask)
    torch.manual_seed(5)
    ref = dense_longformer(*inputs, mask, window=window, num_global=num_global, causal=causal, p=p,
                           seed=dropout_seed() if p else None)
    keep = mask[:, None, :, None].expand_as(ref)  # pad queries attend freely in neither form
    assert_close(ref[keep], out[keep], ratio=1e-6)
    grad = torch.randn_like(ref) * keep
    for name, want, got in zip("qkv", torch.autograd.grad(ref, inputs, grad), torch.autograd.grad(out, inputs, grad)):
        assert_close(want, got, ratio=1e-5, what=name)
