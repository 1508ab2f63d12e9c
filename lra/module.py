"""The shared classification LightningModule: encoder + head, loss, accuracy, AdamW with warmup/decay."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

import attention_zoo
from lra_base.errors import UserError

from . import rng_state
from .data_identity import CHECKPOINT_KEY
from .model import ClassifierHead, Encoder
from .optimizer import adamw
from .schedules import scheduler
from .settings import Model, Run


def attention_factory(run: Run, zoo: ModuleType = attention_zoo) -> Callable[[int], nn.Module]:
    """A builder ``make(layer=0)`` of the run's attention from ``zoo`` (``attention_zoo``, or another version of it:
    ``benchmarks.attention_versions``), its options as ``Run.parse`` checked them against the registry's.

    Mechanisms with a ``seed`` option (fixed random features) get a distinct seed per layer and per run
    seed, as PolySketchFormer folds the layer index into its sketch key. ``task.causal: true`` makes the
    attention causal. ``model.attention_dropout`` (LRA's ``attention_dropout_rate``) goes to the mechanisms
    that have attention weights to drop (a ``dropout`` option); the others have none and ignore it.
    """
    name, options, model = run.attention.name, dict(run.attention.options), run.model
    declared = zoo.options(name) if name in zoo.available() else {}
    if run.task.causal:  # token-level tasks that predict from the past only (ar)
        options["causal"] = True
    if model.attention_dropout and "dropout" in declared:
        options["dropout"] = float(model.attention_dropout)
    seeded = "seed" in declared
    base_seed = int(options.pop("seed", 0)) if seeded else 0
    head_dim = (model.qkv_dim or model.dim) // model.heads

    def make(layer: int = 0) -> nn.Module:
        extra = {"seed": base_seed + 1000 * run.seed + layer} if seeded else {}
        return zoo.build(name, head_dim=head_dim, num_heads=model.heads, max_len=run.task.max_len, **options, **extra)

    return make


def check_attention_builds(run: Run, zoo: ModuleType = attention_zoo) -> None:
    """What only the constructor knows (an unknown name, a combination of options, ``causal`` where the mechanism
    has no causal form) as a ``UserError``, from one build on the meta device: shapes only, no draw from torch's RNG,
    so the initial weights do not depend on it. ``lra.build`` makes it before any data work."""
    try:
        with torch.device("meta"):
            attention_factory(run, zoo)()
    except (ValueError, TypeError) as err:
        raise UserError(f"attention={run.attention.name}: {err}") from None


def build_encoder(run: Run, vocab_size: int, pooling: str | None = None) -> Encoder:
    """The backbone of ``run.model``, ``run.attention`` and ``run.task.max_len``; ``pooling``, when given, replaces
    ``model.pooling`` (a task that reads out every position)."""
    model = run.model
    return Encoder(vocab_size=vocab_size, max_len=run.task.max_len, dim=model.dim, depth=model.depth,
                   num_heads=model.heads, ffn_dim=model.ffn_dim, dropout=model.dropout,
                   make_attention=attention_factory(run), pooling=pooling or model.pooling, qkv_dim=model.qkv_dim,
                   checkpoint_blocks=model.checkpoint_blocks, embed_init_std=model.embed_init_std,
                   short_conv=model.short_conv, causal=run.task.causal)


class ClassificationModule(pl.LightningModule):
    """Classify one sequence per example.

    Tasks change it through hooks, never through the steps: ``build_head``, ``forward`` (e.g. a dual
    encoder), ``model_step`` (loss, logits and targets, e.g. per-token targets) and ``tokens_in``.
    """

    # a task whose read-out fixes the pooling sets it here, not in the config: the saved hyper-parameters stay the
    # composed config, which a resume compares against (lra.run.same_run)
    fixed_pooling: str | None = None

    def __init__(self, run: Run, vocab_size: int, num_classes: int):
        super().__init__()
        # checkpoints keep the settings as plain data (torch.load's weights_only reads them);
        # lra.run.record_compat.upgrade turns them back into a Run
        self.save_hyperparameters({"cfg": run.config(), "vocab_size": vocab_size, "num_classes": num_classes})
        self.run = run
        self.encoder = build_encoder(run, vocab_size, self.fixed_pooling)
        self.head = self.build_head(run.model, num_classes)
        metric = partial(MulticlassAccuracy, num_classes=num_classes, average="micro")
        self.train_acc, self.val_acc, self.test_acc = metric(), metric(), metric()
        self._step_losses: list[Tensor] = []  # the losses of this optimizer step's parts so far
        self.train_tokens = 0  # real (unpadded) training tokens over every segment of the run
        self.fit_seconds_before = 0.0  # training time of the segments before a resume
        self.segments: list[dict[str, Any]] = []  # each segment's first step and machine (lra.run.callbacks)
        self._segment_start: float | None = None

    def build_head(self, model: Model, num_classes: int) -> nn.Module:
        return ClassifierHead(model.dim, model.ffn_dim, num_classes)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.head(self.encoder(batch["tokens"], batch["lengths"]))

    def model_step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """Loss, logits and targets of one batch: the one computation train, val and test share."""
        logits = self(batch)
        loss = F.cross_entropy(logits, batch["labels"])
        return loss, logits, batch["labels"]

    def tokens_in(self, batch: dict[str, Tensor]) -> int:
        """Real (unpadded) tokens the batch feeds the encoder, summed into ``train_tokens`` for tokens/s."""
        return int(batch["lengths"].sum())

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """One part of an optimizer step (``task.micro_batches``; the whole batch without them). ``train/loss`` and
        ``train/acc`` are the step's whole batch: the mean of its equal parts' losses, the accuracy over all parts
        (logged at its last part; Lightning logs only at optimizer steps)."""
        loss, logits, targets = self.model_step(batch)
        self.train_acc.update(logits, targets)
        self.train_tokens += self.tokens_in(batch)
        self._step_losses.append(loss.detach())
        if self._trainer is not None and self._trainer.fit_loop.epoch_loop._should_accumulate():
            return loss  # an earlier part of the step (no Trainer: a step called directly is whole)
        losses, self._step_losses = self._step_losses, []
        self.log("train/loss", losses[0] if len(losses) == 1 else torch.stack(losses).mean(), prog_bar=True)
        self.log("train/acc", self.train_acc.compute())
        self.train_acc.reset()
        return loss

    def _evaluate(self, batch: dict[str, Tensor], stage: str, metric: MulticlassAccuracy) -> None:
        loss, logits, targets = self.model_step(batch)
        metric(logits, targets)
        self.log(f"{stage}/loss", loss, sync_dist=True)
        self.log(f"{stage}/acc", metric, prog_bar=True)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test", self.test_acc)

    def setup(self, stage: str) -> None:
        if stage == "fit":  # after the weights (rank zero's, broadcast); a resume then restores each rank's own
            rng_state.spread(self.trainer.global_rank)  # another rank: other dropout masks

    def on_fit_start(self) -> None:
        self._segment_start = time.perf_counter()

    def fit_seconds(self) -> float:
        """Training time so far, summed over the segments of an interrupted and resumed run."""
        running = 0.0 if self._segment_start is None else time.perf_counter() - self._segment_start
        return self.fit_seconds_before + running

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rng_state.add_to(checkpoint, self)  # dropout masks continue exactly on resume (all ranks get here)
        checkpoint["run_progress"] = {"fit_seconds": self.fit_seconds(), "train_tokens": self.train_tokens,
                                      "segments": self.segments}
        if (data := self.data_identity()) is not None:  # a resume on other data is refused (lra.run.same_run)
            checkpoint[CHECKPOINT_KEY] = data

    def data_identity(self) -> dict[str, Any] | None:
        """The identity of the data this run trains on (``lra.data_identity``: its split files' checksums), from the
        trainer's data module; None outside a trainer or for data made in memory."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        identify = getattr(datamodule, "data_identity", None)
        return identify() if callable(identify) else None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self._trainer is not None:  # None where a checkpoint is loaded outside a run (analyses): no draws
            rng_state.restore(checkpoint, self.trainer.global_rank, self.trainer.world_size)
        progress = checkpoint.get("run_progress") or {}
        self.fit_seconds_before = float(progress.get("fit_seconds", 0.0))
        self.train_tokens = int(progress.get("train_tokens", 0))
        self.segments = list(progress.get("segments", []))

    def configure_optimizers(self):
        optim = self.run.task.optim
        total = self.trainer.max_steps if self.trainer.max_steps > 0 else optim.warmup_steps + 1
        optimizer = adamw(self.parameters(), optim)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler(optimizer, optim, total),
                                                         "interval": "step"}}
