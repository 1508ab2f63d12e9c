"""The attention contract (docs/design.md section 3), checked for every registered mechanism."""

from __future__ import annotations

import pytest
import torch

import attention_zoo
from tests.conftest import assert_close

B, H, D = 2, 2, 16


def make(name: str, max_len: int = 128, **opts):
    """The mechanism with its ``contract_options`` (small blocks, windows, landmarks) so tests see its structure."""
    torch.manual_seed(1)
    small = getattr(attention_zoo.get(name), "contract_options", {})
    return attention_zoo.build(name, head_dim=D, num_heads=H, max_len=max_len, **{**small, **opts}).eval()


def extras(attn, like: torch.Tensor) -> dict[str, torch.Tensor]:
    """Random tensors for the mechanism's declared extra inputs (block-level parts such as a gate)."""
    return {name: torch.randn_like(like) for name in attention_zoo.extra_inputs(attn)}


def inputs(n: int, scale: float = 1.0, dtype=torch.float32):
    q, k, v = (scale * torch.randn(3, B, H, n, D)).to(dtype).unbind(0)
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[1, n - n // 3:] = False  # second sequence is padded
    return q, k, v, mask


@pytest.mark.parametrize("name", attention_zoo.available())
def test_shape_finite_and_gradients(name):
    attn = make(name)
    q, k, v, mask = inputs(48)
    more = extras(attn, q)
    for t in (q, k, v, *more.values()):
        t.requires_grad_(True)
    out = attn(q, k, v, key_padding_mask=mask, **more)
    assert out.shape == v.shape and out.dtype == v.dtype
    assert torch.isfinite(out).all()
    (out * mask[:, None, :, None]).square().sum().backward()
    for t in (q, k, v, *more.values()):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert t.grad.abs().sum() > 0
    for p in attn.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


@pytest.mark.parametrize("name", attention_zoo.available())
def test_padding_invariance(name):
    """Real tokens' outputs are the same with 0 and with 37 extra pad tokens (pads hold garbage)."""
    attn = make(name)
    n, extra = 40, 37
    q, k, v, _ = inputs(n)
    mask = torch.ones(B, n, dtype=torch.bool)
    more = extras(attn, q)
    ref = attn(q, k, v, key_padding_mask=mask, **more)
    junk = lambda t: torch.cat([t, 5 * torch.randn(B, H, extra, D)], dim=2)  # noqa: E731
    padded_mask = torch.cat([mask, torch.zeros(B, extra, dtype=torch.bool)], dim=1)
    out = attn(junk(q), junk(k), junk(v), key_padding_mask=padded_mask, **{n_: junk(t) for n_, t in more.items()})
    assert_close(ref, out[:, :, :n], ratio=1e-4, what=name)


@pytest.mark.parametrize("name", attention_zoo.available())
@pytest.mark.parametrize("n", [1, 40])
def test_one_real_token_matches_the_oracle(name, n):
    """The shortest example the importers let through (``tests/data_prep/test_empty_examples.py``): one real token, the
    rest of its row padding, beside a longer sequence (n = 1: a batch of single tokens). Outputs at real positions
    are finite and equal the oracle's, the gradients finite."""
    attn = make(name)
    q, k, v, _ = inputs(n)
    mask = torch.zeros(B, n, dtype=torch.bool)
    mask[0, 0] = True
    mask[1, : (n + 1) // 2] = True
    more = extras(attn, q)
    for t in (q, k, v, *more.values()):
        t.requires_grad_(True)
    out = attn(q, k, v, key_padding_mask=mask, **more)
    with torch.no_grad():
        ref = attn.naive(q, k, v, key_padding_mask=mask, **more)
    real = mask[:, None, :].expand(B, H, -1)
    assert torch.isfinite(ref[real]).all(), f"{name}: the oracle is not finite"
    assert_close(ref[0, :, 0], out[0, :, 0], ratio=1e-4, what=f"{name} the one real token")
    assert_close(ref[real], out[real], ratio=1e-4, what=f"{name} every real token")
    (out * mask[:, None, :, None]).square().sum().backward()
    for t in (q, k, v, *more.values()):
        assert t.grad is not None and torch.isfinite(t.grad).all(), name
    for p in attn.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("name", attention_zoo.available())
def test_fast_matches_naive_oracle(name):
    """Outputs and gradients of the fast form equal the quadratic oracle that builds the n x n weights: the
    gradients of q, k, v, the extra inputs and the mechanism's own parameters (feature maps, sort nets, ...)."""
    attn = make(name)
    q, k, v, mask = inputs(40)
    more = extras(attn, q)
    grads = []
    outs = []
    upstream = torch.randn_like(v)
    params = dict(attn.named_parameters())
    for fn in (attn.naive, attn):
        attn.zero_grad(set_to_none=True)
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        ee = {n_: t.clone().requires_grad_(True) for n_, t in more.items()}
        out = fn(qq, kk, vv, key_padding_mask=mask, **ee)
        (out * upstream * mask[:, None, :, None]).sum().backward()
        outs.append(out[mask[:, None, :].expand(B, H, -1)])
        grads.append([t.grad for t in (qq, kk, vv, *ee.values())]
                     + [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params.values()])
    assert_close(outs[0], outs[1], ratio=1e-4, what=f"{name} output")
    for g_ref, g_out, label in zip(grads[0], grads[1], ["q", "k", "v", *more, *params]):
        assert_close(g_ref, g_out, ratio=1e-3, what=f"{name} d{label}")


@pytest.mark.parametrize("name", attention_zoo.available())
def test_every_mechanism_declares_whether_its_cost_is_quadratic(name):
    """``quadratic`` (like ``supports_causal``): benchmarks read it from the class, never from a list of names."""
    assert isinstance(attention_zoo.get(name).__dict__.get("quadratic"), bool), f"{name} declares no quadratic"


@pytest.mark.parametrize("name", attention_zoo.available())
def test_causal_matches_masked_oracle_or_refuses(name):
    cls = attention_zoo.get(name)
    if not getattr(cls, "supports_causal", False):
        with pytest.raises(ValueError, match="causal"):
            make(name, causal=True)
        return
    attn = make(name, causal=True, **({"chunk_size": 16} if "chunk_size" in attention_zoo.options(name) else {}))
    q, k, v, mask = inputs(50)  # 50 is not a multiple of the chunk
    out = attn(q, k, v, key_padding_mask=mask)
    ref = attn.naive(q, k, v, key_padding_mask=mask)
    keep = mask[:, None, :].expand(B, H, -1)
    assert_close(ref[keep], out[keep], ratio=1e-4, what=f"{name} causal")
    # the future cannot leak: changing the last token leaves earlier outputs unchanged
    k2, v2 = k.clone(), v.clone()
    k2[:, :, -1] += 3.0
    v2[:, :, -1] -= 3.0
    out2 = attn(q, k2, v2)
    out1 = attn(q, k, v)
    assert_close(out1[:, :, :-1], out2[:, :, :-1], ratio=1e-5, what=f"{name} causality")


@pytest.mark.parametrize("name", attention_zoo.available())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_length_16k_is_finite(name, dtype):
    """No NaN/Inf at n = 16384 in fp32 and under bf16 autocast, for inputs of scale 1 and 3."""
    n = 16384
    attn = make(name, max_len=n)
    mask = torch.ones(1, n, dtype=torch.bool)
    mask[0, n - 1000:] = False
    for scale in (1.0, 3.0):
        q, k, v = (scale * torch.randn(3, 1, H, n, D)).unbind(0)
        if dtype is torch.bfloat16:
            q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is torch.bfloat16):
            out = attn(q, k, v, key_padding_mask=mask)
        assert torch.isfinite(out.float()).all(), f"{name} scale {scale}"


@pytest.mark.parametrize("name", attention_zoo.available())
def test_large_inputs_are_finite(name):
    """Inputs of scale 1e4 in fp32: output, gradients and oracle finite (LLoPS' degree-8 features overflowed)."""
    attn = make(name)
    q, k, v, mask = inputs(48, scale=1e4)
    for t in (q, k, v):
        t.requires_grad_(True)
    out = attn(q, k, v, key_padding_mask=mask)
    assert torch.isfinite(out).all()
    (out * mask[:, None, :, None]).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    with torch.no_grad():
        assert torch.isfinite(attn.naive(q, k, v, key_padding_mask=mask)).all()


def test_unknown_name_and_option_list_valid_choices():
    with pytest.raises(ValueError, match="valid names: .*llops.*softmax"):
        attention_zoo.build("nope", head_dim=D, num_heads=H)
    with pytest.raises(ValueError, match="valid options: .*degree=4"):
        attention_zoo.build("llops", head_dim=D, num_heads=H, degre=3)


def test_available_is_sorted_and_has_the_first_slice():
    names = attention_zoo.available()
    assert names == sorted(names)
    assert {"softmax", "linear", "based", "llops"} <= set(names)


def second_derivatives(fn, q, k, v, mask, more, upstream):
    """d/d(q, k, v) of <dL/dq, w> for L = <out, upstream>: what gradient penalties and meta-learning compute."""
    qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
    out = fn(qq, kk, vv, key_padding_mask=mask, **more)
    (grad_q,) = torch.autograd.grad((out * upstream).sum(), qq, create_graph=True)
    if not grad_q.requires_grad:  # the output is linear in q or ignores it (synthesizer's random weights)
        return None, None, None
    return torch.autograd.grad((grad_q * upstream).sum(), (qq, kk, vv), allow_unused=True)


@pytest.mark.parametrize("name", attention_zoo.available())
def test_second_derivatives_match_the_oracle_or_are_refused(name):
    """A hand-written backward either differentiates correctly again or refuses (``first_order_only``): a second
    derivative is never silently wrong."""
    attn = make(name)
    q, k, v, mask = inputs(24)
    more = extras(attn, q)
    upstream = torch.randn_like(v) * mask[:, None, :, None]
    ref = second_derivatives(attn.naive, q, k, v, mask, more, upstream)
    try:
        ours = second_derivatives(attn, q, k, v, mask, more, upstream)
    except RuntimeError as err:  # refused, by name: no second derivative rather than a wrong one
        assert "first-order backward" in str(err) or "not implemented" in str(err), f"{name}: {err}"
        return
    for r, o, label in zip(ref, ours, "qkv"):
        if r is None or o is None:
            assert (r is None or not r.abs().sum()) and (o is None or not o.abs().sum()), f"{name} d2/d{label}"
            continue
        assert_close(r, o, ratio=1e-3, what=f"{name} d2/d{label}")
