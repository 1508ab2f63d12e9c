"""The report card's cost: forward+backward time and memory against sequence length, and their growth exponents.

Each mechanism is timed by ``benchmarks.attention.measure`` (median forward+backward after warm-up; memory: the
bytes autograd saves for backward on the CPU, which is what grows with n, and peak allocated memory on CUDA) at
its yaml options (with the command line's ``attention.*`` for the card's own), all in one process taking turns
length by length. The growth exponent is the slope of the least-squares line through ``(log n, log time)``
(and ``log memory``), the shortest length left out when three or more were measured (fixed costs dominate it):
about 1 for a linear-time mechanism, 2 for softmax.
"""

from __future__ import annotations

import math
from argparse import Namespace
from typing import Any

import numpy as np

FULL_LENGTHS = (1024, 2048, 4096, 8192, 16384)
QUICK_LENGTHS = (1024, 4096, 16384)
SHAPE = {"batch": 1, "heads": 2, "head_dim": 32}  # one sequence of the LRA models' heads


def growth_exponent(lengths: list[int], values: list[float]) -> float | None:
    """Slope of ``log value`` on ``log n`` (least squares) over the lengths but the shortest when there are three
    or more (fixed costs dominate there); None with fewer than two positive points."""
    points = sorted((math.log(n), math.log(v)) for n, v in zip(lengths, values) if v and v > 0 and math.isfinite(v))
    if len(points) < 2:
        return None
    points = points[1:] if len(points) >= 3 else points
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


def cost_rows(mechanisms: dict[str, tuple[str, dict[str, Any]]], lengths: tuple[int, ...], *, repeats: int, warmup: int,
              device: str = "cpu", log=print) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Time and memory rows for ``{label: (name, options)}`` at each length, then each one's exponents; and the measured
    points (``benchmarks.attention``'s rows, for its plot). A mechanism that fails at a length gets a failed row
    there, naming the error, and the others go on."""
    import torch

    from benchmarks.attention import measure

    args = Namespace(repeats=repeats, warmup=warmup, **SHAPE)
    points: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for n in lengths:
        for name, (registered, options) in mechanisms.items():
            try:
                point = {**measure(registered, n, args, options, torch.device(device), float("nan")), "attention": name}
            except Exception as err:  # noqa: BLE001 - one failed length is reported; the card goes on
                message = " ".join(str(err).split())[:300]
                rows.append(row("fwd+bwd time", name, n, None, "ms", f"raised {type(err).__name__}: {message}", "fail"))
                log(f"report_card: cost {name} n={n}: failed ({type(err).__name__})")
                continue
            points.append(point)
            rows.append(row("fwd+bwd time", name, n, 1e3 * point["fwd_bwd_s"], "ms", ""))
            rows.append(row("memory", name, n, point["memory_mb"], "MiB", ""))  # bytes / 2**20
            log(f"report_card: cost {name} n={n}: {1e3 * point['fwd_bwd_s']:.1f} ms, {point['memory_mb']:.1f} MiB")
    for name in mechanisms:
        mine = [p for p in points if p["attention"] == name]
        measured = sorted(p["length"] for p in mine)
        used = measured[1:] if len(measured) >= 3 else measured
        span = f"least squares over n = {', '.join(map(str, used))}" if mine else "nothing measured"
        for check, key in (("time growth exponent", "fwd_bwd_s"), ("memory growth exponent", "memory_mb")):
            slope = growth_exponent(measured, [p[key] for p in mine])
            rows.append(row(check, name, "", slope, "slope of log-log", span))
    return rows, points


def setup(repeats: int, warmup: int, device: str) -> str:
    """How the cost rows were measured, for the card's notes."""
    import torch

    memory = "peak allocated" if device == "cuda" else "bytes saved for backward"
    return (f"cost: benchmarks.attention.measure on {device}, B {SHAPE['batch']}, H {SHAPE['heads']}, head dim "
            f"{SHAPE['head_dim']}, {torch.get_num_threads()} thread(s); time: median forward+backward of {repeats} "
            f"after {warmup} warm-up; memory: {memory}; the mechanisms take turns at each length in one process.")


def row(check: str, attention: str, n: int | str, value: float | None, measure: str, detail: str,
        verdict: str = "") -> dict[str, Any]:
    """A cost row of the card's record (``n`` "" for none: the column stays integers, never floats)."""
    return {"section": "cost", "check": check, "attention": attention, "n": n, "verdict": verdict,
            "value": value, "measure": measure, "detail": detail}


def plot(points: list[dict[str, Any]], path, device: str = "cpu") -> None:
    """``benchmarks.attention``'s log-log figure: time and memory against length, one line per mechanism."""
    import pandas as pd

    from benchmarks.attention import plot as benchmark_plot

    memory = "peak allocated (MiB)" if device == "cuda" else "saved for backward (MiB)"
    benchmark_plot(pd.DataFrame(points), path, memory)
