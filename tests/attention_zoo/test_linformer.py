"""Linformer: the projected softmax against a hand computation, identity projections, options."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo import _recomputed_softmax
from attention_zoo._attention_dropout import attention_dropout, dropout_seed
from attention_zoo.softmax import naive_softmax
from tests.conftest import assert_close, random_qkv_mask

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"


def build(max_len=32, **opts):
    return attention_zoo.build("linformer", head_dim=8, num_heads=2, max_len=max_len, **opts)


def test_projected_softmax_by_hand():
    attn = build(proj_dim=5)
    q, k, v = torch.randn(3, 1, 2, 20, 8).unbind(0)
    mask = torch.ones(1, 20, dtype=torch.bool)
    mask[0, 14:] = False
    out = attn(q, k, v, mask)
    for h in range(2):
        e, f = attn.proj_k[h, :, :14], attn.proj_v[h, :, :14]  # pads contribute nothing
        keys, values = e @ k[0, h, :14], f @ v[0, h, :14]
        weights = torch.softmax(q[0, h] @ keys.T / 8**0.5, dim=-1)
        assert_close(weights @ values, out[0, h], ratio=1e-6)


def test_identity_projections_give_softmax_attention():
    attn = build(max_len=16, proj_dim=16)
    with torch.no_grad():
        attn.proj_k.copy_(torch.eye(16))
        attn.proj_v.copy_(torch.eye(16))
    q, k, v = torch.randn(3, 2, 2, 16, 8).unbind(0)
    assert_close(naive_softmax(q, k, v), attn(q, k, v), ratio=1e-6)


def test_shared_kv_uses_one_matrix():
    attn = build(share_kv=True)
    e, f = attn.projections()
    assert e is f and attn.proj_v is None
    assert sum(p.numel() for p in attn.parameters()) == 2 * 256 * 32


def test_options_are_validated_and_yaml_lists_the_defaults():
    with pytest.raises(ValueError, match="max_len"):
        attention_zoo.build("linformer", head_dim=8, num_heads=2)
    with pytest.raises(ValueError, match="causal"):
        build(causal=True)
    with pytest.raises(ValueError, match="max_len=32"):
        build()(*torch.randn(3, 1, 2, 40, 8).unbind(0))
    conf = yaml.safe_load((CONF / "linformer.yaml").read_text())
    assert conf.pop("name") == "linformer"
    assert conf == attention_zoo.options("linformer")


def dense_linformer(attn, q, k, v, mask, p, seed):
    """Autograd through the unblocked form, the ``n x k`` weights dropped as the module names them."""
    n = q.shape[-2]
    real = mask[:, None, :, None].float()
    e, f = (x[:, :, :n] for x in attn.projections())
    probs = torch.softmax((q.float() @ (e @ (k.float() * real)).transpose(-1, -2)) * q.shape[-1] ** -0.5, -1)
    if seed is not None:
        probs = attention_dropout(probs, p, seed, torch.arange(n)[:, None], torch.arange(attn.proj_dim))
    return probs @ (f @ (v.float() * real))


@pytest.mark.parametrize("block_bytes", [1, 5000, 2**30])
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_blocked_recomputing_form_matches_autograd_outputs_gradients_and_masks(monkeypatch, block_bytes, p):
    monkeypatch.setattr(_recomputed_softmax, "BLOCK_BYTES", block_bytes)  # 1: one query row per block
    attn = build(max_len=24, proj_dim=6, dropout=p).train()
    q, k, v, mask = random_qkv_mask(2, 2, 21, 8, real=15)
    inputs = [t.double().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(3)
    out = attn(*inputs, mask)
    torch.manual_seed(3)
    ref = dense_linformer(attn, *inputs, mask, p, dropout_seed() if p else None)
    assert_close(ref, out, ratio=1e-6)
    grad = torch.randn_like(ref)
    params = [*inputs, attn.proj_k, attn.proj_v]
    for name, want, got in zip("q k v E F".split(), torch.autograd.grad(ref, params, grad),
                               torch.autograd.grad(out, params, grad)):
        assert_close(want, got, ratio=1e-5, what=name)
