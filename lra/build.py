"""One build path from a ``Run`` to what trains: ``build(run)`` returns the task's data module (prepared and set up),
its LightningModule and Lightning's ``Trainer`` arguments.

``lra.run.train`` (``run.py``), the analyses and the benchmarks build through here, so each of them trains or times
what ``python run.py`` would: run -> task module (``lra/tasks/<task>.py``) -> ``DataModule`` -> ``LitModule``.
A task is one module defining ``DataModule``, ``LitModule`` and its facts (``lra.task_facts``); nothing else names
tasks.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from lra_base.errors import UserError

from .module import ClassificationModule, check_attention_builds
from .settings import Run
from .task_facts import task_names


def task_module(name: str):
    """``lra.tasks.<name>``, which defines ``DataModule`` and ``LitModule``."""
    valid = task_names()
    if name not in valid:
        raise UserError(f"unknown task {name!r}; valid tasks: {', '.join(valid)}")
    return importlib.import_module(f"lra.tasks.{name}")


@dataclass
class Built:
    """What one run trains: its data, its model and the ``Trainer`` arguments (``Run.trainer_arguments``)."""

    datamodule: Any  # the task's DataModule, prepared and set up
    model: ClassificationModule  # the task's LitModule, freshly initialised
    trainer_arguments: dict[str, Any]


def build_data(run: Run):
    """The task's ``DataModule`` for ``run``, its data prepared (generated when missing) and loaded."""
    datamodule = task_module(run.task.name).DataModule(run)
    datamodule.prepare_data()
    datamodule.setup()
    return datamodule


def build_model(run: Run, vocab_size: int, num_classes: int) -> ClassificationModule:
    """The task's ``LitModule`` for ``run`` and the data's vocabulary and classes (weights drawn from torch's RNG)."""
    return task_module(run.task.name).LitModule(run, vocab_size, num_classes)


def build(run: Run) -> Built:
    """Data, model and ``Trainer`` arguments of ``run``; an attention its constructor refuses, or a DDP trainer on a
    machine without a GPU, fails before any data work."""
    check_attention_builds(run)  # on the meta device: draws nothing
    refuse_ddp_without_gpu(run.trainer)
    datamodule = build_data(run)
    model = build_model(run, datamodule.vocab_size, datamodule.num_classes)
    return Built(datamodule, model, run.trainer_arguments)


def refuse_ddp_without_gpu(trainer: Mapping[str, Any]) -> None:
    """``trainer=ddp`` (accelerator ``auto``, ``bf16-mixed``) where torch sees no GPU is refused: Lightning would run
    one process on the CPU in bf16 autocast, neither DDP nor the CPU's float32, without a word."""
    if trainer.get("accelerator") == "auto" and str(trainer.get("strategy", "")).startswith("ddp") \
            and not torch.cuda.is_available():
        raise UserError(f"trainer.strategy={trainer['strategy']} with trainer.accelerator=auto found no GPU (torch "
                        f"sees none), so it would run one {trainer.get('precision')} process on the CPU: on a CPU use "
                        f"trainer=ddp_cpu (float32 processes, trainer.devices of them), or set trainer.accelerator=cpu "
                        f"to choose the rest yourself")


def example_batch(run: Run, batch_size: int, vocab_size: int, generator) -> dict[str, Any]:
    """A full-length random batch laid out as the task lays out its own (``DataModule.example_batch``)."""
    return task_module(run.task.name).DataModule.example_batch(run.task, batch_size, vocab_size, generator)


def plain_training(run: Run, lr: float = 1e-4):
    """The task's data (set up) and model (train mode) of ``run`` and ``step(batch)``: one forward, loss, backward
    and AdamW update outside Lightning, the model's own cost (probes and ``benchmarks.ar_step``)."""
    from .optimizer import adamw

    built = build(run)
    model = built.model.train()
    optimizer = adamw(model.parameters(), lr=lr)

    def step(batch) -> None:
        loss = model.model_step(batch)[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return built.datamodule, model, step
