"""The values older runs used for settings added to ``conf/`` after them, without naming them.

A record, checkpoint or config that lacks one of ``IMPLICIT`` 's keys ran with that value: the run-identity
comparison (``lra.settings.Run.differences``) reads it so, ``lra.run.record_compat.upgrade`` turns such a config into
today's ``Run`` with it, and the protocol check of ``results`` does the same. A setting added to ``conf/`` later gets
its line here, with the value that reproduces the runs before it. Generator options added after data folders were
made count too: a ``manifest.json`` (or a config) without one was made with its value (``with_implicit``, read by
the generated tasks' data modules).

The settings layer's part of reading older layouts; the rest (records, commands, checkpoints) is
``lra.run.record_compat``'s. No imports: ``lra.settings`` builds on it.
"""

from __future__ import annotations

from typing import Any

IMPLICIT = {"task.optim.schedule": "linear", "model.attention_dropout": 0.0,
            "task.data.generate.contour_length": 14, "task.data.generate.close_brackets": True,
            "task.batching": "random", "task.batching_pool": 50, "task.micro_batches": 1,
            "flush_subnormals": False}


def with_implicit(settings: dict[str, Any], section: str) -> dict[str, Any]:
    """``settings`` of the dotted ``section`` (e.g. a manifest's generator ``source`` for ``task.data.generate``)
    with the ``IMPLICIT`` values of the keys directly under it filled in where absent."""
    prefix = f"{section}."
    leaves = {key[len(prefix):]: value for key, value in IMPLICIT.items()
              if key.startswith(prefix) and "." not in key[len(prefix):]}
    return {**leaves, **settings}
