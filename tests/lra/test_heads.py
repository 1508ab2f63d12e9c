"""``lra.heads``: the head split and the packed merge give autograd's composition's values and gradients exactly."""

from __future__ import annotations

import pytest
import torch

import attention_zoo
from lra.heads import pack_heads, split_heads
from lra.model import AttentionBlock
from lra.packing import Packing

B, N, H, D = 3, 7, 2, 4


def test_split_heads_values_and_gradient_equal_the_view_permute_unbind():
    parts = torch.randn(B, N, 3 * H * D, dtype=torch.float64, requires_grad=True)
    ours = split_heads(parts, 3, H)
    theirs = parts.view(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    grads = [torch.randn(B, H, N, D, dtype=torch.float64) for _ in range(3)]
    ours_grad = torch.autograd.grad(ours, parts, grads)[0]
    assert torch.equal(ours_grad, torch.autograd.grad(theirs, parts, grads)[0])
    assert torch.autograd.gradcheck(lambda t: split_heads(t, 3, H), (parts,))


def test_split_heads_unused_inputs_get_zero_gradient():
    parts = torch.randn(B, N, 3 * H * D, requires_grad=True)
    q, k, v = split_heads(parts, 3, H)
    v.sum().backward()
    grad = parts.grad.view(B, N, 3, H, D)
    assert not grad[:, :, :2].any() and bool((grad[:, :, 2] == 1).all())


@pytest.mark.parametrize("padded", [True, False])
def test_pack_heads_values_and_gradient_equal_the_transpose_and_pack(padded):
    lengths = torch.tensor([N, 2, 5]) if padded else torch.full((B,), N)
    packing = Packing(torch.arange(N) < lengths[:, None])
    y = torch.randn(B, H, N, D, dtype=torch.float64, requires_grad=True)
    ours = pack_heads(y, packing)
    theirs = packing.pack(y.transpose(1, 2)).reshape(-1, H * D)
    assert ours.shape == (int(lengths.sum()), H * D) and torch.equal(ours, theirs)
    grad = torch.randn_like(ours)
    assert torch.equal(torch.autograd.grad(ours, y, grad)[0], torch.autograd.grad(theirs, y, grad)[0])
    assert torch.equal(pack_heads(y, None), y.transpose(1, 2).reshape(B, N, H * D))


def test_pack_heads_takes_a_cropped_single_head_output_of_an_unpadded_batch():
    """Block-wise mechanisms (local, bigbird, ...) crop their padded output: with one head the merge is a view of a
    non-contiguous tensor, which the unpadded path must still flatten."""
    packing = Packing(torch.ones(B, N, dtype=torch.bool))
    y = torch.randn(B, 1, N + 5, D)[:, :, :N]  # (B, 1, N, D), cropped: not contiguous
    assert torch.equal(pack_heads(y, packing), y.transpose(1, 2).reshape(B * N, D))


@pytest.mark.parametrize("name", attention_zoo.available())
def test_every_mechanism_runs_in_a_one_head_block_on_an_unpadded_odd_length(name):
    """The block's moves around attention with one head and a length no block size divides (block-wise mechanisms
    pad and crop), packed without padding: forward and backward run, gradients reach every input."""
    torch.manual_seed(0)
    small = getattr(attention_zoo.get(name), "contract_options", {})
    attention = attention_zoo.build(name, head_dim=8, num_heads=1, max_len=37, **small)
    block = AttentionBlock(8, 1, attention, dropout=0.0)
    mask = torch.ones(2, 37, dtype=torch.bool)
    x = torch.randn(2 * 37, 8, requires_grad=True)  # packed rows
    out = block(x, mask, Packing(mask))
    out.square().sum().backward()
    assert out.shape == x.shape and bool(torch.isfinite(x.grad).all()) and bool(x.grad.ne(0).any())
