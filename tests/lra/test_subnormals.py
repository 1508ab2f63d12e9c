"""Subnormal floats flushed to zero: on every intra-op thread started after the call, and recorded per segment."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from lra.run import subnormals, train
from tests.lra.conftest import TINY, compose_run

SMALLEST_NORMAL = torch.finfo(torch.float32).tiny  # 1.18e-38

PRODUCTS = textwrap.dedent("""
    import sys, torch
    from lra.run.subnormals import flush_subnormals
    if sys.argv[1] == "flush":
        print(flush_subnormals())
    torch.set_num_threads(2)
    x = torch.full((1 << 22,), 1e-30)
    y = x * 1e-10  # 1e-40: subnormal unless flushed; two threads each take half
    print(int((y == 0).sum()), y.numel())
""")


def products(mode: str) -> tuple[str, int, int]:
    out = subprocess.run([sys.executable, "-c", PRODUCTS, mode], capture_output=True, text=True, check=True,
                         timeout=120).stdout.split()
    return out[0] if mode == "flush" else "", int(out[-2]), int(out[-1])


def test_products_below_the_smallest_normal_are_zero_on_every_thread_only_when_flushed():
    supported, zeros, total = products("flush")
    if supported != "True":
        pytest.skip("this CPU has no flush-to-zero mode")  # not x86 with SSE3: nothing to flush
    assert zeros == total  # the worker thread's half too: it started after the call (a later call: half only)
    _, zeros, total = products("keep")
    assert zeros == 0 and 0 < 1e-40 < SMALLEST_NORMAL


def test_a_run_flushes_them_first_and_its_segment_says_so(tiny_data_dir, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(train, "flush_subnormals", lambda: calls.append("flush"))
    monkeypatch.setattr(subnormals, "_flushed", True)  # what the call sets; this test process's mode left alone
    cfg = compose_run(["attention=linear", "experiment=quick", f"data_dir={tiny_data_dir}", *TINY,
                       "task.max_steps=4", "trainer.enable_progress_bar=false"])
    record = train.run(cfg, tmp_path)
    assert calls == ["flush"] and [s["subnormals"] for s in record["segments"]] == ["flushed"]


def test_flush_subnormals_false_leaves_the_mode_alone(tiny_data_dir, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(train, "flush_subnormals", lambda: calls.append("flush"))
    monkeypatch.setattr(subnormals, "_flushed", False)
    cfg = compose_run(["attention=linear", "experiment=quick", f"data_dir={tiny_data_dir}", *TINY,
                       "task.max_steps=4", "trainer.enable_progress_bar=false", "flush_subnormals=false"])
    record = train.run(cfg, tmp_path)
    assert calls == [] and [s["subnormals"] for s in record["segments"]] == ["kept"]
