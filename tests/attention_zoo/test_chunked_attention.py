"""The fused chunked kernel attention with BASED's and PolySketchFormer's feature maps, against their oracles."""

from __future__ import annotations

from functools import partial

import pytest
import torch

import attention_zoo
from attention_zoo._chunk_maps import square_map, taylor_map
from attention_zoo._chunked_attention import active_groups, chunked_kernel_attention, permute_batch
from attention_zoo._sketch import ChunkSketch, naive_polynomial_sketch
from attention_zoo.based import naive_based
from attention_zoo.kernel import naive_kernel_attention, values_and_ones
from attention_zoo.polysketch import naive_polysketch
from tests.conftest import assert_close, random_qkv_mask

B, H, N, D, R = 2, 3, 11, 5, 4


def inputs(b: int = B, n: int = N):
    q, k, v, mask = random_qkv_mask(b, H, n, D, real=n - 3)
    params = {"taylor": torch.randn(H, D, R), "sketch": torch.randn(H, 1, 2, D, R), "identity": None}
    return [t.double() for t in (q, k, v)], mask, {name: p if p is None else p.double() for name, p in params.items()}


def fused(name: str, q, k, v, mask, param_q, param_k, chunk_bytes: int, skip: bool = False):
    """The fused form: BASED's Taylor map of ``x W``, the symmetric square of a sketch or of the input; ``skip``:
    the mask goes in too, so chunks past each sequence's end are skipped."""
    v1 = values_and_ones(v, mask)
    skipped = mask if skip else None
    if name == "taylor":
        return chunked_kernel_attention(q, k, v1, param_q[:, None, None], param_k[:, None, None], taylor_map,
                                        eps=1e-12, chunk_bytes=chunk_bytes, key_padding_mask=skipped)
    return chunked_kernel_attention(q, k, v1, param_q, param_k, square_map, eps=1.0,
                                    chunk_bytes=chunk_bytes, key_padding_mask=skipped)


def oracle(name: str, q, k, v, mask, param_q, param_k):
    """The quadratic oracles of ``based.py`` and ``polysketch.py`` (per-factor sketch)."""
    if name == "taylor":
        return naive_based(q, k, v, param_q, param_k, mask)
    if name == "sketch":
        q, k = naive_polynomial_sketch(q, param_q, False), naive_polynomial_sketch(k, param_k, False)
    return naive_polysketch(q, k, v, mask)


def one_token(name: str, b: int = B) -> int:
    """``chunk_bytes`` of one float64 token: the widest per-token buffer is phi (m numbers)."""
    return b * H * 8 * (1 + R + R * R if name == "taylor" else R * R)


@pytest.mark.parametrize("name", ["taylor", "sketch", "identity"])
@pytest.mark.parametrize("chunking", ["one token", "uneven", "whole"])
def test_values_and_gradients_match_the_oracle(name, chunking):
    (q, k, v), mask, params = inputs()
    param = params[name]
    param_k = None if param is None else param + 0.5 * torch.randn_like(param)  # separate query and key maps
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    refs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    if param is not None:
        leaves += [t.clone().requires_grad_(True) for t in (param, param_k)]
        refs += [t.clone().requires_grad_(True) for t in (param, param_k)]
    chunk_bytes = {"one token": 1, "uneven": 4, "whole": 1000}[chunking] * one_token(name)
    out = fused(name, *leaves[:3], mask, *(leaves[3:] or [None, None]), chunk_bytes)
    ref = oracle(name, *refs[:3], mask, *(refs[3:] or [None, None]))
    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    assert_close(ref, out, ratio=1e-12)
    for a, b, what in zip(refs, leaves, ["q", "k", "v", "param q", "param k"]):
        assert_close(a.grad, b.grad, ratio=1e-12, what=f"grad {what}")


@pytest.mark.parametrize("name", ["taylor", "sketch", "identity"])
def test_gradcheck_on_tiny_shapes(name):
    (q, k, v), mask, params = inputs(b=1, n=5)
    param = params[name]
    leaves = [t.requires_grad_(True) for t in (q, k, v)] + ([] if param is None else [param.requires_grad_(True)])

    def fn(*args):
        p = args[3] if len(args) > 3 else None
        return fused(name, *args[:3], mask, p, p, chunk_bytes=2 * one_token(name, b=1))  # chunks of 2 tokens

    assert torch.autograd.gradcheck(fn, leaves)


def test_active_groups_follow_the_sequences_still_running():
    chunks = [slice(s, min(s + 3, 10)) for s in range(0, 10, 3)]  # 0-3, 3-6, 6-9, 9-10
    assert active_groups(chunks, None, 4) == [(4, chunks)]
    assert active_groups(chunks, [10, 7, 3, 1], 4) == [(4, chunks[:1]), (2, chunks[1:3]), (1, chunks[3:])]
    assert active_groups(chunks, [5, 2], 2) == [(2, chunks[:1]), (1, chunks[1:2])]  # nothing past token 5


def test_permute_batch_gathers_forward_and_its_gradient_is_the_inverse_gather():
    order = torch.tensor([2, 0, 3, 1])
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    y = permute_batch(x, order, torch.argsort(order))
    assert torch.equal(y, x.detach()[order])
    assert torch.autograd.gradcheck(lambda t: permute_batch(t, order, torch.argsort(order)), (x,))


@pytest.mark.parametrize("name", ["taylor", "sketch", "identity"])
@pytest.mark.parametrize("order", ["shuffled", "longest first"])
def test_skipping_the_padding_keeps_real_outputs_and_every_gradient(name, order):
    """With the mask given, chunks past each sequence's end are skipped; real outputs and all gradients are those of the
    full computation, and padded keys still get no gradient."""
    lengths = torch.tensor([5, 13, 2, 9] if order == "shuffled" else [13, 9, 5, 2])
    b, n = len(lengths), int(lengths.max())
    q, k, v = (torch.randn(b, H, n, D, dtype=torch.float64) for _ in range(3))
    mask = torch.arange(n) < lengths[:, None]
    param = inputs()[2][name]
    params = [] if param is None else [param, param + 0.5 * torch.randn_like(param)]
    chunk_bytes = 2 * one_token(name, b)  # chunks of 2 tokens: sequences end inside chunks and between them
    runs = []
    for skip in (False, True):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, *params)]
        out = fused(name, *leaves[:3], mask, *(leaves[3:] or [None, None]), chunk_bytes, skip=skip)
        (out * mask[:, None, :, None] * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        runs.append((out, [t.grad for t in leaves]))
    (full, full_grads), (skipped, grads) = runs
    real = mask[:, None, :, None]
    assert_close(full * real, skipped * real, ratio=1e-12)
    for a, g, what in zip(full_grads, grads, ["q", "k", "v", "param q", "param k"]):
        assert_close(a, g, ratio=1e-12, what=f"grad {what}")
    assert not grads[1].mul(~real).ne(0).any()  # padded keys: no gradient
    shortest = int(lengths.argmin())  # 2 tokens: every later chunk is skipped, so its padded queries get 0
    assert not skipped[shortest, :, 2:].any() and bool(full[shortest, :, 2:].ne(0).any())


MODULES = {"based": ("based", {}), "polysketch": ("polysketch", {}),
           "polysketch learned": ("polysketch", {"sketch": "learned", "sketch_size": 6})}


@pytest.mark.parametrize("module", MODULES)
def test_module_outputs_and_all_gradients_match_its_oracle(module):
    name, opts = MODULES[module]
    attn = attention_zoo.build(name, head_dim=8, num_heads=2, **opts).double()
    with torch.no_grad():  # LayerNorm away from its identity initialisation
        for p in attn.parameters():
            p.add_(0.1 * torch.randn_like(p))
    q, k, v, mask = (t.double() if t.is_floating_point() else t for t in random_qkv_mask(h=2))
    results = []
    for run in (attn.naive, attn):
        attn.zero_grad()
        qkv = [t.clone().requires_grad_(True) for t in (q, k, v)]
        out = run(*qkv, mask)
        out.pow(2).sum().backward()
        grads = {name: p.grad.clone() for name, p in attn.named_parameters()}
        results.append((out, grads | {f"grad {x}": t.grad for x, t in zip("qkv", qkv)}))
    (ref, ref_grads), (out, grads) = results
    assert_close(ref, out, ratio=1e-12, what=module)
    assert ref_grads.keys() == grads.keys() and len(grads) > 3
    for what in grads:
        assert_close(ref_grads[what], grads[what], ratio=1e-10, what=what)


@pytest.mark.parametrize("name", ["based", "polysketch"])
def test_fused_keeps_no_feature_sized_tensor_for_backward(name):
    """Memory O(N d): nothing of size N x m (BASED m = 273, PolySketch m = 1024 > d + 1 = 9) is saved."""
    b, h, n, d = 2, 2, 1024, 8  # the (m, D + 1) states are smaller than N (d + 1)
    attn = attention_zoo.build(name, head_dim=d, num_heads=h)
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        attn(q, k, v, torch.ones(b, n, dtype=torch.bool))
    assert max(saved) <= b * h * n * (d + 1) < b * h * n * 273


def test_llops_skipping_with_its_per_query_eps_matches_its_oracle(monkeypatch):
    """LLoPS passes a per-query ``eps`` tensor; with unsorted lengths (one of them 0), non-contiguous inputs (the
    encoder's head split) and chunks of 2 tokens, real tokens' outputs and every gradient match the oracle."""
    import attention_zoo._chunked_attention as engine

    monkeypatch.setitem(engine.chunked_kernel_attention.__kwdefaults__, "chunk_bytes", 2 * 4 * 2 * 8 * 2 * 8)
    attn = attention_zoo.build("llops", head_dim=4, num_heads=2, degree=2, features=8).double()
    lengths = torch.tensor([5, 13, 0, 9])
    b, n = len(lengths), int(lengths.max())
    mask = torch.arange(n) < lengths[:, None]
    parts = torch.randn(b, n, 3, 2, 4, dtype=torch.float64)
    real = mask[:, None, :, None]
    weights = torch.randn(b, 2, n, 4, dtype=torch.float64) * real
    results = []
    for run in (attn.naive, attn):
        attn.zero_grad()
        leaf = parts.clone().requires_grad_(True)
        q, k, v = leaf.permute(2, 0, 3, 1, 4)  # each (B, H, N, d), not contiguous
        out = run(q, k, v, mask)
        (out * weights).sum().backward()
        results.append((out * real, leaf.grad, [p.grad.clone() for p in attn.parameters()]))
    (ref, ref_grad, ref_params), (out, grad, params) = results
    assert_close(ref, out, ratio=1e-12)
    assert_close(ref_grad, grad, ratio=1e-10, what="grad q, k, v")
    for a, g in zip(ref_params, params, strict=True):
        assert_close(a, g, ratio=1e-10, what="grad theta")


def test_head_major_sketch_with_several_factors_terms_and_length_groups_matches_the_oracle():
    """``ChunkSketch`` (squared, t = 2 terms of p = 3 factors) under shuffled lengths and chunks that end inside
    sequences: outputs and the gradients of q, k, v and both Thetas against the naive sketch and weight matrix."""
    lengths = torch.tensor([5, 11, 8])
    b, n = len(lengths), int(lengths.max())
    mask = torch.arange(n) < lengths[:, None]
    q, k, v = (torch.randn(b, H, n, D, dtype=torch.float64) for _ in range(3))
    thetas = [0.5 * torch.randn(H, 2, 3, D, 5, dtype=torch.float64) for _ in range(2)]
    real = mask[:, None, :, None]
    results = []
    for fast in (True, False):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, *thetas)]
        if fast:
            out = chunked_kernel_attention(*leaves[:2], values_and_ones(leaves[2], mask), *leaves[3:],
                                           partial(ChunkSketch, square=True), eps=1e-6, chunk_bytes=b * H * 8 * 30 * 3,
                                           key_padding_mask=mask)
        else:
            phi_q, phi_k = (naive_polynomial_sketch(x, t, True) for x, t in zip(leaves[:2], leaves[3:]))
            out = naive_kernel_attention(phi_q, phi_k, leaves[2], mask, eps=1e-6)
        (out * real * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append([out * real] + [t.grad for t in leaves])
    for a, g, what in zip(*results, ["out", "q", "k", "v", "theta q", "theta k"]):
        assert_close(a, g, ratio=1e-10, what=what)
