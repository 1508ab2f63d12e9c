"""What older records, checkpoint configs and commands mean: where the run layer reads yesterday's layouts.

Today's layouts are declared in ``lra.run.record`` (``result.json``), ``data_prep.compact`` (``manifest.json``) and
``conf/`` (commands). What changed since, and how the older form is read (``tests/lra/test_record_compat.py``
holds one fixture per layout):

- settings added to ``conf/`` after runs were recorded: a record or checkpoint that lacks one ran with its value in
  ``IMPLICIT``; a generator option a task gained after runs were made, with its value in the task's
  ``GENERATED_BEFORE`` (``lra.task_facts``, which the task's data module reads for a data folder's ``manifest.json``
  made before the option too): ``upgrade`` turns its config into today's ``lra.settings.Run`` with them, so the
  run-identity comparison (``Run.differences``), a resumed run's check (``lra.run.same_run``) and the protocol check
  of ``results`` compare it with today's configs as it ran;
- records before the ``experiment`` field (before 56f4925): the tag named the experiment (``recorded_experiment``
  says a record is one, ``experiment_for`` finds its experiment);
- the command spelling ``experiment=<name>/<task>`` (``old_experiment_spelling`` says how to write it now);
- interrupted records before they kept the time of their earlier segments (no ``earlier_segments_s``): they timed
  their last segment only (``whole_run_time``);
- segments backfilled for records from before segments say ``unknown`` for what was not recorded (``known``);
- benchmark CSVs written before a column was recorded (``has_column``: ``benchmarks.threads``'s ``choices``);
- checkpoints of one process by code before every rank's random state was kept: their one state
  ``torch_rng_state`` is today's ``torch_rng_states`` of one row (``upgrade_checkpoint``, which the run's checkpoint
  reader ``lra.run.checkpoints.RunFolderCheckpointIO`` applies to every checkpoint it loads).

No torch: ``run.py`` reads the old spelling before Hydra and torch load, and a folder's record before its
checkpoint.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..settings import Run
from ..task_facts import generated_before
from .record import DEFAULT_TAG, INTERRUPTED

# a setting of conf/ that records from before it lack: the value they ran with (a later setting gets its line here)
IMPLICIT = {"task.optim.schedule": "linear", "model.attention_dropout": 0.0, "task.batching": "random",
            "task.batching_pool": 50, "task.micro_batches": 1, "flush_subnormals": False}


def upgrade(config: Mapping[str, Any]) -> Run:
    """Today's ``Run`` of a config that a record or checkpoint kept, of any age: a setting that it lacks takes the
    value it ran with (``IMPLICIT``; a generator option, its task's ``GENERATED_BEFORE``), or its default
    (``Run.read``). Not checked: the run happened."""
    filled = copy.deepcopy(dict(config))
    task = filled.get("task") if isinstance(filled.get("task"), dict) else {}
    generator = {f"task.data.generate.{name}": value for name, value in generated_before(str(task.get("name"))).items()}
    for key, value in {**IMPLICIT, **generator}.items():
        *sections, name = key.split(".")
        node: Any = filled
        for part in sections:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and name not in node:
            node[name] = value
    return Run.read(filled)


def upgrade_checkpoint(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """``checkpoint`` as today's code reads it, changed in place: one by code before every rank's random state was
    kept holds its one state as ``torch_rng_state`` (today's ``torch_rng_states``: one row a rank, ``lra.rng_state``).
    Its settings are ``upgrade``'s to read."""
    if "torch_rng_states" not in checkpoint and "torch_rng_state" in checkpoint:
        checkpoint["torch_rng_states"] = checkpoint["torch_rng_state"][None]
    return checkpoint


def recorded_experiment(record: dict[str, Any]) -> str | None:
    """The experiment a record names ("" for none); None for records older than the ``experiment`` field."""
    if "experiment" not in record:
        return None
    return "" if record["experiment"] in (None, "") else str(record["experiment"])


def experiment_for(tag: str, conf_dir: str | Path | None = None) -> str | None:
    """The ``experiment=`` value a tag's runs were composed with, for records that do not name it: "" for the
    default tag, the tag when ``conf/experiment/<tag>.yaml`` exists, else None (unknown)."""
    if conf_dir is None:
        from ..config import CONF_DIR  # Hydra: imported only when no folder is given

        conf_dir = CONF_DIR
    conf_dir = Path(conf_dir)
    if not (conf_dir / "config.yaml").is_file():
        return None
    if tag == DEFAULT_TAG:
        return ""
    try:
        return tag if (conf_dir / "experiment" / f"{tag}.yaml").is_file() else None
    except OSError:  # a name too long for a file (a config-drift section of many settings) is no experiment's
        return None


def old_experiment_spelling(argv: Iterable[str]) -> str | None:
    """The fix for ``experiment=<name>/<task>``: an experiment is ``experiment=<name> task=<task>`` now, and
    ``conf/experiment/<name>/<task>.yaml`` holds only its settings for that task (selected alone, it would
    run without the experiment's tag and shared settings)."""
    for arg in argv:
        key, _, value = arg.partition("=")
        picked = value.split(",")
        if key.lstrip("+~") != "experiment" or not any("/" in v for v in picked):
            continue
        names = list(dict.fromkeys(v.split("/")[0] for v in picked))
        tasks = list(dict.fromkeys(v.split("/", 1)[1] for v in picked if "/" in v))
        return (f"{arg}: name the experiment and the task apart: experiment={','.join(names)} "
                f"task={','.join(tasks)} (conf/experiment/README.md lists the experiments)")
    return None


def analysis_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """An analysis record's rows as today's code labels them: report cards written before 2026-12-06 labelled their
    memory rows "MB", though the values were always MiB (``benchmarks.attention``: bytes / 2**20)."""
    rows = list(record.get("rows") or [])
    if not str(record.get("analysis", "")).startswith("report_card"):
        return rows
    return [{**r, "measure": "MiB"} if r.get("check") == "memory" and r.get("measure") == "MB" else r for r in rows]


def whole_run_time(record: Mapping[str, Any]) -> float | None:
    """``wall_time_s``, except for an interrupted record from before such records kept the time of their earlier
    segments (no ``earlier_segments_s``): it timed its last segment only."""
    timed_whole = record.get("status") != INTERRUPTED or "earlier_segments_s" in record
    return record.get("wall_time_s") if timed_whole else None


BACKFILLED = "unknown"  # what a backfilled segment says of what its run did not record (docs/design.md, section 7)


def known(value: Any) -> bool:
    """Whether a segment's value was recorded: neither absent nor ``BACKFILLED``."""
    return value is not None and value != BACKFILLED



def has_column(frame: Any, column: str) -> bool:
    """Whether a benchmark CSV (a pandas frame) has ``column``: one written before it was recorded lacks it."""
    return column in frame
