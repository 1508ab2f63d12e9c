"""One line naming where a run trained, from its record's ``segments`` (``lra.machine``): the device, or the
processor and torch's threads, and the step where each resumed segment moved to another machine."""

from __future__ import annotations

from typing import Any


def segment_machine(segment: dict[str, Any]) -> str:
    """``cuda: NVIDIA H200`` or ``Intel(R) Xeon(R) ..., 1 thread``; ``, subnormals flushed`` where they were
    (``lra.subnormals``); ``, jemalloc`` where glibc did not serve ``malloc`` (``lra.allocator``); `` x2 processes``
    under DDP."""
    device = str(segment.get("device", "?"))
    if device == "cpu":
        threads = segment.get("threads", "?")
        vector = f" ({segment['vector']})" if segment.get("vector") not in (None, "unknown") else ""
        device = f"{segment.get('cpu', '?')}{vector}, {threads} thread{'' if threads == 1 else 's'}"
    processes = segment.get("processes", 1)
    device += "" if segment.get("subnormals") != "flushed" else ", subnormals flushed"
    device += "" if segment.get("malloc") in (None, "glibc", "unknown") else f", {segment['malloc']}"
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
