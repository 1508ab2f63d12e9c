"""Reformer: hashing and sorting by hand, one bucket = shared-QK softmax, repeated rounds counted once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo.reformer import SELF_SCORE, lsh_buckets, naive_reformer, shared_keys, sort_order
from tests.conftest import assert_close, assert_within_rounding, random_qkv_mask, rounding_bound, saved_bytes

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def build(**opts):
    opts = {"max_len": 64, **opts}
    return attention_zoo.build("reformer", head_dim=8, num_heads=2, **opts)


def qkv_mask(b=2, n=37):
    return random_qkv_mask(b, 2, n, 8, real=26)


def test_buckets_are_the_argmax_of_the_rotated_vector_and_its_negation():
    rotations = torch.randn(1, 2, 8, 3)  # (H, R, D, n_buckets / 2)
    x = torch.randn(1, 1, 10, 8)
    real = torch.ones(1, 10, dtype=torch.bool)
    real[0, 7:] = False
    buckets = lsh_buckets(x, rotations, real)
    for r in range(2):
        rotated = x[0, 0].double() @ rotations[0, r].double()
        both = torch.cat([rotated, -rotated], -1)[:7]
        # float32 rotations are off by at most gamma_{8 + 1} sum_d |x_d R_dk| (a dot of 8, the 3 x below): where the
        # two largest entries are further apart than twice that, the argmax is the same on every CPU's kernels
        slack = 2 * rounding_bound(8 + 1) * (x[0, 0].double().abs() @ rotations[0, r].double().abs()).amax(-1)[:7]
        top2 = both.topk(2, -1).values
        assert (top2[:, 0] - top2[:, 1] > slack).all(), "test data with a near-tie: pick other inputs"
        assert torch.equal(buckets[0, 0, r, :7], both.argmax(-1))
    assert (buckets[..., 7:] == 6).all()  # pads: the extra bucket, sorted last
    assert torch.equal(buckets, lsh_buckets(3 * x, rotations, real))  # only the direction matters


def test_sort_is_by_round_then_bucket_then_position_with_inactive_copies_last():
    buckets = torch.tensor([[[[2, 0, 1, 0, 2, 1], [1, 1, 0, 0, 2, 2]]]])  # (B, H, R, N)
    active = torch.ones(1, 2, 6, dtype=torch.bool)
    assert sort_order(buckets, active).flatten().tolist() == [1, 3, 2, 5, 0, 4, 8, 9, 6, 7, 10, 11]
    active[0, :, 4:] = False  # pads
    assert sort_order(buckets, active).flatten().tolist() == [1, 3, 2, 0, 8, 9, 6, 7, 4, 5, 10, 11]


def test_keys_are_hugging_faces_length_and_dim_norm():
    q = torch.randn(2, 3, 5, 8)
    for x in (q, 1e-3 * q):  # at 1e-3 the 1e-6 inside the root matters as much as mean(q^2)
        expected = x.double() / torch.sqrt(x.double().square().mean(-1, keepdim=True) + 1e-6) / 8**0.5
        # float32: a mean of 8 squares, + 1e-6, rsqrt (a root and a division), 8^-0.5 cast, two products
        assert_within_rounding(expected, shared_keys(x), expected.abs(), roundings=8 + 1 + 2 + 2 + 1)
    assert_close(torch.ones(2, 3, 5), shared_keys(q).norm(dim=-1), ratio=1e-5)


def test_a_sequence_within_one_chunk_is_unscaled_shared_qk_softmax_without_self():
    """HF skips hashing when n <= chunk_len; scores q_i . k_j with unit keys and no 1/sqrt(d)."""
    attn = build(chunk_len=64, n_hashes=2)
    q, _, v, _ = qkv_mask(n=20)
    scores = q @ shared_keys(q).transpose(-1, -2) - 1e9 * torch.eye(20)
    assert_close(scores.softmax(-1) @ v, attn(q, torch.zeros_like(q), v), ratio=1e-6)


def test_one_bucket_attends_to_its_chunk_and_the_previous_one_whatever_the_bucket():
    """One round, rotations zero: the sorted order is the sequence; chunk i sees chunks i - 1 and i."""
    attn = build(chunk_len=4, n_buckets=4, n_hashes=1)
    attn.rotations.zero_()  # every token lands in bucket 0
    q, _, v, _ = qkv_mask(b=1, n=12)
    scores = q @ shared_keys(q).transpose(-1, -2) - 1e9 * torch.eye(12)
    chunk = torch.arange(12) // 4
    prev = (chunk - 1) % 3
    allowed = (chunk[None, :] == chunk[:, None]) | (chunk[None, :] == prev[:, None])
    expected = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    assert_close(expected, attn(q, q, v), ratio=1e-6)


def test_identical_rounds_give_one_rounds_output():
    one = build(chunk_len=4, n_buckets=4, n_hashes=1)
    three = build(chunk_len=4, n_buckets=4, n_hashes=3)
    three.rotations.copy_(one.rotations.expand_as(three.rotations))
    q, k, v, _ = qkv_mask(n=40)  # 40 real tokens: each round's chunks start where the previous round's did
    assert_close(one(q, k, v), three(q, k, v), ratio=1e-6)


@pytest.mark.parametrize("chunk_len, n_buckets, n_hashes", [(4, 4, 1), (3, 2, 3), (5, 8, 2), (2, 6, 4), (64, 4, 2)])
def test_fast_matches_oracle_and_ignores_pads(chunk_len, n_buckets, n_hashes):
    attn = build(chunk_len=chunk_len, n_buckets=n_buckets, n_hashes=n_hashes, seed=3)
    q, k, v, mask = qkv_mask()
    keep = mask[:, None, :].expand(-1, 2, -1)
    ref = naive_reformer(q, k, v, mask, rotations=attn.rotations, chunk_len=chunk_len)
    out = attn(q, k, v, mask)
    assert_close(ref[keep], out[keep], ratio=1e-6)
    junk = torch.randn(3, 2, 2, 9, 8)
    padded_mask = torch.cat([mask, torch.zeros(2, 9, dtype=torch.bool)], 1)
    padded = attn(*(torch.cat([t, j], 2) for t, j in zip((q, k, v), junk)), key_padding_mask=padded_mask)
    assert_close(out[keep], padded[:, :, :37][keep], ratio=1e-6)


def test_a_lone_token_attends_to_itself():
    attn = build(chunk_len=4, n_buckets=4)
    q, k, v, _ = qkv_mask(n=1)
    assert_close(v, attn(q, k, v), ratio=1e-6)
    assert SELF_SCORE < -1e4


def test_k_is_ignored_and_gets_a_zero_gradient():
    attn = build(chunk_len=4, n_buckets=4)
    q, k, v, mask = qkv_mask()
    k.requires_grad_(True)
    out = attn(q, k, v, mask)
    assert torch.equal(out, attn(q, torch.randn_like(k), v, mask))
    out.sum().backward()
    assert k.grad is not None and not k.grad.any()


def test_seeded_rotations_and_derived_buckets():
    assert torch.equal(build(seed=1).rotations, build(seed=1).rotations)
    assert not torch.equal(build(seed=1).rotations, build(seed=2).rotations)
    assert build(max_len=2048).n_buckets == 64 and build(max_len=16384).n_buckets == 512
    assert build(max_len=100, chunk_len=64).n_buckets == 2


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="causal"):
        build(causal=True)
    with pytest.raises(ValueError, match="even"):
        build(n_buckets=5)
    with pytest.raises(ValueError, match="max_len"):
        attention_zoo.build("reformer", head_dim=8, num_heads=2)
    conf = yaml.safe_load((CONF / "reformer.yaml").read_text())
    assert conf.pop("name") == "reformer"
    assert conf == attention_zoo.options("reformer")


def _loss_and_grads(attn, q, v, mask, upstream):
    qq, vv = q.clone().requires_grad_(True), v.clone().requires_grad_(True)
    out = attn(qq, qq.detach(), vv, mask)
    (out * upstream).sum().backward()
    return out.detach(), qq.grad, vv.grad


def _padded_case():
    """Row 0 has 3 real tokens (one chunk: one round), row 1 has 26: pads fill whole chunks of the sort."""
    q, _, v, mask = qkv_mask()
    mask[0, 3:] = False
    return q, v, mask, torch.randn(q.shape)


def test_groups_of_chunks_change_nothing(monkeypatch):
    """The chunks are processed a group at a time; one chunk per group gives the same outputs and gradients."""
    import attention_zoo.reformer as reformer

    attn = build(chunk_len=4, n_buckets=4, n_hashes=2, seed=5)
    q, v, mask, upstream = _padded_case()
    whole = _loss_and_grads(attn, q, v, mask, upstream)
    monkeypatch.setattr(reformer, "GROUP_SCORES", 1)
    for a, b in zip(whole, _loss_and_grads(attn, q, v, mask, upstream)):
        assert_close(a, b, ratio=1e-6)


def test_gradients_of_every_output_pads_included_match_finite_differences():
    """The written-out backward, pad tokens' outputs included: their copies are inactive (the rounds' lse is
    masked there: the backward recomputes their chunk output), and a window of inactive keys only weighs
    them alike through filled scores, which give q no gradient (the backward before 2026-12 gave it one)."""
    attn = build(chunk_len=4, n_buckets=4, n_hashes=2, seed=5)
    q, v, mask, upstream = _padded_case()
    _, grad_q, grad_v = _loss_and_grads(attn, q, v, mask, upstream)
    assert grad_q[0, :, 3:].abs().sum() > 0  # pads' outputs reach pads' queries
    dq, dv, eps = q * torch.randn(*q.shape[:-1], 1), torch.randn_like(v), 1e-2  # dq: scales q, keeps buckets

    def loss(sign):
        with torch.no_grad():
            qq = q + sign * eps * dq
            return (attn(qq, qq, v + sign * eps * dv, mask).double() * upstream).sum()

    numeric = (loss(1) - loss(-1)) / (2 * eps)
    analytic = (grad_q.double() * dq).sum() + (grad_v.double() * dv).sum()
    assert abs(float(numeric - analytic)) <= 1e-3 * float(analytic.abs())


def test_backward_keeps_no_chunk_weights_nor_gathered_copies():
    """Saved for backward: q, v (the caller's), the output and per-slot numbers; not the (c, 2c) weights."""
    attn = build(max_len=512, chunk_len=16, n_hashes=2)
    x = torch.randn(2, 2, 512, 16, requires_grad=True)
    q, v = x.split(8, -1)
    weights = 2 * 2 * (2 * 512 // 16) * 16 * 32 * 4  # (B, H, C, c, 2c) float32
    assert saved_bytes(attn, q, q, v) - x.untyped_storage().nbytes() < weights / 2
