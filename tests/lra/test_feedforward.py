"""The MLP's memory-lean training path computes what its modules compute, and keeps less for backward."""

from __future__ import annotations

import pytest
import torch

from lra.dropout import Dropout, effective_p
from lra.feedforward import FeedForward
from lra.norm_linear import norm_linear


def run(ff: FeedForward, x: torch.Tensor, lean: bool, seed: int = 3):
    """Output and gradients (input, then parameters) of one pass, the dropout masks drawn from ``seed``."""
    x = x.detach().requires_grad_()
    torch.manual_seed(seed)
    out = ff(x) if lean else x + ff.net(x)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    grads = torch.autograd.grad((out * weights).sum(), [x, *ff.parameters()])
    return out, grads


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lean_path_matches_the_modules(p, dtype):
    torch.manual_seed(0)
    ff = FeedForward(12, 24, p).to(dtype).train()
    with torch.no_grad():  # LayerNorm's affine parameters away from their 1 / 0 start
        ff.net[0].weight.uniform_(0.5, 1.5)
        ff.net[0].bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, 7, 12, dtype=dtype) * 2 + 0.5
    out_lean, grads_lean = run(ff, x, lean=True)
    out_ref, grads_ref = run(ff, x, lean=False)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-13}
    torch.testing.assert_close(out_lean, out_ref, rtol=0, atol=0)  # the same forward ops
    for name, a, b in zip(["x", *dict(ff.named_parameters())], grads_lean, grads_ref):
        torch.testing.assert_close(a, b, **tol, msg=lambda m, name=name: f"gradient of {name}: {m}")
    if p > 0:  # masks were really drawn: some hidden units of the output are dropped
        assert not torch.equal(out_lean, x + ff.eval().net(x))


def test_lean_path_gradcheck():
    torch.manual_seed(1)
    ff = FeedForward(4, 8, 0.3).double().train()
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)

    def f(x, *params):
        with torch.random.fork_rng():
            torch.manual_seed(5)  # the same masks on every call
            return torch.func.functional_call(ff, dict(zip(dict(ff.named_parameters()), params)), (x,))

    assert torch.autograd.gradcheck(f, (x, *[q.detach().requires_grad_() for q in ff.parameters()]))


def saved_bytes(fn) -> int:
    """Bytes of distinct storages autograd keeps for backward while ``fn`` runs."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def test_lean_path_keeps_under_0_6_of_what_autograd_keeps():
    torch.manual_seed(0)
    ff = FeedForward(64, 128, 0.1).train()
    x = torch.randn(4, 256, 64, requires_grad=True)
    lean = saved_bytes(lambda: ff(x))
    modules = saved_bytes(lambda: x + ff.net(x))
    tokens = 4 * 256
    assert modules >= tokens * (2 * 64 + 2 * 128) * 4  # at least LayerNorm in/out, GELU in/out in float32
    assert lean <= 0.6 * modules, (lean, modules)


def test_eval_and_no_grad_take_the_modules():
    ff = FeedForward(8, 16, 0.5)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(ff.eval()(x), x + ff.net(x))


def test_dropout_is_unbiased_and_masks_its_gradient():
    torch.manual_seed(0)
    x = torch.ones(200_000, requires_grad=True)
    y = Dropout(0.1).train()(x)
    dropped = y == 0
    assert abs(dropped.float().mean().item() - effective_p(0.1)) < 0.003
    assert abs(y.mean().item() - 1.0) < 0.01
    y.backward(torch.full_like(y, 2.0))
    torch.testing.assert_close(x.grad, torch.where(dropped, 0.0, 2.0 / (1 - effective_p(0.1))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_norm_linear_matches_the_modules_and_keeps_only_its_input(dtype):
    torch.manual_seed(0)
    norm, linear = torch.nn.LayerNorm(16).to(dtype), torch.nn.Linear(16, 40).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = (torch.randn(3, 9, 16, dtype=dtype) * 3 - 1).requires_grad_()
    params = [x, *norm.parameters(), *linear.parameters()]
    weights = torch.randn(3, 9, 40, dtype=dtype)
    out = norm_linear(x, norm, linear)
    ref = linear(norm(x))
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-13}
    for a, b in zip(torch.autograd.grad((out * weights).sum(), params),
                    torch.autograd.grad((ref * weights).sum(), params)):
        torch.testing.assert_close(a, b, **tol)
    kept = saved_bytes(lambda: norm_linear(x, norm, linear))
    assert kept < x.numel() * x.element_size() * 1.2 + 2 * 40 * 16 * 8  # x, statistics and weights, no output


def test_the_lean_path_refuses_a_second_derivative_by_name():
    """Its backward is hand-written: create_graph=True would drop the terms through the saved inputs."""
    ff = FeedForward(12, 24, 0.0).train()
    x = torch.randn(3, 7, 12, requires_grad=True)
    with pytest.raises(RuntimeError, match="_FeedForward.backward is a hand-written first-order backward"):
        torch.autograd.grad(ff(x).square().sum(), x, create_graph=True)
    (first,) = torch.autograd.grad(ff(x).square().sum(), x)  # first order as before, no graph kept
    assert not first.requires_grad
