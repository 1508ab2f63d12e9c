"""Build, fit and test one ``Run`` (``lra.settings``, parsed and checked once); write its ``result.json``."""

from __future__ import annotations

import contextlib
import logging
import signal
import time
import traceback
import warnings
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import LearningRateMonitor
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities.exceptions import SIGTERMException
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from data_prep.compact import DataError
from lra_base.errors import Diverged, UserError
from lra_base.leftovers import remove_leftovers
from lra_base.lock import run_folder_lock

from ..build import build
from ..settings import Run
from .allocator import JEMALLOC_CONF, ReleaseFreedMemory, malloc_name, reuse_freed_memory
from .callbacks import (
    CheckpointOnPreemption,
    RecordSegment,
    StepProgressBar,
    StopOnDivergence,
    ValidationProgress,
    sent_signal,
    stopped_by,
)
from .checkpoints import RunFolderCheckpoint, RunFolderCheckpointIO, not_a_link, resume_point
from .disk import disk_full, full_disk_error
from .loggers import ResumableCSVLogger
from .model_summary import summary_callbacks
from .record import INTERRUPTED, RECORD_NAME, new_record, now, write_json_atomic
from .same_run import HeldRun, changes_from, refuse_other_data, refuse_other_run
from .subnormals import flush_subnormals
from .threads import FreeCoreThreads

log = logging.getLogger(__name__)
# Lightning settings that can end fitting before max_steps (named when one did: refuse_short_fit)
EARLY_STOPS = ("max_epochs", "limit_train_batches", "max_time")
# Lightning messages that do not apply to these runs: resuming into a folder with checkpoints is the point;
# the data position is restored by the DataModule (lra.data), which Lightning cannot see; a torch deprecation
# inside Lightning itself
NOISE = (r"Checkpoint directory .* exists and is not empty", r"You're resuming from a checkpoint that ended before",
         r".*isinstance\(treespec, LeafSpec\)")


class _NoLitLoggerTip(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


for _name in ("pytorch_lightning.utilities.rank_zero", "lightning_fabric.utilities.rank_zero"):
    logging.getLogger(_name).addFilter(_NoLitLoggerTip())


@contextlib.contextmanager
def without_noise() -> Iterator[None]:
    with warnings.catch_warnings():
        for pattern in NOISE:
            warnings.filterwarnings("ignore", message=pattern)
        yield


class Progress:
    """How far a run's training got: read at the end of fitting, and by the record of a run that stops before it
    (interrupted, diverged, failed), so that its steps, segments and training time so far are not lost."""

    def __init__(self):
        self.training = False  # whether Lightning began the training loop (TrainingBegins)
        self.model: pl.LightningModule | None = None
        self.trainer: pl.Trainer | None = None
        self.data: dict[str, Any] | None = None  # the data it trains on (lra.data_identity), once it is prepared
        self.fitted: dict[str, Any] | None = None  # frozen when fitting ends: testing reloads the counters

    def freeze(self) -> dict[str, Any]:
        """The fields at the end of fitting, kept from now on."""
        self.fitted = self.fields()
        return self.fitted

    def began(self) -> bool:
        """Whether the run got past its refusals (settings, checkpoint, data) into training, or through fitting."""
        return self.training or self.fitted is not None

    def fields(self) -> dict[str, Any]:
        """The record's progress fields; none before the model and trainer exist."""
        if self.fitted is not None:
            return self.fitted
        data = {} if self.data is None else {"data": self.data}
        if self.model is None or self.trainer is None:
            return data
        fit_time = self.model.fit_seconds()
        tokens = self.model.train_tokens * self.trainer.world_size
        return {**data, "fit_time_s": fit_time, "earlier_segments_s": self.model.fit_seconds_before,
                "tokens_per_s": tokens / fit_time if fit_time > 0 else None,
                "steps": self.trainer.global_step, "segments": list(self.model.segments)}


class TrainingBegins(pl.Callback):
    """Tells ``progress`` when Lightning begins training: after the data is prepared, loaded and checked and the
    checkpoint restored, so that an error before it is a refusal that writes no record."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.progress.training = True


def fit_and_test(run: Run, run_dir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Train with checkpoints on validation accuracy, test the best checkpoint; return record fields.
    ``progress`` is given the model and trainer as soon as they exist."""
    if run.flush_subnormals:  # first: torch's intra-op threads take the mode when they start
        flush_subnormals()
    pl.seed_everything(run.seed, workers=True)
    if run.reuse_freed_memory:
        reuse_freed_memory()
    if malloc_name() == "glibc" and not torch.cuda.is_available():
        log.info("malloc: glibc, which slows a long CPU run as its heap fragments (~20%% after an hour); for long runs "
                 "preload jemalloc: LD_PRELOAD=<path of libjemalloc.so.2> MALLOC_CONF=%s python run.py ... "
                 "(docs/benchmarks.md, \"Allocator over a long run\")", JEMALLOC_CONF)
    ckpt_dir = run_dir / "checkpoints"
    resume = ckpt_dir / "last.ckpt"
    resume = resume if resume.exists() and not run.trainer.get("fast_dev_run") else None
    point = resume_point(resume) if resume else None  # a damaged last.ckpt is named before any work
    start_step = point.step if point else 0
    built = build(run)  # an attention its constructor refuses fails before any data work
    datamodule, model = built.datamodule, built.model
    progress = Progress() if progress is None else progress
    progress.data = datamodule.data_identity()
    if point is not None:  # data prepared only now (lra.run.same_run compared what was there before)
        refuse_other_data(run, run_dir, HeldRun(False, resume, point.config, point.step, data=point.data),
                          progress.data)
    checkpoint = RunFolderCheckpoint(dirpath=ckpt_dir, monitor="val/acc", mode="max", save_top_k=1,
                                     filename="best-step{step}", auto_insert_metric_name=False)
    loggers = [TensorBoardLogger(run_dir, name="tensorboard", version=""),
               ResumableCSVLogger(run_dir, name="csv", version="", resume_step=start_step)]
    hint = (f"Lower task.optim.lr (now {run.task.optim.lr:g}) or clip gradients "
            f"(trainer.gradient_clip_val=1.0); last.ckpt holds the last validated state before it.")
    callbacks = [TrainingBegins(progress), RecordSegment(), checkpoint, LearningRateMonitor("step"),
                 CheckpointOnPreemption(ckpt_dir / "last.ckpt"), StopOnDivergence(hint)]
    if run.reuse_freed_memory:
        callbacks.append(ReleaseFreedMemory())
    if FreeCoreThreads.wanted():
        callbacks.append(FreeCoreThreads())
    if run.trainer["enable_progress_bar"]:
        callbacks.append(StepProgressBar())  # steps of task.max_steps, not Lightning's epochs of an unknown count
    else:
        label = f"{run.task.name}/{run.attention.name}/seed{run.seed} ({run_dir.name})"
        callbacks.append(ValidationProgress(label))
    if run.checkpoint.save_last:  # Lightning's save_last only follows improvements; this is every validation
        callbacks.append(RunFolderCheckpoint(dirpath=ckpt_dir, filename="last", monitor=None, save_top_k=1,
                                             enable_version_counter=False))
    warn_shortened_validation(run)
    arguments, summary = summary_callbacks(built.trainer_arguments)
    trainer = pl.Trainer(**arguments, callbacks=callbacks + summary, logger=loggers, default_root_dir=run_dir,
                         plugins=[RunFolderCheckpointIO()])
    progress.model, progress.trainer = model, trainer
    if resume:
        log.info("resuming from %s (step %d)", resume, start_step)
    trainer.fit(model, datamodule=datamodule, ckpt_path=str(resume) if resume else None, weights_only=True)
    fitted = progress.freeze()  # testing reloads the best checkpoint's progress counters: read them now
    refuse_short_fit(trainer, run)
    best = checkpoint.best_model_path or None
    val_acc = checkpoint.best_model_score if best else trainer.callback_metrics.get("val/acc")
    tested = trainer.test(model, datamodule=datamodule, ckpt_path=best, weights_only=True)[0]
    return {
        "metrics": {
            "val_acc": None if val_acc is None else float(val_acc),
            "test_acc": float(tested["test/acc"]),
            "test_loss": float(tested["test/loss"]),
            "majority_acc": datamodule.majority_acc(),
        },
        "params": sum(p.numel() for p in model.parameters()),
        "best_checkpoint": best,
        **fitted,
    }


def warn_shortened_validation(run: Run) -> None:
    """Say so when the Trainer validates at another interval than the configured one (``Run.validation_interval``):
    a run shorter than ``task.eval_every`` validates once, at its last step."""
    every, steps = run.trainer.get("val_check_interval"), run.validation_interval
    if steps != every:
        log.warning("max_steps=%d ends before the first validation (every %d steps, task.eval_every): validating "
                    "once, at step %d, so the run has a checkpoint to test. To shorten a run set task.max_steps "
                    "and task.eval_every.", steps, every, steps)


def refuse_short_fit(trainer: pl.Trainer, run: Run) -> None:
    """A UserError when fitting ended before the run's step bound (``trainer.max_steps``: ``task.max_steps`` unless
    overridden), or with no step where it has none: a Lightning limit such as ``+trainer.max_epochs=1`` or
    ``+trainer.max_time=...`` stopped it, and a model trained fewer steps than its run asks for is not that run, so
    it is neither tested nor recorded ``completed`` (the record says ``failed``, with this message). A debug run
    (``trainer.fast_dev_run``) is as long as Lightning makes it."""
    bound, done = trainer.max_steps, trainer.global_step
    if run.trainer.get("fast_dev_run") or (done >= bound if bound > 0 else done > 0):
        return
    limits = [f"trainer.{key}={run.trainer[key]}" for key in EARLY_STOPS if run.trainer.get(key) is not None]
    cause = ", ".join(limits) or "a Lightning setting or callback"
    where = f"at step {done} of {bound}" if bound > 0 else "before its first step"
    raise UserError(f"training stopped {where} because of {cause}, so the run is not complete (recorded failed, not "
                    f"tested): drop {'that setting' if limits else 'the limit'}; to shorten a run set task.max_steps=N "
                    f"(with task.eval_every)")


RUN_OUTPUTS = (RECORD_NAME, "checkpoints", "csv", "tensorboard")
# files a run writes or reads in place (Lightning and its loggers open them by name): never links
RUN_FILES = (RECORD_NAME, "checkpoints/last.ckpt", "csv/metrics.csv", "csv/hparams.yaml", "tensorboard/hparams.yaml")


def set_aside(run_dir: Path) -> Path:
    """Move a finished run's outputs to ``<run_dir>/replaced/<time>/`` so a redo starts from scratch."""
    dest = run_dir / "replaced" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    dest.mkdir(parents=True)
    for name in RUN_OUTPUTS:
        if (run_dir / name).exists():
            (run_dir / name).rename(dest / name)
    return dest


def run(run: Run, run_dir: Path, *, locked: bool = False) -> dict[str, Any]:
    """One run: the record is written atomically whether it completes, fails, diverges or is interrupted; a run
    refused before training (settings, a damaged checkpoint, missing or bad data) writes none.

    The run holds ``<run_dir>/run.lock`` (rank zero): a second run started in the same folder stops at once.
    ``locked``: the caller holds it already (``run.py`` takes it before Hydra writes into the folder).
    A run folder whose record says ``completed`` is left alone and its record returned with
    ``already_completed`` set; one that holds a run of other settings (``lra.run.same_run``) is a UserError naming
    them; ``rerun=true`` moves either's outputs aside and trains again (an unfinished run of the same settings
    resumes).
    """
    run_dir = Path(run_dir)
    lock = run_folder_lock(run_dir) if rank_zero_only.rank == 0 and not locked else contextlib.nullcontext()
    with lock:
        for name in RUN_FILES:
            not_a_link(run_dir / name)
        held = refuse_other_run(run, run_dir)
        if held is not None and held.completed and not run.rerun:
            return {**held.record, "already_completed": True}
        if held is not None and (held.completed or changes_from(held, run)) and rank_zero_only.rank == 0:
            log.info("rerun=true: the earlier run's outputs moved to %s", set_aside(run_dir))
        if rank_zero_only.rank == 0:
            remove_leftovers(run_dir)  # what a run killed with kill -9 left (lra_base.leftovers)
        return train_and_record(run, run_dir)


def train_and_record(run: Run, run_dir: Path) -> dict[str, Any]:
    """``fit_and_test`` with the record written in every outcome but a refusal: a ``UserError`` or a data
    problem (``data_prep``'s ``DataError``) before training begins (settings, a damaged checkpoint, missing or bad
    data) writes no record, so that no ``failed`` run is listed for a command that never trained (the folder keeps
    the record it had); it is raised as a UserError marked ``before_training`` (``lra_base.errors``)."""
    record, progress, refused = new_record(run, run_dir), Progress(), False
    start = time.perf_counter()
    try:
        with without_noise():
            record.update(fit_and_test(run, run_dir, progress))
        record["status"] = "completed"
    except (UserError, DataError) as err:
        if not progress.began():
            refused = True
            raise refusal(err) from None
        if not isinstance(err, UserError):  # bad data found while training: a failure, with its traceback
            record["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            raise
        record["error"] = str(err)
        raise
    except Diverged as err:
        record["status"], record["error"] = "diverged", str(err)
        raise
    except SIGTERMException as err:
        record["status"] = INTERRUPTED
        record["error"] = f"{stopped_by(sent_signal(err))}; last.ckpt saved: rerun the same command to resume"
        raise
    except (KeyboardInterrupt, SystemExit) as err:
        if isinstance(err, SystemExit) and not isinstance(err.__context__, KeyboardInterrupt):
            record["error"] = f"SystemExit: {err}\n{traceback.format_exc()}"
            raise
        # a second Ctrl-C (Lightning turns it into exit 1), or Ctrl-C outside training
        record["status"] = INTERRUPTED
        record["error"] = f"{stopped_by(signal.SIGINT)} at once: rerun the same command to resume from the last " \
                          f"validation"
        raise KeyboardInterrupt from None
    except BaseException as err:
        if full_disk_error(err) is not None:  # a logger's or Lightning's own write: one line, not a traceback
            full = disk_full(run_dir, "the run's logs or checkpoints")
            record["error"] = str(full)
            raise full from None
        record["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        raise
    finally:
        if not refused:
            finish_record(run_dir, record, progress, time.perf_counter() - start)
    return record


def refusal(err: UserError | DataError) -> UserError:
    """``err`` as the UserError of a run refused before training (``run.py`` prints it in one line), marked
    ``before_training`` (``lra_base.errors.refused_before_training``)."""
    refused = err if isinstance(err, UserError) else UserError(str(err))
    refused.before_training = True  # type: ignore[attr-defined]
    return refused


def finish_record(run_dir: Path, record: dict[str, Any], progress: Progress, seconds: float) -> None:
    """Complete ``record`` with how far the run got and its times, and write it (rank zero)."""
    if record["status"] != "completed":  # how far it got: steps, segments, training time so far
        record.update(progress.fields())
    # an interrupted-then-resumed run counts the training time of its earlier segments too
    record["wall_time_s"] = seconds + record.get("earlier_segments_s", 0.0)
    record["finished_at"] = now()
    if rank_zero_only.rank == 0:  # one record per run, also under DDP
        write_record(run_dir, record)


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Write ``result.json``; on a full disk, a ``DiskFull`` saying so (the previous record stays whole)."""
    try:
        write_json_atomic(run_dir / RECORD_NAME, record)
    except OSError as err:
        if full_disk_error(err) is None:
            raise
        raise disk_full(run_dir, f"{RECORD_NAME} (status {record['status']})") from None
