"""The CPU allocator settings: freed memory kept for reuse, and handed back every few training steps."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from lra.run import allocator, train
from tests.lra.conftest import TINY, compose_run


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_freed_memory_kept_by_reuse_is_handed_back():
    if not hasattr(allocator._libc(), "malloc_trim"):  # no glibc: both settings say they did nothing
        assert not allocator.release_freed_memory()
        return
    assert allocator.reuse_freed_memory()  # for the rest of this process too, as in any training run
    blocks = [torch.ones(n * 1_000_003, dtype=torch.uint8) for n in (40, 7, 40, 13, 40)]  # heap, not mmap
    del blocks[::2]  # 120 MB freed between and after live blocks: kept mapped, since trimming is off
    kept = resident_bytes()
    assert allocator.release_freed_memory()
    assert kept - resident_bytes() > 80e6
    assert all(int(block.sum()) == block.numel() for block in blocks)


def test_release_runs_every_n_steps_once_per_step(monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "release_freed_memory", lambda: calls.append(trainer.global_step))
    callback = allocator.ReleaseFreedMemory(every=3)
    trainer = SimpleNamespace(global_step=0)
    for step in (1, 2, 3, 3, 4, 5, 6, 7, 9):  # step 3 twice: two micro-batches of one step
        trainer.global_step = step
        callback.on_train_batch_end(trainer, None, None, None, 0)
    assert calls == [3, 6, 9]
    with pytest.raises(ValueError, match="every >= 1"):
        allocator.ReleaseFreedMemory(every=0)


@pytest.mark.parametrize("reuse", [True, False])
def test_training_releases_freed_memory_only_while_it_keeps_it(tiny_data_dir, tmp_path, monkeypatch, reuse):
    released = []
    monkeypatch.setattr(allocator, "release_freed_memory", lambda: released.append(True))
    monkeypatch.setattr(train, "ReleaseFreedMemory", lambda: allocator.ReleaseFreedMemory(every=5))
    monkeypatch.setattr(train, "reuse_freed_memory", lambda: True)  # this process's malloc left as it is
    cfg = compose_run(["attention=linear", "experiment=quick", f"data_dir={tiny_data_dir}", *TINY,
                       "task.max_steps=12", "trainer.enable_progress_bar=false", "trainer.log_every_n_steps=5",
                       f"reuse_freed_memory={reuse}"])
    train.run(cfg, tmp_path)
    assert len(released) == (2 if reuse else 0)  # after steps 5 and 10


def test_the_malloc_is_named_from_the_library_that_serves_it():
    assert allocator.malloc_of("/lib/x86_64-linux-gnu/libc.so.6") == "glibc"
    assert allocator.malloc_of("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") == "jemalloc"
    assert allocator.malloc_of("/usr/lib/libtcmalloc_minimal.so.4") == "tcmalloc"
    assert allocator.malloc_of("/opt/libfoo.so") == "libfoo.so"
    if hasattr(allocator._libc(), "mallopt") and "LD_PRELOAD" not in os.environ:  # glibc, nothing preloaded
        assert allocator.malloc_name() == "glibc"


def test_the_glibc_settings_do_nothing_under_another_malloc(monkeypatch):
    monkeypatch.setattr(allocator, "malloc_name", lambda: "jemalloc")
    assert not allocator.reuse_freed_memory() and not allocator.release_freed_memory()
