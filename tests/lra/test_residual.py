"""The fused residual end ``x + dropout(linear(y))`` computes the modules' composition, outputs and gradients,
and keeps no more than autograd keeps."""

from __future__ import annotations

import pytest
import torch

from lra.dropout import Dropout, keep_mask, keep_scale
from lra.model import AttentionBlock
from lra.residual import _LinearDropoutAdd, linear_dropout_add
from tests.conftest import assert_close, assert_within_rounding, saved_bytes

CPU = torch.device("cpu")
D_IN, D_OUT = 24, 16


def layers(p: float, dtype: torch.dtype) -> tuple[torch.nn.Linear, Dropout]:
    torch.manual_seed(0)
    return torch.nn.Linear(D_IN, D_OUT).to(dtype), Dropout(p).train()


def fused_pass(x, y, linear, drop, grad, seed: int = 5):
    """Output and gradients (x, y, weight, bias) of the fused path with the masks drawn from ``seed``."""
    x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
    torch.manual_seed(seed)
    out = linear_dropout_add(x, y, linear, drop)
    return out.detach(), torch.autograd.grad(out, [x, y, linear.weight, linear.bias], grad)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_path_matches_the_composition_within_rounding(p, dtype):
    linear, drop = layers(p, dtype)
    x, grad = torch.randn(2, 3, 11, D_OUT, dtype=dtype).unbind(0)
    y = torch.randn(3, 11, D_IN, dtype=dtype) * 2 + 0.5
    out, (g_x, g_y, g_w, g_b) = fused_pass(x, y, linear, drop, grad)
    torch.manual_seed(5)  # the fused path draws exactly this mask, after its Linear (which draws nothing)
    kept = keep_mask(torch.Size([3, 11, D_OUT]), p, CPU) if p > 0 else torch.ones(3, 11, D_OUT, dtype=torch.bool)
    scale = keep_scale(p) if p > 0 else 1.0
    w, b = linear.weight.detach().double(), linear.bias.detach().double()
    keep = kept.double() * scale
    z, z_mag = y.double() @ w.t() + b, y.double().abs() @ w.abs().t() + b.abs()
    expected = x.double() + z * keep
    # the Linear's D_IN products and bias, the scale's cast, the product, the residual add
    assert_within_rounding(expected, out, x.double().abs() + z_mag * keep, D_IN + 4, dtype, what="output")
    g_z = grad.double() * keep
    flat_gz, flat_y = g_z.reshape(-1, D_OUT), y.double().reshape(-1, D_IN)
    tokens = flat_y.shape[0]
    assert_within_rounding(grad.double(), g_x, grad.double().abs(), 1, dtype, what="grad x")
    assert_within_rounding(g_z @ w, g_y, g_z.abs() @ w.abs(), D_OUT + 2, dtype, what="grad y")
    assert_within_rounding(flat_gz.t() @ flat_y, g_w, flat_gz.abs().t() @ flat_y.abs(), tokens + 2, dtype,
                           what="grad weight")
    assert_within_rounding(flat_gz.sum(0), g_b, flat_gz.abs().sum(0), tokens + 2, dtype, what="grad bias")


def test_fused_path_gradcheck():
    linear, _ = layers(0.3, torch.float64)
    x = torch.randn(2, 5, D_OUT, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, 5, D_IN, dtype=torch.float64, requires_grad=True)
    w, b = (t.detach().requires_grad_() for t in (linear.weight, linear.bias))

    def f(x, y, w, b):
        with torch.random.fork_rng():
            torch.manual_seed(9)  # the same mask on every call
            return _LinearDropoutAdd.apply(x, y, w, b, 0.3)

    assert torch.autograd.gradcheck(f, (x, y, w, b))


def test_fused_path_keeps_no_more_than_autograd():
    linear, drop = layers(0.1, torch.float32)
    x = torch.randn(4, 256, D_OUT, requires_grad=True)
    y = torch.randn(4, 256, D_IN, requires_grad=True)
    fused = saved_bytes(lambda: linear_dropout_add(x, y, linear, drop))
    modules = saved_bytes(lambda: x + drop(linear(y)))
    assert fused <= modules, (fused, modules)
    assert fused >= y.numel() * 4 + x.numel()  # y and a byte-per-element mask


def test_eval_and_no_grad_take_the_modules():
    linear, drop = layers(0.5, torch.float32)
    x, y = torch.randn(3, D_OUT), torch.randn(3, D_IN)
    drop.eval()
    with torch.no_grad():
        assert_within_rounding(x.double() + linear(y).double(), linear_dropout_add(x, y, linear, drop),
                               x.abs().double() + linear(y).abs().double(), 1)


def test_attention_block_output_runs_through_it():
    """The block's output is ``x + dropout(out(y))`` with the mask the fused function draws last."""

    class Identity(torch.nn.Module):
        def forward(self, q, k, v, key_padding_mask=None):
            return v

    torch.manual_seed(0)
    block = AttentionBlock(8, 2, Identity(), dropout=0.5).train()
    x = torch.randn(2, 6, 8)
    mask = torch.ones(2, 6, dtype=torch.bool)
    torch.manual_seed(4)
    out = block(x, mask)
    torch.manual_seed(4)
    kept = keep_mask(torch.Size([2, 6, 8]), 0.5, CPU)
    with torch.no_grad():
        v = block.qkv(block.norm(x))[..., 16:]
        z = block.out(v)
    assert torch.equal(out[~kept], x[~kept])  # dropped: the residual alone (x + 0 is exact in IEEE arithmetic)
    assert_close((x + z * keep_scale(0.5))[kept], out[kept], ratio=1e-6)
