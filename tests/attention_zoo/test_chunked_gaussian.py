"""Skyformer's chunked Gaussian Nystrom product against the explicit (N, N) matrix: outputs and gradients
(float64 gradcheck through several chunks), and the module against its oracle with padded keys."""

from __future__ import annotations

import pytest
import torch

from attention_zoo._chunked_gaussian import chunked_gaussian_nystrom, naive_gaussian_nystrom
from attention_zoo.skyformer import SkyformerAttention
from tests.conftest import assert_close, rounding_bound


def inputs(n: int = 29, m: int = 6, dtype=torch.float64, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(2, 2, n, 4), (2, 2, n, 4), (2, 2, n, 3), (2, 2, m, 4), (2, 2, m, m)]
    scales = [0.7, 0.7, 1.0, 0.7, 1.0]
    return [(torch.randn(s, generator=g, dtype=dtype) * c).requires_grad_()
            for s, c in zip(shapes, scales, strict=True)]


@pytest.mark.parametrize("n,tokens_per_chunk", [(7, 1), (13, 4), (13, 13)])  # single-token, ragged, one chunk
def test_chunked_product_and_its_gradients_match_the_explicit_matrix(n, tokens_per_chunk):
    args = inputs(n=n)
    chunk_bytes = 2 * 2 * 6 * 8 * tokens_per_chunk  # rows x m x float64 bytes x tokens

    def chunked(*a):
        return chunked_gaussian_nystrom(*a, chunk_bytes=chunk_bytes)

    torch.testing.assert_close(chunked(*args), naive_gaussian_nystrom(*args), rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(chunked, args)


def test_gradients_match_the_oracle_in_float32():
    args32 = [a.detach().float().requires_grad_() for a in inputs(n=300, m=16)]
    args64 = [a.detach().double().requires_grad_() for a in args32]
    grad = torch.randn(2, 2, 300, 3)
    chunked_gaussian_nystrom(*args32, chunk_bytes=2 * 2 * 16 * 4 * 37).backward(grad)
    naive_gaussian_nystrom(*args64).backward(grad.double())
    for i, (ours, oracle) in enumerate(zip(args32, args64, strict=True)):
        # float32 sums over the 300 tokens, where gradient entries cancel: elementwise, the rounding bound is on
        # the terms' absolute sum, not the entry; normwise (relative RMSE) the gradient stays within gamma_300
        assert_close(oracle.grad, ours.grad, ratio=rounding_bound(300), atol=0, what=f"gradient of argument {i}")


def test_skyformer_forward_and_gradients_match_its_oracle_with_padding():
    torch.manual_seed(0)
    module = SkyformerAttention(num_landmarks=16, seed=3).eval()
    q, k, v = (torch.randn(3, 2, 50, 8, requires_grad=True) for _ in range(3))
    mask = torch.arange(50)[None, :] < torch.tensor([50, 31, 7])[:, None]
    grad = torch.randn(3, 2, 50, 8)
    ours = module(q, k, v, mask)
    ours.backward(grad)
    ours_grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    oracle = module.naive(q, k, v, mask)
    oracle.backward(grad)
    torch.testing.assert_close(ours, oracle, rtol=1e-4, atol=1e-5)
    for mine, theirs in zip(ours_grads, (q.grad, k.grad, v.grad), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)
