"""Learning-rate schedules: the port's warmup + linear decay, and the LRA JAX factor schedules."""

import math
from dataclasses import replace
from typing import get_args

import pytest

from lra.schedules import linear, lr_multiplier
from lra.settings import Run, Schedule
from lra_base.errors import UserError
from tests.lra.conftest import compose_config, compose_run

SCHEDULES = get_args(Schedule)


def optim(**settings):
    """``task.optim`` of the default run with ``settings`` over it."""
    return replace(compose_run([]).task.optim, **settings)


def test_warmup_then_linear_decay():
    values = [linear(s, warmup=10, total=110) for s in range(0, 111)]
    assert values[0] == pytest.approx(0.1) and values[9] == pytest.approx(1.0)
    assert values[10] == pytest.approx(1.0) and values[60] == pytest.approx(0.5) and values[110] == 0.0
    assert all(a >= b for a, b in zip(values[10:], values[11:]))


def jax_rate(factors: str, step: int, base: float, warmup: int, steps_per_cycle: int = 100000) -> float:
    """LRA's create_learning_rate_scheduler (lra_benchmarks/utils/train_utils.py), factor by factor."""
    rate = 1.0
    for name in (f.strip() for f in factors.split("*")):
        if name == "constant":
            rate *= base
        elif name == "linear_warmup":
            rate *= min(1.0, step / warmup)
        elif name == "rsqrt_decay":
            rate /= math.sqrt(max(step, warmup))
        elif name == "cosine_decay":
            progress = max(0.0, (step - warmup) / float(steps_per_cycle))
            rate *= max(0.0, 0.5 * (1.0 + math.cos(math.pi * (progress % 1.0))))
    return rate


def test_rsqrt_is_the_lra_listops_schedule_with_the_base_rate_as_a_peak():
    peak = 0.05 / math.sqrt(1000)  # LRA ListOps: constant 0.05, warmup 1000
    fn = lr_multiplier(optim(schedule="rsqrt", warmup_steps=1000), 5000)
    for step in (0, 1, 500, 999, 1000, 1001, 2500, 4999):
        assert peak * fn(step) == pytest.approx(jax_rate("constant * linear_warmup * rsqrt_decay", step, 0.05, 1000))
    assert fn(1000) == pytest.approx(1.0) and fn(4000) == pytest.approx(0.5)


def test_cosine_is_the_lra_image_schedule():
    fn = lr_multiplier(optim(schedule="cosine", warmup_steps=175, cycle_steps=None), 35000)
    for step in (0, 100, 175, 10000, 17675, 34999):
        expected = jax_rate("constant * linear_warmup * cosine_decay", step, 5e-4, 175, steps_per_cycle=35000)
        assert 5e-4 * fn(step) == pytest.approx(expected, abs=1e-12)
    assert fn(175 + 17500) == pytest.approx(0.5)
    short = lr_multiplier(optim(schedule="cosine", warmup_steps=10, cycle_steps=20), 1000)
    assert short(30) == pytest.approx(1.0)  # cyclic: a new cycle starts at warmup + cycle_steps


def test_constant_after_warmup():
    fn = lr_multiplier(optim(schedule="constant", warmup_steps=4), 100)
    assert [fn(s) for s in (0, 3, 50, 99)] == pytest.approx([0.25, 1.0, 1.0, 1.0])


def test_unknown_schedule_is_a_user_error_naming_the_valid_ones(tiny_overrides):
    with pytest.raises(UserError, match="cosin.*" + ".*".join(SCHEDULES)):
        Run.parse(compose_config(["attention=linear", "task.optim.schedule=cosin", *tiny_overrides]))


def test_onecycle_needs_steps_after_its_warmup():
    with pytest.raises(UserError, match=r"schedule=onecycle needs warmup_steps \(50\) < max_steps \(50\)"):
        Run.parse(compose_config(["task.optim.schedule=onecycle", "task.optim.warmup_steps=50", "task.max_steps=50"]))


def test_every_task_declares_its_schedule():
    for task in ("listops", "text", "retrieval", "image", "pathfinder", "pathx", "ar"):
        optim = compose_config([f"task={task}"])["task"]["optim"]
        assert optim["schedule"] in SCHEDULES and "cycle_steps" in optim
