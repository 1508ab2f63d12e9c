"""CPU memory allocator settings for training: keep freed memory for reuse, and give it back every few steps.

Both settings are glibc's (``mallopt``, ``malloc_trim``). Under glibc a long run slows as it ages: its heap fragments
(batch shapes change every step), every large allocation walks a longer list of free chunks, and a full-protocol
softmax run spent 22% of its time in ``_int_malloc`` after 1,000 steps against 4% just after starting (its pace
fell from ~940 to ~740 steps an hour, and a restart brought it back). jemalloc, preloaded with purging off
(:data:`JEMALLOC_CONF`), has neither cost; under it these settings do nothing (:func:`malloc_name`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

import pytorch_lightning as pl

RELEASE_EVERY = 50  # training steps between two releases (the step after one pays the page faults)
# MALLOC_CONF for a preloaded jemalloc: no separate arena (purged at once) for allocations over 8 MiB, and freed
# pages kept for reuse (with jemalloc's default decay a softmax run spent ~30% of its time in page faults)
JEMALLOC_CONF = "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1"
MALLOCS = (("libc.so", "glibc"), ("libjemalloc", "jemalloc"), ("libtcmalloc", "tcmalloc"), ("libmimalloc", "mimalloc"))


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def malloc_of(library_file: str) -> str:
    """The allocator a shared library file is (``glibc``, ``jemalloc``, ...), else its file name."""
    name = os.path.basename(library_file)
    return next((malloc for prefix, malloc in MALLOCS if name.startswith(prefix)), name)


@cache
def malloc_name() -> str:
    """Which allocator serves this process's ``malloc`` (``glibc``, or one preloaded with ``LD_PRELOAD``), by the
    library ``dladdr`` finds the symbol in; ``unknown`` where that cannot be asked."""
    try:
        process = ctypes.CDLL(None)
        process.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        found = process.dladdr(ctypes.cast(process.malloc, ctypes.c_void_p), ctypes.byref(info))
    except (OSError, AttributeError):
        return "unknown"
    return malloc_of(info.dli_fname.decode(errors="replace")) if found and info.dli_fname else "unknown"


@cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def _glibc_malloc() -> ctypes.CDLL | None:
    """The C library when glibc serves this process's ``malloc`` (its settings then mean something), else None."""
    return _libc() if malloc_name() == "glibc" else None


def reuse_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (no mmap/trim), as CUDA's caching allocator does.

    By default glibc serves every allocation over 32 MB with a fresh mmap, so each large activation
    (a 32 x 2,048 x 128 float tensor is 33.5 MB) pays page faults every step; a full-protocol ListOps
    step took 1.4-1.5x longer. The process keeps its freed memory mapped instead, which
    :class:`ReleaseFreedMemory` hands back every few steps. Returns False where glibc does not serve ``malloc``
    (the setting is then a no-op).
    """
    libc = _glibc_malloc()
    try:
        mmap_threshold, trim_threshold = -3, -1  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD (malloc.h)
        return bool(libc.mallopt(mmap_threshold, 2**30) and libc.mallopt(trim_threshold, 2**31 - 1))
    except AttributeError:  # no glibc (libc None, or no mallopt)
        return False


def release_freed_memory() -> bool:
    """Return the heap's free pages to the system (glibc ``malloc_trim(0)``): True when some were returned.

    Without it a process under :func:`reuse_freed_memory` keeps growing: ListOps' batch shapes change every step,
    the heap fragments, and two side-by-side softmax runs grew by ~100 MB a minute each over 80 minutes, to 11 GB
    of a 24 GiB machine; ``malloc_trim(0)`` on the live 10.9 GB process left 1.0 GB. False where glibc does not
    serve ``malloc``.
    """
    libc = _glibc_malloc()
    try:
        return bool(libc.malloc_trim(0))
    except AttributeError:
        return False


class ReleaseFreedMemory(pl.Callback):
    """:func:`release_freed_memory` after every ``every``-th training step (validation runs in between); once a
    step, whatever the number of batches that make it."""

    def __init__(self, every: int = RELEASE_EVERY):
        if every < 1:
            raise ValueError(f"ReleaseFreedMemory needs every >= 1 training steps, got {every}")
        self.every, self.released_at = every, None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        step = trainer.global_step
        if step % self.every == 0 and step != self.released_at:
            self.released_at = step
            release_freed_memory()
