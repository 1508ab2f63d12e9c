"""Local (block-diagonal) attention: blocks against plain softmax on each block, causality, the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo.local import naive_local
from attention_zoo.softmax import naive_softmax
from tests.conftest import assert_close, random_qkv_mask

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def qkv_mask(b=2, h=2, n=23, d=8):
    return random_qkv_mask(b, h, n, d, real=17)


@pytest.mark.parametrize("causal", [False, True])
def test_each_block_is_softmax_attention_on_that_block(causal):
    attn = attention_zoo.build("local", head_dim=8, num_heads=2, block_size=5, causal=causal)
    q, k, v, _ = qkv_mask()
    out = attn(q, k, v)
    for start in range(0, 23, 5):  # the last block holds 3 tokens
        sl = slice(start, start + 5)
        assert_close(naive_softmax(q[:, :, sl], k[:, :, sl], v[:, :, sl], causal=causal), out[:, :, sl],
                     ratio=1e-6)


def test_other_blocks_do_not_leak():
    attn = attention_zoo.build("local", head_dim=8, num_heads=2, block_size=5)
    q, k, v, _ = qkv_mask()
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 10:] += 4.0
    v2[:, :, 10:] -= 4.0
    assert torch.equal(attn(q, k, v)[:, :, :10], attn(q, k2, v2)[:, :, :10])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size", [1, 4, 7, 64])
def test_fast_matches_oracle_with_padding(block_size, causal):
    attn = attention_zoo.build("local", head_dim=8, num_heads=2, block_size=block_size, causal=causal)
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    ref = naive_local(q, k, v, mask, block_size=block_size, causal=causal)
    assert_close(ref[keep], attn(q, k, v, mask)[keep], ratio=1e-6)


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="block_size"):
        attention_zoo.build("local", head_dim=8, num_heads=2, block_size=0)
    conf = yaml.safe_load((CONF / "local.yaml").read_text())
    assert conf.pop("name") == "local"
    assert conf == attention_zoo.options("local")
