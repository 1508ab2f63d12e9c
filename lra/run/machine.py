"""Where a run segment trained: the processor, the cores it could use, torch's threads, the device, whether
subnormal floats were flushed (``lra.run.subnormals``) and which ``malloc`` served it (``lra.run.allocator``).

Wall times and tokens/s mean little without the machine (these runs move between AMD and Intel CPUs, one or two
threads, and sometimes a GPU), so every segment of a run (the first, and each resume) names its machine in the
record's ``segments`` (``lra.run.callbacks.RecordSegment``).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from .allocator import malloc_name
from .subnormals import subnormals

CPUINFO = Path("/proc/cpuinfo")


def read_cpuinfo() -> str:
    """``/proc/cpuinfo`` (Linux), or "" where there is none."""
    try:
        return CPUINFO.read_text(errors="replace")
    except OSError:
        return ""


def cpuinfo_field(cpuinfo: str, *names: str) -> str | None:
    """The value of the first ``name : value`` line of ``cpuinfo`` whose name starts with one of ``names``."""
    return next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                 if line.startswith(names) and ":" in line), None)


def cpu_model(cpuinfo: str) -> str:
    """The processor's model name from ``cpuinfo``, else what ``platform`` says."""
    return cpuinfo_field(cpuinfo, "model name") or platform.processor() or platform.machine() or "unknown"


def vector_units(cpuinfo: str) -> str:
    """The widest SIMD and matrix extensions the processor reports (``avx512+amx``, ``avx2``, ...): what sets its
    GEMM rate, which differs ~2x between the AVX2 and AVX-512 machines these runs have moved between."""
    flags = set((cpuinfo_field(cpuinfo, "flags", "Features") or "").split())
    widest = next((name for flag, name in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse2", "sse2"),
                                           ("asimd", "neon")) if flag in flags), "unknown")
    return widest + ("+amx" if "amx_tile" in flags else "")


def usable_cores() -> int:
    """Cores this process may run on (its affinity where the OS has one, e.g. under ``taskset``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def device_name(device: torch.device) -> str:
    """``cpu``, or the accelerator's name (``cuda: NVIDIA H200``)."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


def describe(device: torch.device, processes: int) -> dict[str, Any]:
    """The machine of one run segment; ``threads`` is torch's intra-op count when the segment starts (on a CPU the
    suite may change it as cores free up: ``lra.run.threads``)."""
    cpuinfo = read_cpuinfo()
    return {"cpu": cpu_model(cpuinfo), "vector": vector_units(cpuinfo), "cores": usable_cores(),
            "threads": torch.get_num_threads(), "device": device_name(device), "processes": processes,
            "subnormals": subnormals(), "malloc": malloc_name()}
