"""``lra.heads``: the head split and the packed merge give autograd's composition's values and gradients exactly."""

from __future__ import annotations

import pytest
import torch

from lra.heads import pack_heads, split_heads
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
