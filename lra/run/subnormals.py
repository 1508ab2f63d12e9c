"""Subnormal floats flushed to zero on the CPU (FTZ and DAZ in the x86 MXCSR): the softmax step at twice the speed.

When a trained model's attention sharpens, many softmax weights and their gradients fall below float32's smallest
normal number (1.18e-38), and x86 cores compute on such subnormal operands through a microcode assist, tens of
times slower. Measured on a full-protocol ListOps batch (softmax, `study_port_lr` seed 0 at step 1,155, 2 threads,
Intel Xeon with AVX-512): a training step took 1.93-2.04 s, 0.82-0.93 s with subnormals flushed; the same model at
initialisation 1.45 s either way (docs/benchmarks.md "Subnormals"). Flushing changes only values below 1.18e-38,
which add nothing a float32 sum of normal numbers can hold: the numbers differ from a run without it at most in
the last bits, as between two CPUs' BLAS.

The mode belongs to a thread, and a thread starts with its creator's (C11 7.6), so it must be set before torch's
intra-op threads start: ``lra.run.train`` does it first thing, before any tensor work. Threads already running keep
theirs (a later call in a process that has trained already, such as a test session, reaches its main thread only).
"""

from __future__ import annotations

import torch

_flushed = False


def flush_subnormals() -> bool:
    """Set FTZ/DAZ on this thread (and so on every intra-op thread started after it); False where the CPU has no
    such mode (then nothing changes)."""
    global _flushed
    _flushed = bool(torch.set_flush_denormal(True)) or _flushed
    return _flushed


def subnormals() -> str:
    """``flushed`` once this process flushed them, else ``kept``: for the record of a run segment."""
    return "flushed" if _flushed else "kept"
