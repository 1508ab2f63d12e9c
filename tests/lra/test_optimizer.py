"""``lra.optimizer.adamw``: the task's AdamW settings, fused on the CPU, the same update as torch's default loop."""

from __future__ import annotations

import torch

from lra.optimizer import adamw
from lra.settings import Optim

OPTIM = Optim(lr=1e-3, weight_decay=0.05, betas=[0.8, 0.99], eps=1e-6, warmup_steps=0, schedule="linear",
              cycle_steps=None)


def test_it_takes_the_task_settings_and_is_fused_on_the_cpu():
    optimizer = adamw([torch.nn.Parameter(torch.ones(3))], OPTIM)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-3, (0.8, 0.99), 1e-6, 0.05)
    assert group["fused"] is True
    assert adamw([torch.nn.Parameter(torch.ones(3))], OPTIM, lr=0.5).param_groups[0]["lr"] == 0.5


def test_the_fused_update_is_torch_adamw_up_to_rounding():
    torch.manual_seed(0)
    start = [torch.randn(32, 16), torch.randn(16)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    plain = [torch.nn.Parameter(t.clone()) for t in start]
    fused = adamw(ours, OPTIM)
    loop = torch.optim.AdamW(plain, lr=1e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, foreach=False)
    for _ in range(10):
        grads = [torch.randn_like(t) for t in start]
        for params, optimizer in ((ours, fused), (plain, loop)):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            optimizer.step()
    for a, b, t in zip(ours, plain, start):
        assert not torch.equal(b, t)  # ten steps moved them
        torch.testing.assert_close(a.detach(), b.detach(), rtol=2e-6, atol=1e-7)  # ten steps' roundings apart
