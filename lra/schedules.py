"""Learning-rate schedules: multipliers of the peak learning rate ``task.optim.lr`` per optimiser step.

``task.optim.schedule`` picks one:

- ``linear`` (the PyTorch-port protocol; OneCycleLR-like): ``(step + 1) / warmup`` up to 1, then a linear
  decay to 0 at ``max_steps``.
- ``constant``: the same warmup, then 1.
- ``rsqrt`` (LRA JAX ``constant * linear_warmup * rsqrt_decay``, lra_benchmarks/utils/train_utils.py):
  ``min(1, step / warmup) * sqrt(warmup / max(step, warmup))``; the JAX base rate ``b`` is a peak of
  ``b / sqrt(warmup)`` here (0.05 with warmup 1,000 is ``lr: 1.58e-3``).
- ``cosine`` (LRA JAX ``constant * linear_warmup * cosine_decay``): ``min(1, step / warmup) *
  max(0, (1 + cos(pi * (p mod 1))) / 2)`` with ``p = max(0, step - warmup) / cycle_steps``;
  ``task.optim.cycle_steps`` defaults to ``max_steps`` (the LRA image and Pathfinder configs).
- ``onecycle`` (the Nystromformer port's LRA run_tasks.py: ``torch.optim.lr_scheduler.OneCycleLR`` with
  ``pct_start = warmup / max_steps``, linear annealing and torch's defaults): from ``lr / 25`` up to ``lr`` at
  step ``warmup - 1``, then linearly down to ``lr / 2.5e5`` at ``max_steps``, while Adam's beta1 cycles
  0.95 -> 0.85 -> 0.95 (``cycle_momentum``; ``task.optim.cycle_momentum: false`` keeps ``betas``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from .settings import Optim


def linear(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def constant(step: int, warmup: int) -> float:
    return min(1.0, (step + 1) / warmup)


def rsqrt(step: int, warmup: int) -> float:
    return min(1.0, step / warmup) * math.sqrt(warmup / max(step, warmup))


def cosine(step: int, warmup: int, cycle: int) -> float:
    progress = max(0.0, (step - warmup) / cycle)
    return min(1.0, step / warmup) * max(0.0, 0.5 * (1.0 + math.cos(math.pi * (progress % 1.0))))


def lr_multiplier(optim: Optim, max_steps: int) -> Callable[[int], float] | None:
    """The ``step -> multiplier`` function that ``task.optim`` asks for (``LambdaLR``'s ``lr_lambda``); None for
    ``onecycle``, torch's own ``OneCycleLR`` (``Run.parse`` refused a warmup as long as the run)."""
    warmup = max(1, optim.warmup_steps)
    return {
        "linear": partial(linear, warmup=warmup, total=max_steps),
        "constant": partial(constant, warmup=warmup),
        "rsqrt": partial(rsqrt, warmup=warmup),
        "cosine": partial(cosine, warmup=warmup, cycle=max(1, optim.cycle_steps or max_steps)),
        "onecycle": None,
    }[optim.schedule]


def scheduler(optimizer: torch.optim.Optimizer, optim: Optim, max_steps: int):
    """The per-step learning-rate scheduler ``task.optim`` asks for (``lr_multiplier`` for its multiplier)."""
    multiplier = lr_multiplier(optim, max_steps)
    if multiplier is not None:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
    warmup = max(1, optim.warmup_steps)
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=optim.lr, total_steps=max_steps, pct_start=warmup / max_steps,
        anneal_strategy="linear", cycle_momentum=bool(optim.cycle_momentum))
