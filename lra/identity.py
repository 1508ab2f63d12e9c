"""Which run is this: the rules behind ``lra.settings.Run``'s ``identity()``, ``digest()`` and ``differences()``,
the settings that change what a run computes.

Every question "is this the same run?" is answered by those methods, or here by the same rules: the run folder's
name (``lra.run.run_names.run_name``, from the command line's keys), the refusal of a resume or a completed folder of
other settings (``lra.run.same_run``), the protocol check of ``results``, the analyses' reuse-or-train
(``analyses._runs``), the microscope's model cache and the analyses' finished cells.

A setting belongs to the identity unless ``WHERE_OR_HOW`` lists it (or a section above it): where the data and the
outputs live, how fast a run loads, evaluates or recomputes, on which devices it runs and what it prints. In how
many parts it computes a batch (``task.micro_batches``) counts: each part draws its own dropout masks. A Lightning
setting nobody listed counts (a folder too many is harmless; a shared folder is not). Null counts as absent, so a
key added to ``conf/`` later with a null default changes nothing, and so does ``ABSENT_AT``'s value of a key.
No torch here: ``run.py`` names the folder before torch loads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# dotted keys (and the sections under them) that say where or how a run runs, not what it computes
WHERE_OR_HOW = (
    "tag", "experiment",  # names: the folder's; an experiment is a preset whose values are the other keys
    "data_dir", "task.data.root", "checkpoint", "rerun", "analysis",  # where; whether to redo; who asked
    "task.data.num_workers", "task.data.generate.workers", "task.data.eval_batch_size",  # loading, evaluating
    "model.checkpoint_blocks", "reuse_freed_memory",  # memory: the same numbers (a recomputed block redraws its masks
    # as they were)
    "flush_subnormals",  # numbers below 1.18e-38 as 0: the last bits at most, as between two CPUs
    "trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy",  # where it runs
    "trainer.enable_progress_bar", "trainer.log_every_n_steps", "trainer.enable_model_summary",  # what it prints
    "trainer.detect_anomaly",  # checks every backward: slower, the same numbers
)
# settings that joined the identity later, at the value every run before then had: that value counts as absent, so
# the digests of those runs (the analyses' run folders, the microscope's cache) stay. task.micro_batches: a batch in
# n parts draws other dropout masks than the whole batch (each part its own, on a device's own generator too), so
# under dropout n changes the numbers, though not what a step averages over.
ABSENT_AT = {"task.micro_batches": 1}
IN_THE_PATH = ("task", "attention", "seed")  # outputs/<task>/<attention>/seed<seed>/<tag>: named already
ABSENT = "<absent>"
DIGEST_LENGTH = 12


def where_or_how(key: str) -> bool:
    """Whether the dotted ``key`` only says where or how a run runs (``WHERE_OR_HOW`` or a key under one)."""
    return any(key == listed or key.startswith(listed + ".") for listed in WHERE_OR_HOW)


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"task": {"optim": {"lr": 1e-3}}}`` -> ``{"task.optim.lr": 1e-3}``; lists stay values, an empty section
    holds no key."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def settings_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a complete run config that change what it computes, as ``{"task.optim.lr": 0.001, ...}``
    sorted by key: everything but ``WHERE_OR_HOW``, null values and ``ABSENT_AT``'s (``lra.settings.Run.identity``)."""
    flat = flatten(config)
    return {key: flat[key] for key in sorted(flat) if counts(key, flat[key])}


def counts(key: str, value: Any) -> bool:
    """Whether the setting ``key = value`` is part of a run's identity: not null, not where-or-how, and not at the
    value that stands for its absence (``ABSENT_AT``)."""
    return value is not None and not where_or_how(key) and not (key in ABSENT_AT and value == ABSENT_AT[key])


def digest(value: Any, length: int = DIGEST_LENGTH) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``value`` as sorted JSON: folder names and cache keys."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:length]


def compare(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, first's value, second's value)`` for every key where two identities differ, by key; ``ABSENT`` for a
    missing one, an ``ABSENT_AT`` key at that value (``lra.settings.Run.differences``)."""
    first, second = {**ABSENT_AT, **first}, {**ABSENT_AT, **second}
    pairs = [(key, first.get(key, ABSENT), second.get(key, ABSENT)) for key in sorted(first.keys() | second.keys())]
    return [(key, a, b) for key, a, b in pairs if a != b]


def describe(changes: list[tuple[str, Any, Any]], shown: int = 10) -> str:
    """``"task.optim.lr: 0.001 -> 0.05; model.dim: 64 -> 32"``, the first ``shown`` of them and a count."""
    return joined([f"{key}: {a} -> {b}" for key, a, b in changes], shown)


def joined(lines: list[str], shown: int) -> str:
    """The first ``shown`` of ``lines`` joined by ``"; "``, and how many more there are."""
    text = "; ".join(lines[:shown])
    return text + (f"; and {len(lines) - shown} more" if len(lines) > shown else "")
