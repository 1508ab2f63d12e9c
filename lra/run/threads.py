"""Intra-op threads from the cores that are actually free, re-checked while a run trains.

OpenMP threads that spin at barriers (libgomp's default: about 3 ms, ``GOMP_SPINCOUNT=300000``) are fast on idle
cores and collapse when another busy process shares them; threads that sleep at once (``OMP_WAIT_POLICY=PASSIVE``)
pay a wake-up at every parallel region. Measured on 2 cores, 150 quick ListOps steps of training (``python -m
benchmarks.threads``, docs/benchmarks.md "Threads", 2026-12-03): 2 spinning threads 13-16 s idle but 63 s beside
one busy process; 2 sleeping threads 26-35 s idle and 20 s busy; 1 thread 19-24 s and 21 s. So a run keeps
libgomp's spinning threads and uses only the cores that other processes leave free (here: 13-16 s idle, 22 s
busy): one thread while another process is busy on one of 2 cores, two again when it ends. One thread never waits
at a barrier.

Active only when the user has not set ``OMP_NUM_THREADS`` (an explicit choice is left alone).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)
STAT = Path("/proc/stat")


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` inside the block, restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def busy_seconds(stat_text: str, cpus: set[int]) -> float:
    """CPU seconds the ``cpus`` have spent busy since boot, from ``/proc/stat``'s per-CPU lines (all
    processes; idle and iowait do not count)."""
    ticks = 0
    for line in stat_text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
        ticks += user + nice + system + irq + softirq + steal
    return ticks / os.sysconf("SC_CLK_TCK")


def threads_for(others_busy: float, cores: int, most: int) -> int:
    """Threads to use when other processes keep ``others_busy`` cores (a mean) busy out of ``cores``."""
    return max(1, min(most, cores - round(others_busy)))


class FreeCoreThreads(pl.Callback):
    """Set ``torch.set_num_threads`` to the free cores at the start and every ``every_s`` seconds of training.

    Other processes' load is the CPUs' busy time (``/proc/stat``, the CPUs this process may run on) minus this
    process's own CPU time, over the interval since the last check.
    """

    def __init__(self, every_s: float = 15.0, most: int | None = None):
        self.cpus = set(os.sched_getaffinity(0))
        self.most = most or torch.get_num_threads()
        self.every_s = every_s
        self._last: tuple[float, float, float] | None = None  # (wall, all busy, own CPU) at the last check
        self._before = torch.get_num_threads()

    @staticmethod
    def wanted() -> bool:
        """Whether the thread count is the suite's to choose: Linux, more than one core, no ``OMP_NUM_THREADS``."""
        return "OMP_NUM_THREADS" not in os.environ and STAT.exists() and len(os.sched_getaffinity(0)) > 1

    def _reading(self) -> tuple[float, float, float]:
        return time.perf_counter(), busy_seconds(STAT.read_text(), self.cpus), time.process_time()

    def check(self) -> int:
        """Others' mean busy cores since the last reading, and the thread count set from it."""
        now = self._reading()
        wall, busy, own = (b - a for a, b in zip(self._last, now, strict=True))
        self._last = now
        others = max(0.0, (busy - own) / max(wall, 1e-9))
        threads = threads_for(others, len(self.cpus), self.most)
        if threads != torch.get_num_threads():
            log.info("threads: %d (other processes keep %.1f of %d cores busy)", threads, others, len(self.cpus))
            torch.set_num_threads(threads)
        return threads

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.world_size > 1 and pl_module.device.type == "cpu":  # the node's ranks share its cores
            self.most = max(1, min(self.most, len(self.cpus) // max(1, trainer.num_devices)))
            self._before = min(self._before, self.most)  # kept after fit too: the test stage shares them as well
        self._last = self._reading()
        time.sleep(0.25)  # a short look at the machine before the first step
        self.check()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._last is not None and time.perf_counter() - self._last[0] >= self.every_s:
            self.check()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":  # the process's setting as it was (a run inside a notebook or an analysis)
            torch.set_num_threads(self._before)
            self._last = None
