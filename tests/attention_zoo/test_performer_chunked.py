"""Performer's chunked, recomputing path against its stored-feature path and its quadratic oracle."""

from __future__ import annotations

import pytest
import torch

from attention_zoo.kernel import kernel_attention
from attention_zoo.performer import (
    PerformerAttention,
    chunked_performer,
    key_shift,
    key_shift_chunked,
    performer_features,
    softmax_log_features,
)
from tests.conftest import assert_close

B, H, N, D, M = 2, 2, 45, 16, 32
SMALL_CHUNKS = 2**12  # a few tokens per chunk, so every loop runs over several chunks and a ragged last one


def padded_inputs(scale: float = 1.5):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (scale * torch.randn(B, H, N, D, generator=gen) for _ in range(3))
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 30:] = False
    k[0, :, 30:] = 4.0  # padded keys with large projections must not set the key shift
    return q, k, v, mask


def stored(q, k, v, projection, mask, kernel):
    """The stored-feature path: ``performer_features`` then ``kernel_attention``."""
    phi_q, phi_k = performer_features(q, k, projection, mask, kernel=kernel)
    return kernel_attention(phi_q, phi_k, v, mask, eps=0.0)


def output_and_grads(fn, q, k, v):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1)))
    return [out.detach(), *(t.grad for t in leaves)]


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
@pytest.mark.parametrize("padded", [False, True])
def test_chunked_path_matches_stored_features_in_output_and_gradients(kernel, padded):
    q, k, v, mask = padded_inputs()
    mask = mask if padded else None
    projection = PerformerAttention(head_dim=D, features=M, seed=0).projection
    ref = output_and_grads(lambda a, b, c: stored(a, b, c, projection, mask, kernel), q, k, v)
    out = output_and_grads(lambda a, b, c: chunked_performer(a, b, c, projection, mask, kernel=kernel,
                                                             chunk_bytes=SMALL_CHUNKS), q, k, v)
    for what, r, o in zip(("out", "grad q", "grad k", "grad v"), ref, out):
        assert_close(r, o, ratio=1e-5, what=what)


def test_module_uses_the_chunked_path_and_matches_its_oracle():
    q, k, v, mask = padded_inputs(scale=0.7)
    attn = PerformerAttention(head_dim=D, features=M, seed=0)
    assert_close(attn.naive(q, k, v, mask)[0, :, :30], attn(q, k, v, mask)[0, :, :30], ratio=1e-5)
    assert_close(attn.naive(q, k, v, mask)[1], attn(q, k, v, mask)[1], ratio=1e-5)


def test_chunked_key_shift_is_the_max_over_real_keys():
    _, k, _, mask = padded_inputs()
    projection = PerformerAttention(head_dim=D, features=M, seed=0).projection
    _, projected = softmax_log_features(k, projection)
    expected = key_shift(projected, mask, projection, causal=False)  # (B, H, 1, 1)
    got = key_shift_chunked(k, projection, mask, chunk_bytes=SMALL_CHUNKS)
    assert_close(expected.reshape(-1), got.reshape(-1), ratio=1e-6)
    none_real = torch.zeros(B, N, dtype=torch.bool)
    assert (key_shift_chunked(k, projection, none_real) == 0).all()


def test_autograd_keeps_no_per_token_features():
    """Saved for backward: q, k, [v, 1], the state, output, denominator; nothing of width m per token."""
    n, m = 512, 256
    q, k, v = (torch.randn(1, 2, n, D, requires_grad=True) for _ in range(3))
    attn = PerformerAttention(head_dim=D, features=m, seed=0)
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        attn(q, k, v)
    assert shapes, "nothing saved: the path is not differentiable"
    assert all(s[-2:] != (n, m) for s in shapes), shapes


def test_bf16_autocast_output_dtype_as_the_stored_path():
    q, k, v, mask = padded_inputs(scale=0.5)
    attn = PerformerAttention(head_dim=D, features=M, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
        ref = stored(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn.projection, mask, "softmax")
    assert out.dtype == ref.dtype == torch.bfloat16
    assert_close(ref.float(), out.float(), ratio=1e-2)
