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
        trainer.save_checkpoint(self.path)
        log.warning("preempted at step %d: saved %s; rerun the same command to resume", trainer.global_step, self.path)
