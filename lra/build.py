"""One build path from a config to what trains: ``build(cfg)`` returns the task's data module (prepared and set
up), its LightningModule and Lightning's ``Trainer`` arguments.

``lra.train`` (``run.py``), the analyses and the benchmarks build through here, so each of them trains or times
what ``python run.py`` would: config -> task module (``lra/tasks/<task>.py``) -> ``DataModule`` -> ``LitModule``.
A task is one module defining ``DataModule`` and ``LitModule``; nothing else names tasks.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lra_base.errors import UserError

from .module import ClassificationModule, attention_factory
from .settings import complete, trainer_arguments

TASKS_DIR = Path(__file__).resolve().parent / "tasks"


def task_names() -> list[str]:
    """The tasks, one module each in ``lra/tasks/`` (with its ``conf/task/<name>.yaml``), sorted."""
    return sorted(p.stem for p in TASKS_DIR.glob("*.py") if not p.stem.startswith("_"))


def task_module(name: str):
    """``lra.tasks.<name>``, which defines ``DataModule`` and ``LitModule``."""
    valid = task_names()
    if name not in valid:
        raise UserError(f"unknown task {name!r}; valid tasks: {', '.join(valid)}")
    return importlib.import_module(f"lra.tasks.{name}")


@dataclass
class Built:
    """What one config trains: its data, its model and the ``Trainer`` arguments (``lra.settings``)."""

    datamodule: Any  # the task's DataModule, prepared and set up
    model: ClassificationModule  # the task's LitModule, freshly initialised
    trainer_arguments: dict[str, Any]


def build_data(cfg: dict[str, Any]):
    """The task's ``DataModule`` for ``cfg``, its data prepared (generated when missing) and loaded."""
    datamodule = task_module(cfg["task"]["name"]).DataModule(complete(cfg))
    datamodule.prepare_data()
    datamodule.setup()
    return datamodule


def build_model(cfg: dict[str, Any], vocab_size: int, num_classes: int) -> ClassificationModule:
    """The task's ``LitModule`` for ``cfg`` and the data's vocabulary and classes (weights drawn from torch's RNG)."""
    return task_module(cfg["task"]["name"]).LitModule(complete(cfg), vocab_size, num_classes)


def build(cfg: dict[str, Any]) -> Built:
    """Data, model and ``Trainer`` arguments of ``cfg``; a bad attention option fails before any data work."""
    cfg = complete(cfg)
    attention_factory(cfg, cfg["task"]["max_len"])  # on the meta device: draws nothing
    datamodule = build_data(cfg)
    model = build_model(cfg, datamodule.vocab_size, datamodule.num_classes)
    return Built(datamodule, model, trainer_arguments(cfg))


def example_batch(cfg: dict[str, Any], batch_size: int, vocab_size: int, generator) -> dict[str, Any]:
    """A full-length random batch laid out as the task lays out its own (``DataModule.example_batch``)."""
    task = complete(cfg)["task"]
    return task_module(task["name"]).DataModule.example_batch(task, batch_size, vocab_size, generator)


def plain_training(cfg: dict[str, Any], lr: float = 1e-4):
    """The task's data (set up) and model (train mode) of ``cfg`` and ``step(batch)``: one forward, loss, backward
    and AdamW update outside Lightning, the model's own cost (probes and ``benchmarks.ar_step``)."""
    from .optimizer import adamw

    built = build(cfg)
    model = built.model.train()
    optimizer = adamw(model.parameters(), lr=lr)

    def step(batch) -> None:
        loss = model.model_step(batch)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return built.datamodule, model, step
