"""Sinkhorn attention: balancing, hard permutations by hand, one block = local attention, the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo.sinkhorn import naive_sinkhorn, sinkhorn
from attention_zoo.softmax import naive_softmax
from tests.conftest import assert_close, random_qkv_mask

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def build(**opts):
    opts = {"max_len": 64, **opts}
    return attention_zoo.build("sinkhorn", head_dim=8, num_heads=2, **opts)


def qkv_mask(b=2, n=38):
    return random_qkv_mask(b, 2, n, 8, real=23)


def test_sinkhorn_balances_the_real_blocks_and_fixes_pad_blocks():
    real_blocks = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    s = sinkhorn(3 * torch.randn(2, 3, 6, 6), real_blocks, iters=60)
    assert_close(torch.ones(2, 3, 6), s.sum(-1), ratio=1e-4)
    assert_close(torch.ones(2, 3, 6), s.sum(-2), ratio=1e-4)
    assert torch.equal(s[1, :, 4:, 4:], torch.eye(2).expand(3, 2, 2))
    assert not s[1, :, :4, 4:].any() and not s[1, :, 4:, :4].any()


def test_default_sorting_matrix_is_doubly_stochastic_at_initialisation():
    """Rows and columns sum to 1 at the LRA ListOps shape (40 blocks of 50) with block-input-scale keys.

    The old 7 fixed rounds (lucidrains/sinkhorn-transformer's count) left rows off by 0.3 here.
    """
    attn = attention_zoo.build("sinkhorn", head_dim=32, num_heads=2, max_len=2000)
    k = 0.6 * torch.randn(2, 2, 2000, 32)  # LayerNorm then a default-initialised Linear: ~0.58 per channel
    mask = torch.ones(2, 2000, dtype=torch.bool)
    mask[1, 1234:] = False
    s = attn.permutation(k, mask)
    assert (s.sum(-1) - 1).abs().max() <= 1e-3 and (s.sum(-2) - 1).abs().max() <= 1e-5
    seven = attention_zoo.build("sinkhorn", head_dim=32, num_heads=2, max_len=2000, sinkhorn_iters=7,
                                sinkhorn_tol=0.0)
    seven.load_state_dict(attn.state_dict())
    assert (seven.permutation(k, mask).sum(-1) - 1).abs().max() > 0.1


def test_stopping_is_per_matrix_so_the_batch_does_not_matter():
    attn = build(block_size=4, sinkhorn_iters=50)
    q, k, v, mask = qkv_mask()
    hard = torch.cat([k, 5 * k[:1]])  # a batch-mate that needs more rounds
    both = attn(torch.cat([q, q[:1]]), hard, torch.cat([v, v[:1]]), torch.cat([mask, mask[:1]]))
    # equal up to rounding, not bit for bit: the sort net's matmul folds the batch into its rows, and another row
    # count may take another BLAS kernel; rounds stopped for the whole batch would move these by ~6e-5 (RMSE)
    assert_close(attn(q, k, v, mask), both[:2], ratio=1e-6, atol=0)


def test_hard_permutation_attends_to_own_and_partner_block():
    attn = build(block_size=4)
    q, k, v, _ = qkv_mask(b=1, n=16)
    partner = [2, 3, 1, 0]
    perm = torch.eye(4)[partner].expand(1, 2, 4, 4)
    attn.permutation = lambda keys, real: perm
    out = attn(q, k, v)
    for i, j in enumerate(partner):
        keys = torch.cat([k[:, :, 4 * i:4 * i + 4], k[:, :, 4 * j:4 * j + 4]], 2)
        values = torch.cat([v[:, :, 4 * i:4 * i + 4], v[:, :, 4 * j:4 * j + 4]], 2)
        assert_close(naive_softmax(q[:, :, 4 * i:4 * i + 4], keys, values), out[:, :, 4 * i:4 * i + 4], ratio=1e-6)


def test_a_single_block_is_plain_softmax_attention():
    q, k, v, mask = qkv_mask(n=20)
    keep = mask[:, None, :].expand(-1, 2, -1)
    assert_close(naive_softmax(q, k, v, mask)[keep], build(block_size=32)(q, k, v, mask)[keep], ratio=1e-6)


@pytest.mark.parametrize("block_size, iters", [(3, 7), (4, 1), (5, 3), (7, 7), (50, 7)])
def test_fast_matches_oracle_and_ignores_pads(block_size, iters):
    attn = build(block_size=block_size, sinkhorn_iters=iters, sinkhorn_tol=0.0).eval()
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    perm = attn.permutation(k, mask)
    ref = naive_sinkhorn(q, k, v, mask, block_size=block_size, permutation=perm)
    out = attn(q, k, v, mask)
    assert_close(ref[keep], out[keep], ratio=1e-6)
    junk = torch.randn(3, 2, 2, 13, 8)
    padded_mask = torch.cat([mask, torch.zeros(2, 13, dtype=torch.bool)], 1)
    padded = attn(*(torch.cat([t, j], 2) for t, j in zip((q, k, v), junk)), key_padding_mask=padded_mask)
    assert_close(out[keep], padded[:, :, :38][keep], ratio=1e-6)


def test_sort_net_gets_gradients():
    attn = build(block_size=4)
    q, k, v, mask = qkv_mask()
    attn(q, k, v, mask).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in attn.parameters())


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="causal"):
        build(causal=True)
    with pytest.raises(ValueError, match="max_len"):
        attention_zoo.build("sinkhorn", head_dim=8, num_heads=2)
    with pytest.raises(ValueError, match="sinkhorn_iters"):
        build(sinkhorn_iters=0)
    with pytest.raises(ValueError, match="blocks"):
        build(block_size=4)(*torch.randn(3, 1, 2, 70, 8).unbind(0))
    conf = yaml.safe_load((CONF / "sinkhorn.yaml").read_text())
    assert conf.pop("name") == "sinkhorn"
    assert conf == attention_zoo.options("sinkhorn")
