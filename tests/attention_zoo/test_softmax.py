"""Softmax: the per-sequence CPU path equals the masked SDPA on real tokens, values and gradients; with dropout on
the CPU, the recomputed blocks equal autograd through the explicit weights times the same 16-bit masks."""

import pytest
import torch
import torch.nn.functional as F

from attention_zoo import _recomputed_softmax as recomputed_softmax
from attention_zoo.dropout_masks import apply_mask, effective_p, keep_mask, keep_scale
from attention_zoo.softmax import SoftmaxAttention, naive_softmax, prefix_lengths


def masked_sdpa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])


def test_per_sequence_path_matches_masked_sdpa_on_real_tokens():
    torch.manual_seed(0)
    lengths = torch.tensor([37, 50, 1, 23])
    mask = torch.arange(50)[None] < lengths[:, None]
    q, k, v = (torch.randn(4, 2, 50, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    upstream = torch.randn(4, 2, 50, 8, dtype=torch.float64) * mask[:, None, :, None]
    grads = []
    for fn in (SoftmaxAttention(), masked_sdpa):
        out = fn(q, k, v, mask)
        (out * upstream).sum().backward()
        grads.append((out * mask[:, None, :, None], *(t.grad.clone() for t in (q, k, v))))
        for t in (q, k, v):
            t.grad = None
    for ours, ref in zip(*grads):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    padded_rows = SoftmaxAttention()(q, k, v, mask)[~mask[:, None, :].expand(-1, 2, -1)]
    assert padded_rows.abs().max() == 0


def test_a_mask_that_is_not_a_prefix_takes_the_masked_path():
    torch.manual_seed(1)
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[0, 3] = False  # a hole: not real-then-padding
    assert prefix_lengths(mask) is None
    q, k, v = (torch.randn(2, 2, 12, 4) for _ in range(3))
    keep = mask[:, None, :].expand(-1, 2, -1)
    torch.testing.assert_close(SoftmaxAttention()(q, k, v, mask)[keep], naive_softmax(q, k, v, mask)[keep])


def test_dropout_on_the_per_sequence_path_drops_weights_of_real_tokens_only():
    torch.manual_seed(2)
    lengths = torch.tensor([40, 64, 9])
    mask = torch.arange(64)[None] < lengths[:, None]
    q, k = (torch.randn(3, 2, 64, 8) for _ in range(2))
    v = torch.randn(3, 2, 64, 8) * mask[:, None, :, None] + 1e6 * ~mask[:, None, :, None]  # pads' values huge
    attention = SoftmaxAttention(dropout=0.3).train()
    keep = mask[:, None, :].expand(-1, 2, -1)
    plain = naive_softmax(q, k, v, mask)[keep]
    draws = torch.stack([attention(q, k, v, mask) for _ in range(400)])
    assert draws[:, ~keep].abs().max() == 0  # padded rows stay zero
    assert draws[:, keep].abs().max() < 1e3  # no pad's value leaks into a real row
    assert (draws[0][keep] - plain).abs().mean() > 0.05 * plain.abs().mean()  # one draw is off
    mean = draws.mean(0)[keep]
    assert (mean - plain).norm() < 0.1 * plain.norm()  # the average draw is the plain output
    assert torch.equal(attention.eval()(q, k, v, mask)[keep], SoftmaxAttention()(q, k, v, mask)[keep])


def explicit_dropped(q, k, v, lengths, p):
    """Autograd through the explicit weights times the keep masks, drawn as the attention draws them: one a
    sequence at its length (``lengths``), or one for the whole batch (``lengths`` None)."""
    if lengths is None:
        weights = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).softmax(-1)
        return apply_mask(weights, keep_mask(weights.shape, p, q.device), keep_scale(p)) @ v
    out = q.new_zeros(q.shape)
    for i, n in enumerate(lengths):
        s = slice(i, i + 1)
        out[s, :, :n] = explicit_dropped(q[s, :, :n], k[s, :, :n], v[s, :, :n], None, p)
    return out


@pytest.mark.parametrize("padded", [True, False])
def test_cpu_dropout_is_the_explicit_weights_times_the_drawn_masks_values_and_gradients(padded, monkeypatch):
    """The recomputed-block path (several blocks of rows here) against autograd through ``apply_mask(P) v``."""
    monkeypatch.setattr(recomputed_softmax, "BLOCK_BYTES", 2 * 2 * 40 * 8)  # 5 rows a block (float64)
    torch.manual_seed(4)
    lengths = [37, 50, 1, 23] if padded else [50] * 4
    mask = torch.arange(50)[None] < torch.tensor(lengths)[:, None]
    q, k, v = (torch.randn(4, 2, 50, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    upstream = torch.randn(4, 2, 50, 8, dtype=torch.float64) * mask[:, None, :, None]
    attention = SoftmaxAttention(dropout=0.3).train()
    results = []
    ours = lambda: attention(q, k, v, mask if padded else None)  # noqa: E731
    explicit = lambda: explicit_dropped(q, k, v, lengths if padded else None, 0.3)  # noqa: E731
    for fn in (ours, explicit):
        torch.manual_seed(9)
        out = fn()
        (out * upstream).sum().backward()
        results.append((out, *(t.grad.clone() for t in (q, k, v))))
        for t in (q, k, v):
            t.grad = None
    for ours, ref in zip(*results):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    assert not torch.equal(results[0][0], SoftmaxAttention()(q, k, v, mask))  # weights were dropped


def test_cpu_dropout_keeps_1_minus_p_of_the_weights():
    """With ``v`` the identity, the output is the dropped weights themselves: 0 where dropped."""
    torch.manual_seed(6)
    n = 256
    q, k = (torch.randn(1, 2, n, 8) for _ in range(2))
    eye = torch.eye(n).expand(1, 2, n, n)
    out = SoftmaxAttention(dropout=0.25).train()(q, k, eye)
    dropped = (out == 0).double().mean().item()
    assert abs(dropped - effective_p(0.25)) < 4 * (0.25 * 0.75 / out.numel()) ** 0.5
    plain = naive_softmax(q, k, eye)
    torch.testing.assert_close(out[out != 0], plain[out != 0] * keep_scale(0.25))
