"""One line naming where a run trained, from its record's ``segments`` (``lra.run.machine``): the device, or the
processor and torch's threads, and the step where each resumed segment moved to another machine."""

from __future__ import annotations

from typing import Any

from lra.run.record_compat import known

PRECISIONS = {"32-true": "fp32", "32": "fp32", "16-mixed": "fp16 mixed", "bf16-mixed": "bf16 mixed",
              "64-true": "fp64", "bf16-true": "bf16", "16-true": "fp16"}


def device_kind(segments: Any) -> str:
    """``GPU (NVIDIA H200)``, ``CPU``, ``CPU, then GPU (...)`` over resumed segments, or ``unknown`` (no segments, or
    none that names its device)."""
    kinds: list[str] = []
    for segment in segments if isinstance(segments, list) else []:
        device = str(segment.get("device", "unknown")) if isinstance(segment, dict) else "unknown"
        kind = "CPU" if device == "cpu" else "unknown" if device in ("unknown", "?") else \
            f"GPU ({device.split(': ', 1)[-1]})" if device.startswith("cuda") else device
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
    return ", then ".join(kinds) or "unknown"


def segment_machine(segment: dict[str, Any]) -> str:
    """``cuda: NVIDIA H200, fp32`` or ``Intel(R) Xeon(R) ..., 1 thread, fp32``; ``, subnormals flushed`` where they were
    (``lra.run.subnormals``); ``, jemalloc`` where glibc did not serve ``malloc`` (``lra.run.allocator``);
    `` x2 processes`` under DDP."""
    device = str(segment.get("device", "?"))
    if device == "cpu":
        threads = segment.get("threads", "?")
        vector = f" ({segment['vector']})" if known(segment.get("vector")) else ""
        cpu = segment.get("cpu", "?")
        cpu = cpu if known(cpu) else "CPU of unknown model"
        counted = f"{threads} thread{'' if threads == 1 else 's'}" if known(threads) else "threads unknown"
        device = f"{cpu}{vector}, {counted}"
    elif not known(device):
        device = "unknown device"
    precision = PRECISIONS.get(str(segment.get("precision")), segment.get("precision"))
    device += f", {precision}" if precision else ""
    processes = segment.get("processes", 1)
    device += "" if segment.get("subnormals") != "flushed" else ", subnormals flushed"
    device += "" if not known(segment.get("malloc")) or segment["malloc"] == "glibc" else f", {segment['malloc']}"
    return device if processes == 1 else f"{device} x{processes} processes"


def machine_summary(segments: Any) -> str:
    """The first segment's machine, then ``; from step N: <machine>`` wherever a resume changed it (the first one
    too when it starts after step 0: a resume from a checkpoint older than segments); "" when the record has none."""
    if not isinstance(segments, list):
        return ""
    parts: list[str] = []
    last = None
    for segment in segments:
        if not isinstance(segment, dict):
            continue
        machine = segment_machine(segment)
        if machine != last:
            step = segment.get("from_step")
            step = f"{step:,}" if isinstance(step, int) and not isinstance(step, bool) else "?"
            first_step = not parts and step == "0"  # a run resumed from an older checkpoint starts later
            parts.append(machine if first_step else f"from step {step}: {machine}")
            last = machine
    return "; ".join(parts)
