"""Build, fit and test one run from a resolved config; write its ``result.json``."""

from __future__ import annotations

import importlib
import json
import logging
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities.exceptions import SIGTERMException
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from .allocator import reuse_freed_memory
from .callbacks import CheckpointOnPreemption
from .errors import UserError
from .loggers import ResumableCSVLogger
from .module import attention_factory
from .record import git_sha, package_versions, write_json_atomic

log = logging.getLogger(__name__)
PROJECT_ROOT = Path(__file__).resolve().parents[1]
TASKS_DIR = Path(__file__).resolve().parent / "tasks"


def task_module(name: str):
    """``lra.tasks.<name>``, which defines ``DataModule`` and ``LitModule``."""
    valid = sorted(p.stem for p in TASKS_DIR.glob("*.py") if not p.stem.startswith("_"))
    if name not in valid:
        raise UserError(f"unknown task {name!r}; valid tasks: {', '.join(valid)}")
    return importlib.import_module(f"lra.tasks.{name}")


def fit_and_test(cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Train with checkpoints on validation accuracy, test the best checkpoint; return record fields."""
    pl.seed_everything(cfg["seed"], workers=True)
    if cfg.get("reuse_freed_memory", True):
        reuse_freed_memory()
    tasks = task_module(cfg["task"]["name"])
    attention_factory(cfg, cfg["task"]["max_len"])  # a bad attention option fails before any data work
    datamodule = tasks.DataModule(cfg)
    datamodule.prepare_data()
    datamodule.setup()
    model = tasks.LitModule(cfg, datamodule.vocab_size, datamodule.num_classes)
    ckpt_dir = run_dir / "checkpoints"
    checkpoint = ModelCheckpoint(dirpath=ckpt_dir, monitor="val/acc", mode="max", save_top_k=1,
                                 filename="best-step{step}", auto_insert_metric_name=False)
    loggers = [TensorBoardLogger(run_dir, name="tensorboard", version=""),
               ResumableCSVLogger(run_dir, name="csv", version="")]
    resume = ckpt_dir / "last.ckpt"
    callbacks = [checkpoint, LearningRateMonitor("step"), CheckpointOnPreemption(resume)]
    if cfg["checkpoint"]["save_last"]:  # Lightning's save_last only follows improvements; this is every validation
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename=resume.stem, monitor=None, save_top_k=1,
                                         enable_version_counter=False))
    trainer = pl.Trainer(**cfg["trainer"], callbacks=callbacks, logger=loggers, default_root_dir=run_dir)
    resume_path = str(resume) if resume.exists() and not trainer.fast_dev_run else None
    if resume_path:
        log.info("resuming from %s", resume_path)
    trainer.fit(model, datamodule=datamodule, ckpt_path=resume_path, weights_only=True)
    # testing reloads the best checkpoint's progress counters: read them now
    fit_time, train_tokens, earlier = model.fit_seconds(), model.train_tokens, model.fit_seconds_before
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
        "fit_time_s": fit_time,
        "earlier_segments_s": earlier,
        "tokens_per_s": train_tokens * trainer.world_size / fit_time if fit_time > 0 else None,
        "best_checkpoint": best,
        "steps": trainer.global_step,
    }


RUN_OUTPUTS = ("result.json", "checkpoints", "csv", "tensorboard")


def completed_record(run_dir: Path) -> dict[str, Any] | None:
    """The run folder's record when it says the run completed, else None."""
    try:
        record = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("status") == "completed" else None


def set_aside(run_dir: Path) -> Path:
    """Move a finished run's outputs to ``<run_dir>/replaced/<time>/`` so a redo starts from scratch."""
    dest = run_dir / "replaced" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    dest.mkdir(parents=True)
    for name in RUN_OUTPUTS:
        if (run_dir / name).exists():
            (run_dir / name).rename(dest / name)
    return dest


def run(cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """One run: the record is written atomically whether it completes or fails.

    A run folder whose record says ``completed`` is left alone and its record returned with
    ``already_completed`` set; ``rerun=true`` moves its outputs aside and trains again.
    """
    if (previous := completed_record(run_dir)) is not None:
        if not cfg.get("rerun"):
            return {**previous, "already_completed": True}
        if rank_zero_only.rank == 0:
            log.info("rerun=true: the completed run's outputs moved to %s", set_aside(run_dir))
    record: dict[str, Any] = {
        "task": cfg["task"]["name"], "attention": cfg["attention"]["name"], "seed": cfg["seed"],
        "tag": cfg.get("tag"), "status": "failed", "error": None, "metrics": {}, "config": cfg,
        "git_sha": git_sha(PROJECT_ROOT), "versions": package_versions(), "run_dir": str(run_dir),
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    start = time.perf_counter()
    try:
        record.update(fit_and_test(cfg, run_dir))
        record["status"] = "completed"
    except UserError as err:
        record["error"] = str(err)
        raise
    except SIGTERMException:
        record["status"] = "interrupted"
        record["error"] = "stopped by SIGTERM/SIGUSR1; last.ckpt saved: rerun the same command to resume"
        raise
    except BaseException as err:
        record["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        raise
    finally:
        # an interrupted-then-resumed run counts the training time of its earlier segments too
        record["wall_time_s"] = time.perf_counter() - start + record.get("earlier_segments_s", 0.0)
        record["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if rank_zero_only.rank == 0:  # one record per run, also under DDP
            write_json_atomic(run_dir / "result.json", record)
    return record
