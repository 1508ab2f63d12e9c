"""Threads from the free cores (lra.run.threads): /proc/stat parsing, the choice, and the callback's decisions."""

from __future__ import annotations

import os

import pytest
import torch

from lra.run import threads

STAT = """cpu  900 0 300 5000 100 0 0 0 0 0
cpu0 400 0 100 2000 50 10 5 0 0 0
cpu1 500 0 200 3000 50 0 0 3 0 0
cpu2 999 0 999 1 0 0 0 0 0 0
intr 12345 0 0
ctxt 999
"""


def test_busy_seconds_counts_only_the_allowed_cpus_and_not_idle_or_iowait():
    hz = os.sysconf("SC_CLK_TCK")
    assert threads.busy_seconds(STAT, {0}) == pytest.approx((400 + 100 + 10 + 5) / hz)
    assert threads.busy_seconds(STAT, {0, 1}) == pytest.approx((515 + 703) / hz)
    assert threads.busy_seconds(STAT, set()) == 0


@pytest.mark.parametrize(("others", "cores", "most", "expected"),
                         [(0.0, 2, 2, 2), (0.3, 2, 2, 2), (0.7, 2, 2, 1), (1.0, 2, 2, 1), (2.0, 2, 2, 1),
                          (1.2, 8, 8, 7), (0.0, 8, 4, 4)])
def test_threads_are_the_free_cores_at_least_one_at_most_the_start_count(others, cores, most, expected):
    assert threads.threads_for(others, cores, most) == expected


def test_the_callback_follows_other_processes_load_and_restores_the_count(monkeypatch):
    before = torch.get_num_threads()
    callback = threads.FreeCoreThreads(every_s=0.0, most=2)
    callback.cpus = {0, 1}
    clock = {"wall": 0.0, "busy": 0.0, "own": 0.0}
    monkeypatch.setattr(callback, "_reading", lambda: (clock["wall"], clock["busy"], clock["own"]))
    callback._last = callback._reading()
    clock.update(wall=10.0, busy=19.0, own=10.0)  # another process kept 0.9 of a core busy
    assert callback.check() == 1 and torch.get_num_threads() == 1
    clock.update(wall=20.0, busy=39.0, own=20.0)
    callback.on_train_batch_end(None, None, None, None, 0)
    assert torch.get_num_threads() == 1
    clock.update(wall=30.0, busy=49.5, own=30.0)  # it ended: only this run's own time
    callback.on_train_batch_end(None, None, None, None, 0)
    assert torch.get_num_threads() == 2
    torch.set_num_threads(1)
    callback._before = before
    callback.teardown(None, None, "fit")
    assert torch.get_num_threads() == before


def test_an_explicit_thread_count_is_left_alone(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert not threads.FreeCoreThreads.wanted()
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    assert threads.FreeCoreThreads.wanted() == threads.STAT.exists()


def test_torch_threads_sets_the_count_inside_and_restores_it_even_after_an_error():
    before = torch.get_num_threads()
    with threads.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    try:
        with threads.torch_threads(1):
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(("cpus", "devices", "expected"), [(2, 2, 1), (8, 2, 4), (2, 4, 1)])
def test_cpu_ddp_ranks_share_the_cores_from_the_first_step(monkeypatch, cpus, devices, expected):
    """Each of a node's ranks starts at its share of the cores: before, all of them took every core while the
    others were still starting, spinning threads on shared cores until the first re-check 15 s later."""
    before = torch.get_num_threads()
    callback = threads.FreeCoreThreads(every_s=15.0, most=cpus)
    callback.cpus = set(range(cpus))
    monkeypatch.setattr(callback, "_reading", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(threads.time, "sleep", lambda seconds: None)
    trainer = type("Trainer", (), {"world_size": devices, "num_devices": devices})()
    module = type("Module", (), {"device": torch.device("cpu")})()
    try:
        callback.on_fit_start(trainer, module)
        assert callback.most == expected and torch.get_num_threads() == expected
        callback.teardown(trainer, module, "fit")
        assert torch.get_num_threads() == min(before, expected)  # the test stage keeps the share
    finally:
        torch.set_num_threads(before)
