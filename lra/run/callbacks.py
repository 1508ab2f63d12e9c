"""Callbacks: checkpoint on preemption signals and Ctrl-C so that a rerun resumes exactly; stop a diverged run;
name each training segment's machine; show progress in steps of ``task.max_steps``."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import Tqdm
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra_base.errors import Diverged

from .machine import describe

log = logging.getLogger(__name__)


# how the log, the record and run.py name the signal the user sent
SIGNAL_WORDS = {signal.SIGINT: "interrupted (Ctrl-C, SIGINT)", signal.SIGTERM: "stopped by SIGTERM"}


def stop_signal(exception: BaseException) -> int:
    """The signal that stopped a run, as its exit status counts it (``SIGTERMException.signum``, set by
    ``CheckpointOnPreemption``): SIGINT for Ctrl-C, SIGTERM for SIGTERM and SIGUSR1."""
    return int(getattr(exception, "signum", signal.SIGTERM))


def sent_signal(exception: BaseException) -> int:
    """The signal the user sent to stop a run (``SIGTERMException.user_signal``): SIGINT, SIGTERM or SIGUSR1."""
    return int(getattr(exception, "user_signal", stop_signal(exception)))


def stopped_by(signum: int) -> str:
    """The words for a run stopped by ``signum``: ``interrupted (Ctrl-C, SIGINT)``, ``stopped by SIGTERM``."""
    return SIGNAL_WORDS.get(signum) or f"stopped by {signal.Signals(signum).name}"


class CheckpointOnPreemption(pl.Callback):
    """SIGTERM (and SIGUSR1 or a first Ctrl-C, both turned into SIGTERM) stops training at the end of the
    current batch; this saves ``last.ckpt`` there, with the data position and RNG state, so a rerun resumes
    exactly. A second Ctrl-C stops at once. The ``SIGTERMException`` carries the signal as ``signum`` (the exit
    status's) and the one the user sent as ``user_signal``; the log names the latter (``stopped_by``).

    With ``task.micro_batches`` the stop waits for the last part of the batch: the parts' summed gradients
    are not saved, so a checkpoint between them would resume with part of a step lost.

    Under SLURM with auto-requeue this replaces Lightning's own SIGUSR1 handler (which would save an ``hpc_ckpt``
    mid-step and requeue): the stop is the same everywhere. Before training starts (data setup, a resume's restore)
    SIGUSR1 still has its default action, which ends the process; ``last.ckpt`` is the one from before.

    Under DDP the signal may reach one rank, or the ranks at different moments, and every rank must stop after
    the same batch: a signal only marks this rank (``note_sigterm``, in place of Lightning's notifier, which
    broadcasts from inside the handler), and at each training batch's end the ranks reduce their marks into the
    flag Lightning stops on. A signal during validation stops after the pass.

    A signal during the test stage (the best checkpoint's test, after training) lets the test finish: Lightning
    would stop it after the current batch, and the record would say ``interrupted`` with no metrics although the
    training was done. The test is one pass over the test split, so the run completes and is recorded so.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.signum = signal.SIGTERM  # how the exit status counts it (stop_signal)
        self.user_signal = signal.SIGTERM  # the signal the user sent (sent_signal): SIGINT, SIGTERM or SIGUSR1
        self._sigint_before = None
        self._deferred = False
        self._marked = False  # under DDP: this rank received SIGTERM, not yet agreed on

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # before Lightning registers its handlers (every stage), which compose this in place of its notifier
        notifier = self.note_sigterm if trainer.world_size > 1 else self.notice_sigterm
        trainer._signal_connector._sigterm_notifier_fn = partial(notifier, trainer)

    def notice_sigterm(self, trainer: pl.Trainer, signum, frame) -> None:
        """SIGTERM in a single process: Lightning's notifier (set the flag it stops on, pass the signal to a
        launcher's processes), with a line naming the signal the user sent, where Lightning's says ``Received
        SIGTERM: 15`` for a Ctrl-C too."""
        signals = trainer._signal_connector
        if not signals.received_sigterm:
            if self.user_signal != signal.SIGINT:  # _on_ctrl_c said it already
                after = ": stopping at the end of this batch" if trainer.state.fn == "fit" else ""
                log.warning("%s%s", stopped_by(self.user_signal), after)
            if trainer.strategy.launcher is not None:
                trainer.strategy.launcher.kill(signum)
        signals.received_sigterm = True

    def note_sigterm(self, trainer: pl.Trainer, signum, frame) -> None:
        """SIGTERM under DDP: mark this rank; rank zero passes it on to the other local ranks once, as Lightning
        does. No collective here: only the signalled rank runs a handler."""
        if not self._marked and trainer.strategy.launcher is not None:
            trainer.strategy.launcher.kill(signum)
        self._marked = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._catch_ctrl_c()  # here Lightning's SIGTERM handler is in place: before, SIGTERM would kill
        self._catch_sigusr1()

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._catch_ctrl_c()
        self._catch_sigusr1()

    def _catch_sigusr1(self) -> None:
        """SIGUSR1 to ``_on_sigusr1`` (over Lightning's SLURM requeue handler too), set after Lightning has noted the
        handlers it puts back at its teardown in every outcome, so no later SIGUSR1 to this process reaches an
        ended run (set in ``setup``, it was among those put back)."""
        if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGUSR1, self._on_sigusr1)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._sigint_before is not None:
            signal.signal(signal.SIGINT, self._sigint_before)
            self._sigint_before = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        between_parts = trainer.fit_loop.epoch_loop._should_accumulate()
        signals = trainer._signal_connector  # holds the flag Lightning checks right after this hook
        received = signals.received_sigterm
        if trainer.world_size > 1:  # every rank stops after the same batch: one stopping alone leaves the others
            received = trainer.strategy.reduce_boolean_decision(self._marked, all=False)  # waiting in a collective
        if received and between_parts:
            signals.received_sigterm, self._deferred = False, True
            log.warning("stopping after the last part of this batch (task.micro_batches)")
        elif self._deferred and not between_parts:
            signals.received_sigterm, self._deferred = True, False
        else:
            signals.received_sigterm = received

    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        """Clear the flag Lightning's test loop checks right after this hook, so a signal lets the test finish."""
        signals = trainer._signal_connector
        if signals.received_sigterm:
            signals.received_sigterm = False
            log.warning("stop signal during the test: training is done, so the test finishes and the run completes")

    def _catch_ctrl_c(self) -> None:
        if threading.current_thread() is threading.main_thread() and self._sigint_before is None:
            self._sigint_before = signal.signal(signal.SIGINT, self._on_ctrl_c)

    def _on_ctrl_c(self, signum, frame) -> None:
        self.signum = self.user_signal = signal.SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops at once
        log.warning("%s: stopping at the end of this batch (press Ctrl-C again to stop at once)",
                    stopped_by(signal.SIGINT))
        os.kill(os.getpid(), signal.SIGTERM)

    def _on_sigusr1(self, signum, frame) -> None:
        """SIGUSR1 stops a run as SIGTERM does (and exits as SIGTERM), named as what it is."""
        self.user_signal = signal.SIGUSR1
        os.kill(os.getpid(), signal.SIGTERM)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            exception.signum, exception.user_signal = self.signum, self.user_signal
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != "fit":
            return
        if trainer.validating:  # stopped inside a validation pass: the last.ckpt before it is the consistent one
            log.warning("%s during validation at step %d; resume from the previous %s",
                        stopped_by(self.user_signal), trainer.global_step, self.path)
            return
        if at_epoch_end(trainer):
            start_next_epoch(trainer)
        trainer.save_checkpoint(self.path, weights_only=False)
        log.warning("%s at step %d: saved %s; rerun the same command to resume", stopped_by(self.user_signal),
                    trainer.global_step, self.path)


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


class StopOnDivergence(pl.Callback):
    """A non-finite training, validation or test loss raises ``Diverged`` (the run is recorded ``diverged``).

    The training loss is checked after every step on the CPU; on an accelerator a device-side flag collects
    every step and is read (one host sync) only at logging steps; under DDP the ranks decide together.
    Validation (its loss synced over the ranks) is checked before the checkpoint callbacks save, so no
    checkpoint holds the diverged state.
    """

    def __init__(self, hint: str):
        self.hint = hint
        self.bad: torch.Tensor | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            bad = ~torch.isfinite(loss.detach()).all()
            self.bad = bad if self.bad is None else self.bad | bad
        elif trainer.world_size == 1:
            return
        if pl_module.device.type == "cpu" or trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
            here = self.bad is not None and bool(self.bad.item())  # the same condition on every rank: a collective
            anywhere = here if trainer.world_size == 1 else trainer.strategy.reduce_boolean_decision(here, all=False)
            if anywhere:  # every rank stops at once: one rank raising alone would leave the others waiting
                value = loss.item() if isinstance(loss, torch.Tensor) else None
                where = "" if here else " on this process, non-finite on another"
                raise Diverged(f"the training loss is {value}{where} at step {trainer.global_step} "
                               f"(non-finite from this step or shortly before): the run diverged. {self.hint}")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, "val/loss", "validation")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer, "test/loss", "test")

    def _check(self, trainer: pl.Trainer, key: str, stage: str) -> None:
        loss = trainer.callback_metrics.get(key)
        if loss is not None and not torch.isfinite(loss).all():
            raise Diverged(f"the {stage} loss is {float(loss)} after step {trainer.global_step}: the run diverged. "
                           f"{self.hint}")


class RecordSegment(pl.Callback):
    """Each training segment (the first, and each resume) in the module's ``segments``, which its checkpoints and the
    run's record keep: the step it starts from (after a resume has restored it), its machine (``describe``), the
    Trainer's precision and torch's version."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        machine = describe(pl_module.device, trainer.world_size)
        pl_module.segments.append({"from_step": int(trainer.global_step), **machine,
                                   "precision": str(trainer.precision), "torch": str(torch.__version__)})


class ValidationProgress(pl.Callback):
    """One line per validation on stderr when there is no progress bar (``nohup`` logs, analyses' workers):
    ``<label>: step S/T val_acc A (best B), E min elapsed, ~R min to go`` (rate of this segment)."""

    def __init__(self, label: str):
        self.label = label
        self._start: tuple[float, int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        acc = trainer.callback_metrics.get("val/acc")
        if trainer.sanity_checking or acc is None or self._start is None or not trainer.is_global_zero:
            return
        step, total = trainer.global_step, trainer.max_steps
        elapsed = time.perf_counter() - self._start[0]
        done = step - self._start[1]
        to_go = f", ~{elapsed / done * (total - step) / 60:.1f} min to go" if done > 0 and total > step else ""
        earlier = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
        best = max(float(acc), float(earlier)) if earlier is not None else float(acc)  # it may save after us
        best_text = f" (best {best:.4f})"
        print(f"{self.label}: step {step}/{total} val_acc {float(acc):.4f}{best_text}, {elapsed / 60:.1f} min "
              f"elapsed{to_go}", file=sys.stderr, flush=True)


class StepProgressBar(TQDMProgressBar):
    """Lightning's TQDM progress bar, counting optimizer steps up to ``trainer.max_steps`` (``task.max_steps``).

    A run is bounded by steps, not epochs (Lightning then sets ``max_epochs=-1``), so Lightning's own bars count
    the batches of the current epoch ("Epoch 0/-2" in the rich one); this one reads ``step: 40%|... | 200/500``
    for the whole run. A resumed run's bar starts at the step it resumed from, and its rate and time to go count
    this segment's steps only (tqdm's ``initial``). Without a step bound (``max_steps=-1``) it is Lightning's
    bar unchanged.
    """

    DESCRIPTION = "step"

    @staticmethod
    def counts_steps(trainer: pl.Trainer) -> bool:
        return trainer.max_steps > 0

    def init_train_tqdm(self) -> Tqdm:
        """The training bar: ``global_step`` of ``max_steps`` done (Lightning's settings otherwise)."""
        if not self.counts_steps(self.trainer):
            return super().init_train_tqdm()
        step = self.trainer.global_step
        return Tqdm(desc=self.DESCRIPTION, total=self.trainer.max_steps, initial=step, unit="step",
                    position=2 * self.process_position, disable=self.is_disabled, leave=True, dynamic_ncols=True,
                    file=sys.stdout, smoothing=0, bar_format=self.BAR_FORMAT)

    def on_train_epoch_start(self, trainer: pl.Trainer, *args) -> None:
        if not self.counts_steps(trainer):
            super().on_train_epoch_start(trainer, *args)
        # else: one bar for the whole run, a new epoch does not restart it

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if not self.counts_steps(trainer):
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        bar, step = self.train_progress_bar, trainer.global_step  # with task.micro_batches: whole steps only
        if self.is_enabled and not bar.disable and (step % self.refresh_rate == 0 or step == bar.total):
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes the bar

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.counts_steps(trainer):
            return super().on_train_epoch_end(trainer, pl_module)
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
