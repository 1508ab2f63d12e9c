"""MHLA: the registry form by hand and its link to the paper's V_h, Q_h model (``analyses._mhla_model``)."""

from __future__ import annotations

import pytest
import torch

import attention_zoo
from analyses._mhla_model import MHLA
from tests.conftest import assert_close, assert_within_rounding


def build(**opts):
    return attention_zoo.build("mhla", head_dim=4, num_heads=2, **opts)


@pytest.mark.parametrize("causal", [False, True])
def test_output_by_hand_with_padding(causal):
    """out_i = (1 / n_i) sum_{j real (, j <= i)} (q_i . k_j) v_j, n_i = number of those keys."""
    q, k, v = torch.randn(3, 2, 2, 7, 4, dtype=torch.float64).unbind(0)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 4:] = False
    out = build(causal=causal)(q, k, v, mask)
    for b in range(2):
        for i in range(7):
            keys = [j for j in range(7) if mask[b, j] and (j <= i or not causal)]
            expected = sum((q[b, :, i] * k[b, :, j]).sum(-1, keepdim=True) * v[b, :, j] for j in keys)
            magnitude = sum((q[b, :, i] * k[b, :, j]).abs().sum(-1, keepdim=True) * v[b, :, j].abs() for j in keys)
            # mhla computes in float32 even for float64 inputs (q.float()): float32 rounding of the casts of q, k,
            # v, a dot of 4, a sum over <= 7 keys, the count's division and the causal state's addition
            assert_within_rounding(expected / len(keys), out[b, :, i], magnitude / len(keys), roundings=3 + 4 + 7 + 2)


def test_scale_none_is_the_raw_sum_and_length_divides_by_it():
    q, k, v = torch.randn(3, 1, 2, 9, 4).unbind(0)
    raw = build(scale="none")(q, k, v)
    assert_close(q @ k.transpose(-1, -2) @ v, raw, ratio=1e-6)
    assert_close(raw / 9, build()(q, k, v), ratio=1e-6)
    causal = build(causal=True, chunk_size=4)(q, k, v)
    assert_close(raw[..., -1, :] / 9, causal[..., -1, :], ratio=1e-5)


def test_registry_form_on_projected_heads_is_the_papers_model():
    """q = (Q_h z)^T, k = z, v = V_h z per head, raw sums over heads: Y = sum_h V_h Z (Z^T Q_h Z)."""
    torch.manual_seed(0)
    d, heads, n = 4, 3, 6
    model = MHLA(d, heads)
    z = torch.randn(2, d, n)  # (B, d, n): tokens are columns
    tokens = z.transpose(-1, -2).unsqueeze(1)  # (B, 1, n, d)
    q = tokens @ model.queries.transpose(-1, -2)  # (B, H, n, d): row i is (Q_h z_i)^T
    v = tokens @ model.values.transpose(-1, -2)  # (B, H, n, d): row i is (V_h z_i)^T
    k = tokens.expand(-1, heads, -1, -1)
    # the registry form computes out_i = sum_j (q_i . k_j) v_j, the paper y_j = sum_i V_h z_i (z_i^T Q_h z_j)
    out = build(scale="none")(q, k, v)  # (B, H, n, d)
    assert_close(model(z), out.sum(dim=1).transpose(-1, -2), ratio=1e-5)


def test_bf16_autocast_computes_in_float32():
    q, k, v = torch.randn(3, 1, 2, 9, 4).unbind(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = build()(q, k, v)
    assert out.dtype == torch.float32
    assert_close(build()(q, k, v), out, ratio=1e-6)


def test_invalid_scale_names_the_valid_ones():
    with pytest.raises(ValueError, match="length, none"):
        build(scale="sqrt")
