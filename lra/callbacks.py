"""Callbacks: checkpoint on preemption signals so that rerunning the command resumes exactly."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


class CheckpointOnPreemption(pl.Callback):
    """SIGTERM (and SIGUSR1, turned into SIGTERM) stops training at the end of the current batch;
    this saves ``last.ckpt`` there, with the data position and RNG state, so a rerun resumes exactly.

    Lightning's own SLURM plugin takes SIGUSR1 over when it runs under SLURM with auto-requeue.
    """

    def __init__(self, path: Path):
        self.path = Path(path)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and hasattr(signal, "SIGUSR1"):
            signal.signal(signal.SIGUSR1, lambda *_: os.kill(os.getpid(), signal.SIGTERM))

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != "fit":
            return
        if trainer.validating:  # stopped inside a validation pass: the last.ckpt before it is the consistent one
            log.warning("preempted during validation at step %d; resume from the previous %s",
                        trainer.global_step, self.path)
            return
        if at_epoch_end(trainer):
            start_next_epoch(trainer)
        trainer.save_checkpoint(self.path)
        log.warning("preempted at step %d: saved %s; rerun the same command to resume", trainer.global_step, self.path)


def at_epoch_end(trainer: pl.Trainer) -> bool:
    """Stopped between epochs: the last epoch is counted complete and the next has not started."""
    epochs = trainer.fit_loop.epoch_progress.current
    return epochs.completed == epochs.started


def start_next_epoch(trainer: pl.Trainer) -> None:
    """Zero the per-epoch counters as the next epoch's start would.

    Lightning 2.6 keeps them when it restores a checkpoint, so one saved between epochs would resume with
    the finished epoch's batch count: the next epoch would end after one batch and the data order shift.
    """
    epoch_loop = trainer.fit_loop.epoch_loop
    epoch_loop.batch_progress.reset_on_run()
    epoch_loop.scheduler_progress.reset_on_run()
    epoch_loop.automatic_optimization.optim_progress.reset_on_run()
