"""Whole training steps per task and attention: ``python -m benchmarks.step [--tasks ...] [--attentions ...]``.

For each task and attention, the model of ``python run.py task=<task> attention=<attention>`` (the full
protocol's shapes unless ``--experiment`` or ``--batch`` say otherwise) trains ``--steps`` Lightning
steps on one in-memory batch of full-length random tokens, so no data loading is timed
(``python -m benchmarks.loading`` measures that on real data). The same model with every attention replaced
by a pass-through (``out = v``) is timed the same way: that is the cost of everything outside attention
(embeddings, masks, projections, FFN, loss, optimizer, Lightning). Prints step time, tokens per second and
the share of the step spent in attention; writes a CSV. A benchmark, not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from benchmarks import attention_name, write_csv
from benchmarks.loading import LoadingTimer
from lra.build import build_model, example_batch
from lra.config import CONF_DIR, compose_run
from lra.model import AttentionBlock
from lra.run.allocator import reuse_freed_memory
from lra.run.outputs import BENCH
from lra.run.subnormals import flush_subnormals
from lra.settings import Run
from lra.task_facts import task_names
from lra_base.errors import UserError

LONGEST = 4096  # tasks with longer sequences (Path-X: 16384 tokens) are timed only when --tasks names them
ATTENTIONS = ["softmax", "linear", "based", "llops"]
VOCAB = 256  # embedding rows; the step time does not depend on it


def default_tasks() -> list[str]:
    """Every task (``lra/tasks/``, ``conf/task/``) whose sequences fit ``LONGEST`` tokens: a new task needs no
    edit here."""
    return [task for task in task_names() if OmegaConf.load(CONF_DIR / "task" / f"{task}.yaml").max_len <= LONGEST]


class PassThrough(nn.Module):
    """``out = v``: an attention of zero cost, to time the rest of the model."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        return v


def step_seconds(run: Run, batch: dict[str, Tensor], steps: int, warmup: int,
                 pass_through: bool) -> tuple[float, int]:
    """Median seconds of one Lightning training step (after ``warmup`` steps) on ``batch`` repeated, and the real
    tokens the model counts in ``batch`` (its ``tokens_in``); with ``task.micro_batches`` n, ``batch`` is one part
    and a step is n parts accumulated (times summed per step)."""
    micro = run.task.micro_batches
    pl.seed_everything(run.seed, verbose=False)
    model = build_model(run, VOCAB, run.task.num_classes)
    if pass_through:
        for block in model.encoder.blocks:
            if isinstance(block, AttentionBlock):
                block.attention = PassThrough()
    timer = LoadingTimer(skip=warmup * micro)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=warmup + steps + 1, limit_val_batches=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[timer], num_sanity_val_steps=0,
                         accumulate_grad_batches=micro)
    loader = torch.utils.data.DataLoader([batch] * ((warmup + steps + 1) * micro), batch_size=None)
    trainer.fit(model, train_dataloaders=loader)
    parts = torch.tensor(timer.steps[:len(timer.steps) // micro * micro])
    return float(parts.view(-1, micro).sum(1).median()), model.tokens_in(batch)


def measure(task: str, attention: str, args) -> dict:
    overrides = [f"task={task}", f"attention={attention}", *args.overrides]
    if args.experiment:
        overrides.append(f"experiment={args.experiment}")
    run = compose_run(overrides)
    micro = run.task.micro_batches
    batch_size = args.batch or run.task.batch_size
    if batch_size % micro:
        raise UserError(f"--batch {batch_size} does not split into task.micro_batches={micro} equal parts: "
                        f"give a multiple of {micro}, or add task.micro_batches=1")
    batch = example_batch(run, batch_size // micro, VOCAB, torch.Generator().manual_seed(0))
    step, tokens = step_seconds(run, batch, args.steps, args.warmup, pass_through=False)
    rest, _ = step_seconds(run, batch, args.steps, args.warmup, pass_through=True)
    tokens *= micro
    return {"task": task, "attention": attention, "batch": batch_size, "length": batch["tokens"].shape[1],
            "step_ms": 1e3 * step, "tokens_per_s": tokens / step, "rest_ms": 1e3 * rest,
            "attention_share": 1 - rest / step}


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python -m benchmarks.step", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=None, help=f"default: every task up to {LONGEST} tokens")
    parser.add_argument("--attentions", nargs="+", default=ATTENTIONS, type=attention_name)
    parser.add_argument("--batch", type=int, default=None, help="batch size (default: the task's)")
    parser.add_argument("--experiment", default=None, help="e.g. quick (default: the full protocol)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps (median reported)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--default-allocator", action="store_true",
                        help="leave glibc's allocator as it is (training sets reuse_freed_memory, so do we)")
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. model.depth=4")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    logging.getLogger("pytorch_lightning").setLevel(logging.WARNING)  # one Trainer per measurement
    flush_subnormals()  # as training does (lra.run.subnormals)
    if not args.default_allocator:
        reuse_freed_memory()
    rows = []
    try:
        for task in args.tasks or default_tasks():
            for attention in args.attentions:
                rows.append(measure(task, attention, args))
                r = rows[-1]
                print(f"{task:>10} {attention:>8}: {r['step_ms']:8.1f} ms a step, {r['tokens_per_s']:9.0f} tokens/s, "
                      f"rest {r['rest_ms']:7.1f} ms, attention {100 * r['attention_share']:5.1f}%", flush=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    write_csv(frame, out, "step_cpu.csv", say=False)
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"wrote {out / 'step_cpu.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
