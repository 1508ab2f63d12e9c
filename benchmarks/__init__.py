"""Benchmarks (not tests): whole-run estimates, the PyTorch LRA port's step beside ours, step memory.

Run them on a quiet machine, e.g. ``python -m benchmarks.run_estimate``; each that writes a CSV writes it under
``outputs/tables/bench/``, or under ``results/tables/bench/`` (the committed copy) with ``--committed``
(``lra.run.outputs``).
"""

import argparse
from collections.abc import Iterable, Iterator
from pathlib import Path


def attention_name(value: str) -> str:
    """argparse ``type`` of ``--attentions``: a registered name; a Hydra override there is named as one (``nargs='+'``
    takes every word after the option, so overrides go before it or after ``--``)."""
    import attention_zoo

    if "=" in value:
        raise argparse.ArgumentTypeError(f"{value!r} is a Hydra override, not an attention: give overrides before "
                                         "--attentions or after `--` (e.g. --attentions softmax -- model.dim=128)")
    if value not in attention_zoo.available():
        raise argparse.ArgumentTypeError(f"unknown attention {value!r}; valid: {', '.join(attention_zoo.available())}")
    return value


def taking_turns(ways: Iterable, rounds: int) -> Iterator[tuple[int, object]]:
    """``(round, way)`` for ``rounds`` rounds: the ways in order on even rounds, reversed on odd ones (ABBA), so that
    the machine's drift over time falls on each way alike."""
    ways = list(ways)
    for i in range(rounds):
        for way in ways if i % 2 == 0 else ways[::-1]:
            yield i, way


def this_processor(device=None) -> str:
    """What a benchmark's times were measured on: this machine's CPU and its widest vector units (``AMD EPYC 7B13
    (avx2)``; GEMM rates differ ~2x between the AVX2 and AVX-512 machines), or the GPU for a CUDA ``device``."""
    from lra.run.machine import cpu_model, device_name, read_cpuinfo, vector_units

    if device is not None and getattr(device, "type", device) == "cuda":
        return device_name(device)
    info = read_cpuinfo()
    return f"{cpu_model(info)} ({vector_units(info)})"


def with_processor(frame, device=None):
    """``frame`` with a ``processor`` column (``this_processor``), for rows measured here."""
    return frame.assign(processor=this_processor(device))


def write_csv(frame, out: str | Path, name: str, say: bool = True) -> Path:
    """A benchmark's CSV ``out/name``, written atomically (``lra_base.atomic``); says where unless ``say`` is False.
    Every row names what it was measured on: a frame without a ``processor`` column was measured on this machine's
    CPU (``with_processor``); one with it keeps each row's (rows kept from an earlier measurement, GPU rows)."""
    from lra_base.atomic import write_atomic

    path = Path(out) / name
    write_atomic(path, (frame if "processor" in frame else with_processor(frame)).to_csv(index=False))
    if say:
        print(f"wrote {path}")
    return path
