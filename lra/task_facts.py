"""What each task is, in one place per task: its module ``lra/tasks/<task>.py`` declares its facts at the top, and
this module reads them from the source (``ast``), so the checks made before torch loads and ``results`` know every
task without importing one (a task module imports torch and Lightning).

A task module declares, as literals:

- ``LRA_COLUMN``: its column in the LRA paper's tables (arXiv 2011.04006; 1 ListOps ... 6 Path-X), the order of
  every table's columns; None for a task that is not LRA's (``ar``);
- ``AVERAGED``: whether the LRA average counts it (the five classic tasks; no model of the paper solved Path-X);
- ``LENGTH_VARYING``: whether its sequences have many lengths, so that ``task.batching=length_grouped`` saves
  padding (``lra.sampling``);
- optionally ``GENERATED_BEFORE``: for each ``task.data.generate`` option its generator gained after data folders
  and runs were made, the value those were made with; a data folder's manifest (its data module) and an old record
  or checkpoint (``lra.run.record_compat.upgrade``) that lack the option read it so. ``{}`` when left out.

Its data folder is ``conf/task/<task>.yaml`` 's ``data.root`` (``<data_dir>/<task>/``), its name the module's.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
FACTS = ("LRA_COLUMN", "AVERAGED", "LENGTH_VARYING")
OPTIONAL_FACTS = {"GENERATED_BEFORE": {}}


@cache
def task_facts(tasks_dir: Path = TASKS_DIR) -> dict[str, dict[str, Any]]:
    """``{task: {fact: value}}`` for every module of ``tasks_dir``, in table order: LRA's columns, then the
    others by name. A module that leaves a fact out is a ``ValueError`` naming it."""
    found = {}
    for path in sorted(tasks_dir.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        declared = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
                node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None
            if isinstance(target, ast.Name) and target.id in (*FACTS, *OPTIONAL_FACTS):
                declared[target.id] = ast.literal_eval(node.value)
        if missing := [fact for fact in FACTS if fact not in declared]:
            raise ValueError(f"{path}: a task module declares {', '.join(FACTS)}; it lacks {', '.join(missing)}")
        found[path.stem] = {**OPTIONAL_FACTS, **declared}
    column = {name: facts["LRA_COLUMN"] for name, facts in found.items()}
    order = sorted(found, key=lambda name: (column[name] is None, column[name] or 0, name))
    return {name: found[name] for name in order}


def task_names() -> list[str]:
    """Every task, sorted by name."""
    return sorted(task_facts())


def lra_tasks() -> tuple[str, ...]:
    """LRA's tasks in its tables' order."""
    return tuple(name for name, facts in task_facts().items() if facts["LRA_COLUMN"] is not None)


def averaged_tasks() -> tuple[str, ...]:
    """The tasks the LRA average counts, in table order."""
    return tuple(name for name, facts in task_facts().items() if facts["AVERAGED"])


def length_varying_tasks() -> tuple[str, ...]:
    """The tasks whose sequences have many lengths, in table order."""
    return tuple(name for name, facts in task_facts().items() if facts["LENGTH_VARYING"])


def generated_before(task: str) -> dict[str, Any]:
    """``GENERATED_BEFORE`` of ``task`` (``{}`` for a task this folder does not hold)."""
    return dict(task_facts().get(task, {}).get("GENERATED_BEFORE", {}))
