"""Softmax: the per-sequence CPU path equals the masked SDPA on real tokens, values and gradients."""

import torch
import torch.nn.functional as F

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
