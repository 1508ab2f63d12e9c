"""Parity with the pip packages the papers or the LRA ports published (the ``test`` extra installs them).

Weights and random draws are copied from our modules into the references (``benchmarks.parity``
wires each pair); outputs and gradients must agree to float32 precision on unpadded input. Where we differ
on padded input, the mechanism's docstring says why.
"""

from __future__ import annotations

import pytest
import torch

from attention_zoo.sinkhorn import sinkhorn
from benchmarks import parity

H, D = 2, 16
TOL = 1e-5  # relative error of outputs and gradients (float32 rounding is ~1e-7)


def check(make, n: int, batch: int = 2, **options) -> None:
    pair = make(num_heads=H, head_dim=D, n=n, seed=0, **options)
    x = torch.randn(batch, n, pair.parts * H * D)
    errors = parity.compare(pair, x)
    assert errors["output"] < TOL and errors["grad"] < TOL, errors


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_performer_matches_performer_pytorch_fast_attention(kernel):
    """performer_pytorch.FastAttention with our projection: softmax_kernel's stabiliser, or ReLU + 1e-3."""
    pytest.importorskip("performer_pytorch")
    check(parity._performer(kernel), n=96, features=64)


def test_performer_matches_at_large_query_norms():
    """The +1e-4 after the stabiliser weighs most where |q'|^2 / 2 is large: inputs of scale 3."""
    pytest.importorskip("performer_pytorch")
    pair = parity._performer("softmax")(num_heads=H, head_dim=D, n=64, seed=1, features=64)
    errors = parity.compare(pair, 3 * torch.randn(2, 64, 3 * H * D))
    assert errors["output"] < TOL and errors["grad"] < TOL, errors


def test_linformer_matches_the_linformer_package():
    """linformer.LinformerSelfAttention (E, F of size n x k shared by the heads, copied into ours)."""
    pytest.importorskip("linformer")
    check(parity._linformer, n=96, proj_dim=16)


def test_local_matches_local_attention_without_look_around():
    """local_attention.LocalAttention(window_size=b, look_backward=0, look_forward=0): block-diagonal."""
    pytest.importorskip("local_attention")
    check(parity._local, n=96, block_size=16)


def test_sinkhorn_attention_matches_sinkhorn_transformer_given_our_sorting_matrix():
    """sinkhorn_transformer.SinkhornAttention with our sort net, values = keys (its values bug)."""
    pytest.importorskip("sinkhorn_transformer")
    check(parity._sinkhorn, n=96, block_size=16)


def test_sinkhorn_rounds_match_sinkhorn_sorting_operator():
    """7 fixed rounds equal the package's operator; to tolerance the result is doubly stochastic."""
    pytest.importorskip("sinkhorn_transformer")
    from sinkhorn_transformer.sinkhorn_transformer import sinkhorn_sorting_operator

    logits = 2 * torch.randn(3, 6, 6)
    real = torch.ones(1, 6, dtype=torch.bool)
    ours = sinkhorn(logits[None], real, iters=7)[0]
    assert parity.relative_error(sinkhorn_sorting_operator(logits, n_iters=7), ours) < TOL
    balanced = sinkhorn(logits[None], real, iters=500, tol=1e-5)[0]
    assert (balanced.sum(-1) - 1).abs().max() < 1e-5 and (balanced.sum(-2) - 1).abs().max() < 1e-5


def test_bigbird_matches_hugging_face_block_sparse_attention_with_our_random_blocks():
    """transformers BigBirdBlockSparseAttention (ITC: window 3, globals first/last, r random blocks)."""
    pytest.importorskip("transformers")
    check(parity._bigbird, n=160, block_size=16, random_blocks=2)


def test_reformer_matches_hugging_face_lsh_self_attention_with_our_rotations():
    """transformers LSHSelfAttention: unscaled unit shared keys, current + previous chunk, rounds by lse."""
    pytest.importorskip("transformers")
    check(parity._reformer, n=128, chunk_len=16, n_hashes=3)
    check(parity._reformer, n=96, chunk_len=16, n_hashes=1)


def test_reformer_matches_hugging_face_when_the_sequence_fits_one_chunk():
    """HF does plain shared-QK attention (no hashing) when n <= chunk_len."""
    pytest.importorskip("transformers")
    check(parity._reformer, n=32, chunk_len=32, n_hashes=2)


def test_nystrom_matches_hugging_face_nystromformer_self_attention():
    """transformers NystromformerSelfAttention (the authors' port): segment means, 6 Newton-Schulz steps."""
    pytest.importorskip("transformers")
    check(parity._nystrom, n=96, landmarks=16)


@pytest.mark.parametrize("num_global", [0, 1, 3])
def test_longformer_matches_hugging_face_longformer_self_attention(num_global):
    """transformers LongformerSelfAttention(attention_window=w): |i - j| <= w / 2, q / sqrt(d), the first
    tokens global; HF's second (global) projections read the same q, k, v, as ours has one set (docstring)."""
    pytest.importorskip("transformers")
    check(parity._longformer, n=96, window=16, num_global=num_global)
    check(parity._longformer, n=64, window=32, num_global=num_global)
