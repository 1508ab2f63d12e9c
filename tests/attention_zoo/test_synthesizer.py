"""Synthesizer: synthetic weights by hand (dense and factorized random), chunking, causality, options."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from tests.conftest import assert_close, random_qkv_mask

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def build(**opts):
    return attention_zoo.build("synthesizer", head_dim=8, num_heads=2, max_len=40, **opts)


def qkv_mask(n=30):
    return random_qkv_mask(2, 2, n, 8, real=21, row=1)


def test_factorized_random_weights_by_hand_and_independent_of_q_k():
    attn = build(rank=4)
    q, k, v, mask = qkv_mask()
    out = attn(q, k, v, mask)
    for h in range(2):
        logits = attn.r1[h, :21] @ attn.r2[h, :21].T
        assert_close(torch.softmax(logits, -1) @ v[1, h, :21], out[1, h, :21], ratio=1e-6)
    assert torch.equal(out, attn(torch.randn_like(q), torch.randn_like(k), v, mask))


def test_dense_weights_by_hand():
    attn = build(variant="dense")
    q, k, v, mask = qkv_mask()
    out = attn(q, k, v, mask)
    h = 1
    hidden = torch.relu(q[0, h] @ attn.w1[h] + attn.b1[h])
    logits = hidden @ attn.w2[h, :, :30] + attn.b2[h, :, :30]
    assert_close(torch.softmax(logits, -1) @ v[0, h], out[0, h], ratio=1e-6)


@pytest.mark.parametrize("variant", ["dense", "factorized_random"])
@pytest.mark.parametrize("causal", [False, True])
def test_chunks_match_the_oracle_and_the_future_does_not_leak(variant, causal):
    attn = build(variant=variant, chunk_size=7, causal=causal)
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(attn.naive(q, k, v, mask)[keep], attn(q, k, v, mask)[keep], ratio=1e-6)
    if causal:
        v2 = v.clone()
        v2[:, :, 20:] += 3.0
        assert torch.equal(attn(q, k, v)[:, :, :20], attn(q, k, v2)[:, :, :20])


def test_unused_inputs_get_zero_gradients():
    attn = build()
    q, k, v, mask = (t.requires_grad_(True) if t.dtype.is_floating_point else t for t in qkv_mask())
    attn(q, k, v, mask).sum().backward()
    assert q.grad is not None and not q.grad.any() and not k.grad.any() and v.grad.any()


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="dense, factorized_random"):
        build(variant="random")
    with pytest.raises(ValueError, match="max_len"):
        attention_zoo.build("synthesizer", head_dim=8, num_heads=2)
    conf = yaml.safe_load((CONF / "synthesizer.yaml").read_text())
    assert conf.pop("name") == "synthesizer"
    assert conf == attention_zoo.options("synthesizer")
