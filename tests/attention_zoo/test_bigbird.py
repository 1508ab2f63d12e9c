"""BigBird: the block layout (window, globals, random blocks), determinism, and the gathered fast form (chunked,
recomputed in backward: autograd's outputs and gradients, O(N d) kept)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo._blocks import masked_softmax
from attention_zoo.bigbird import bigbird_layout, gathered_attention, naive_bigbird
from attention_zoo.softmax import naive_softmax
from tests.conftest import assert_close, random_qkv_mask, saved_bytes

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def qkv_mask(b=2, h=3, n=45, d=8, real=33):
    return random_qkv_mask(b, h, n, d, real=real)


def build(**opts):
    return attention_zoo.build("bigbird", head_dim=8, num_heads=3, **opts)


def test_layout_has_window_globals_and_distinct_random_real_blocks():
    real = torch.ones(2, 60, dtype=torch.bool)
    real[1, 37:] = False  # blocks of 3: 20 blocks, 13 of them real in the second sequence
    layout = bigbird_layout(real, 3, block_size=3, num_random_blocks=2, seed=5)  # (B, H, M, M)
    i = torch.arange(20)
    window = (i[:, None] - i[None, :]).abs() <= 1
    for b, blocks in ((0, 20), (1, 13)):
        last = blocks - 1
        assert layout[b, :, :, 0].all() and layout[b, :, :, last].all()
        assert layout[b, :, 0].all() and layout[b, :, last].all()
        assert (layout[b] >= window).all()
        for row in range(1, last):
            extra = layout[b, :, row] & ~window[row]
            extra[:, [0, last]] = False
            assert (extra.sum(-1) == 2).all()  # exactly r random blocks per head
            assert not extra[:, blocks:].any()  # only among real blocks
    assert not torch.equal(layout[0, 0], layout[0, 1])  # random blocks differ across heads


def test_layout_is_seeded_and_independent_of_trailing_pads():
    real = torch.ones(1, 90, dtype=torch.bool)
    a = bigbird_layout(real, 2, block_size=3, num_random_blocks=3, seed=1)
    assert torch.equal(a, bigbird_layout(real, 2, block_size=3, num_random_blocks=3, seed=1))
    assert not torch.equal(a, bigbird_layout(real, 2, block_size=3, num_random_blocks=3, seed=2))
    padded = torch.cat([real, torch.zeros(1, 40, dtype=torch.bool)], 1)
    b = bigbird_layout(padded, 2, block_size=3, num_random_blocks=3, seed=1)
    assert torch.equal(a, b[:, :, :30, :30]) and not b[:, :, 1:29, 30:].any()  # rows 0, 29 are global


def test_key_blocks_list_each_allowed_block_once():
    attn = build(block_size=2, num_random_blocks=3)
    real = torch.ones(2, 40, dtype=torch.bool)
    real[1, 25:] = False
    idx, valid = attn.key_blocks(real, 20)
    layout = bigbird_layout(real, 3, block_size=2, num_random_blocks=3, seed=0)
    counts = torch.zeros(2, 3, 20, 20).scatter_add(-1, idx, valid.float())
    assert counts.max() == 1
    is_global = torch.zeros(2, 1, 20, 1, dtype=torch.bool)
    is_global[:, :, 0] = True
    is_global[0, :, 19] = is_global[1, :, 12] = True
    assert torch.equal((counts > 0) | is_global, layout | is_global)  # global rows are computed in full


@pytest.mark.parametrize("block_size, r, n",
                         [(2, 3, 45), (3, 2, 45), (4, 0, 45), (5, 9, 45), (64, 3, 45), (7, 3, 7)])
def test_fast_matches_oracle_with_padding(block_size, r, n):
    attn = build(block_size=block_size, num_random_blocks=r, seed=3)
    q, k, v, mask = qkv_mask(n=n, real=min(33, n - 2))
    keep = mask[:, None, :].expand(-1, 3, -1)
    ref = naive_bigbird(q, k, v, mask, block_size=block_size, num_random_blocks=r, seed=3)
    assert_close(ref[keep], attn(q, k, v, mask)[keep], ratio=1e-6)


def test_few_blocks_is_full_attention():
    q, k, v, mask = qkv_mask(n=40)
    keep = mask[:, None, :].expand(-1, 3, -1)
    assert_close(naive_softmax(q, k, v, mask)[keep], build(block_size=10)(q, k, v, mask)[keep], ratio=1e-6)


def test_padding_invariance_with_small_blocks():
    attn = build(block_size=4, num_random_blocks=2)
    q, k, v, _ = qkv_mask(b=1, n=42)
    junk = torch.randn(3, 1, 3, 29, 8)
    mask = torch.cat([torch.ones(1, 42, dtype=torch.bool), torch.zeros(1, 29, dtype=torch.bool)], 1)
    padded = attn(*(torch.cat([t, j], 2) for t, j in zip((q, k, v), junk)), key_padding_mask=mask)
    assert_close(attn(q, k, v), padded[:, :, :42], ratio=1e-6)


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="causal"):
        build(causal=True)
    with pytest.raises(ValueError, match="block_size"):
        build(block_size=0)
    conf = yaml.safe_load((CONF / "bigbird.yaml").read_text())
    assert conf.pop("name") == "bigbird"
    assert conf == attention_zoo.options("bigbird")


def gathered_by_autograd(qb, kb, vb, idx, allowed):
    """``gathered_attention`` unchunked, as plain autograd operations (gathered copies kept)."""
    keys, values = kb[idx].flatten(1, 2), vb[idx].flatten(1, 2)
    scores = (qb @ keys.transpose(-1, -2)) * qb.shape[-1] ** -0.5
    return masked_softmax(scores, allowed[:, None, :]) @ values


@pytest.mark.parametrize("score_bytes", [1, 3 * 4 * 12 * 4, 2**30])  # a block, 3 blocks, all at once a chunk
def test_gathered_attention_matches_autograd_in_outputs_and_gradients(score_bytes):
    """Repeated and masked key blocks, a query block that may see nothing; chunks of any size."""
    qb, kb, vb = (torch.randn(r, 4, 8) for r in (10, 7, 7))
    idx = torch.randint(0, 7, (10, 3))
    idx[0] = 2  # one block three times over, masked but once
    allowed = torch.rand(10, 12) < 0.7
    allowed[0] = torch.arange(12) < 4
    allowed[1] = False  # attends to nothing: zeros
    upstream = torch.randn(10, 4, 8)
    results = []
    for fn in (gathered_by_autograd, partial(gathered_attention, score_bytes=score_bytes)):
        leaves = [t.clone().requires_grad_(True) for t in (qb, kb, vb)]
        out = fn(*leaves, idx, allowed)
        (out * upstream).sum().backward()
        results.append([out.detach(), *(t.grad for t in leaves)])
    assert torch.equal(results[1][0][1], torch.zeros(4, 8))
    for ref, out in zip(*results):
        assert_close(ref, out, ratio=1e-6)


def test_fast_form_keeps_no_gathered_copies_for_backward():
    """Autograd keeps the q, k, v blocks and the block masks, O(N d); not the (5 + r) b keys per query."""
    attn = build(block_size=16, num_random_blocks=3)
    q, k, v = (torch.randn(2, 3, 1024, 8, requires_grad=True) for _ in range(3))
    saved = saved_bytes(attn, q, k, v)
    assert saved < 5 * q.nbytes
    old = dict(block_size=16, num_random_blocks=3, seed=0)
    assert saved_bytes(lambda *t: naive_bigbird(*t, **old), q, k, v) > 4 * saved  # the n x n oracle
