"""Whole-run estimate of full-protocol ListOps: ``python -m benchmarks.run_estimate [--attentions ...]``.

estimate = max_steps x step time + (max_steps // eval_every) x validation time + test time, for the run
``python run.py task=listops attention=<a>`` (``conf/task/listops.yaml``: 5,000 steps of batch 32, a
validation every 50 steps over the 2,000 validation trees, then one test pass over the 2,000 test trees).

* step: median of ``--steps`` Lightning training steps (after ``--warmup``) on the task's own training
  batches (epoch 0's order, padded to their longest sequence), loading included, as ``benchmarks.loading``;
* validation and test: a Lightning ``validate`` pass (``torch.inference_mode``) over every ``--every``-th
  evaluation batch of the split, each batch as the run serves it (longest first: ``eval_order``), timed
  from the previous batch's end and scaled by (all batches / timed batches). The middle batch of each group
  of ``--every`` is taken, so the sample spans the lengths of the whole pass.

The floor beside it: the matrix-multiply FLOPs of the same steps and passes (``benchmarks.flops``: training
steps forward and backward on the timed batches, evaluation forward on the timed batches scaled like the
times) over ``--cores`` cores at this machine's one-thread GEMM rate (a 1024-square float32 matmul, or
``--gemm-gflops``): what the run would take if it did nothing but matmuls at full speed. ``cpu_gflops`` is
the rate a training step achieves per core (FLOPs / its CPU time).

Each time is taken twice: wall time, and the CPU time of this process (all its threads). On a machine
shared with other jobs the wall time grows with their load; the CPU time of a one-thread measurement
(``OMP_NUM_THREADS=1``) stays close to what that thread would take alone. Checkpointing and logging are
left out (small). Prints minutes per attention and the ratio to ``--target-min`` (60: the target for
llops, issue 14) for both clocks, and writes ``run_estimate.csv``. A benchmark, not a test: hydra
overrides after the options apply to every attention.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch

from benchmarks import attention_name, write_csv
from benchmarks.flops import counter, gemm_gflops
from lra.build import build
from lra.config import compose_run
from lra.run.allocator import reuse_freed_memory
from lra.run.outputs import BENCH
from lra.run.subnormals import flush_subnormals
from lra.run.threads import torch_threads
from lra.settings import Run
from lra_base.errors import UserError

ATTENTIONS = ["softmax", "linear", "llops"]


class Clock(pl.Callback):
    """Wall and CPU seconds (this process, all threads) of each training step or evaluation batch, from the
    previous one's end (or the pass's start), so loading is included; ``skip`` first training steps untimed."""

    def __init__(self, skip: int = 0):
        self.skip, self.wall, self.cpu = skip, [], []
        self._last: tuple[float, float] | None = None

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def _lap(self, timed: bool) -> None:
        now = self.now()
        if timed and self._last is not None:
            self.wall.append(now[0] - self._last[0])
            self.cpu.append(now[1] - self._last[1])
        self._last = now

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._lap(batch_idx >= self.skip)

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._last = self.now()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._lap(True)


def sample_batches(order: list[int], batch_size: int, every: int) -> tuple[list[int], int, int]:
    """The examples of every ``every``-th batch of ``order`` (the middle one of each group), in order, with
    the number of batches taken and the number the whole pass has."""
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    picked = batches[every // 2::every] or batches[:1]  # a partial last batch stays last: batches stay whole
    return [i for batch in picked for i in batch], len(picked), len(batches)


def trainer_kwargs(run: Run) -> dict:
    return dict(accelerator="cpu", devices=1, precision=run.trainer["precision"], logger=False,
                gradient_clip_val=run.trainer.get("gradient_clip_val"), enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)


def step_seconds(run: Run, datamodule, model, steps: int, warmup: int) -> tuple[float, float]:
    """Median wall and CPU seconds of a training step on the run's own batches (after ``warmup`` steps)."""
    clock = Clock(skip=warmup)
    trainer = pl.Trainer(**trainer_kwargs(run), max_steps=warmup + steps, limit_val_batches=0, callbacks=[clock])
    trainer.fit(model, train_dataloaders=datamodule.train_dataloader())
    return statistics.median(clock.wall), statistics.median(clock.cpu)


def pass_seconds(run: Run, datamodule, model, split: str, every: int) -> tuple[float, float, int, int]:
    """Estimated wall and CPU seconds of one evaluation pass over ``split``, the batches timed and all."""
    batch_size = run.eval_batch_size  # as the run's loader batches it
    indices, timed, total = sample_batches(datamodule.eval_order(split), batch_size, every)
    clock = Clock()
    trainer = pl.Trainer(**trainer_kwargs(run), inference_mode=True, callbacks=[clock])
    trainer.validate(model, dataloaders=datamodule._loader(split, indices), verbose=False)
    return sum(clock.wall) * total / timed, sum(clock.cpu) * total / timed, timed, total


def step_gflop(datamodule, model, steps: int) -> float:
    """Median matmul GFLOP of a training step (forward and backward) over the first ``steps`` batches."""
    counts = []
    for batch, _ in zip(datamodule.train_dataloader(), range(steps), strict=False):
        with counter() as flops:
            model.model_step(batch)[0].backward()
        model.zero_grad(set_to_none=True)
        counts.append(flops.get_total_flops() / 1e9)
    return statistics.median(counts)


def pass_gflop(run: Run, datamodule, model, split: str, every: int) -> float:
    """Matmul GFLOP of one evaluation pass over ``split``, from the batches ``pass_seconds`` times."""
    batch_size = run.eval_batch_size  # as the run's loader batches it
    indices, timed, total = sample_batches(datamodule.eval_order(split), batch_size, every)
    model.eval()
    with torch.inference_mode(), counter() as flops:
        for batch in datamodule._loader(split, indices):
            model.model_step(batch)
    model.train()
    return flops.get_total_flops() / 1e9 * total / timed


def estimate(attention: str, args) -> dict:
    run = compose_run(["task=listops", f"attention={attention}", *args.overrides])
    if run.flush_subnormals:
        flush_subnormals()  # as run.py; the intra-op threads started after it take the mode
    if run.reuse_freed_memory:
        reuse_freed_memory()  # as run.py
    pl.seed_everything(run.seed, verbose=False)
    built = build(run)
    datamodule, model = built.datamodule, built.model
    step, step_cpu = step_seconds(run, datamodule, model, args.steps, args.warmup)
    val, val_cpu, val_timed, val_batches = pass_seconds(run, datamodule, model, "val", args.every)
    test, test_cpu, test_timed, test_batches = pass_seconds(run, datamodule, model, "test", args.every)
    steps, every = run.task.max_steps, run.task.eval_every
    validations = steps // every
    gflop = (step_gflop(datamodule, model, args.warmup + args.steps),
             pass_gflop(run, datamodule, model, "val", args.every),
             pass_gflop(run, datamodule, model, "test", args.every))
    total_gflop = steps * gflop[0] + validations * gflop[1] + gflop[2]
    row = {"attention": attention, "steps": steps, "validations": validations, "val_batches": val_batches,
           "val_timed": val_timed, "test_batches": test_batches, "test_timed": test_timed,
           "threads": torch.get_num_threads(), "step_gflop": gflop[0], "val_pass_gflop": gflop[1],
           "test_pass_gflop": gflop[2], "total_tflop": total_gflop / 1e3, "cpu_gflops": gflop[0] / step_cpu,
           "gemm_gflops": args.gemm_gflops, "cores": args.cores,
           "floor_min": total_gflop / (args.gemm_gflops * args.cores) / 60}
    for clock, (s, v, t) in (("", (step, val, test)), ("cpu_", (step_cpu, val_cpu, test_cpu))):
        total = steps * s + validations * v + t
        row.update({f"{clock}step_s": s, f"{clock}val_pass_s": v, f"{clock}test_pass_s": t,
                    f"{clock}train_min": steps * s / 60, f"{clock}validation_min": validations * v / 60,
                    f"{clock}test_min": t / 60, f"{clock}total_min": total / 60,
                    f"{clock}ratio_to_target": total / 60 / args.target_min})
    return row


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_estimate", description=__doc__.splitlines()[0])
    parser.add_argument("--attentions", nargs="+", default=ATTENTIONS, type=attention_name)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed first steps (at least 1)")
    parser.add_argument("--every", type=int, default=8, help="time every N-th evaluation batch (1: all)")
    parser.add_argument("--target-min", type=float, default=60.0, help="minutes the ratio is taken to")
    parser.add_argument("--cores", type=int, default=2, help="cores the floor assumes (default 2, the target's)")
    parser.add_argument("--gemm-gflops", type=float, default=None,
                        help="one core's GEMM rate for the floor (default: measured here, one thread)")
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. data_dir=... or task.max_steps=...")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    if args.warmup < 1 or args.steps < 1 or args.every < 1:
        parser.error("--warmup, --steps and --every must be at least 1 (the first step is never timed)")
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.WARNING)  # three Trainers per attention
    warnings.filterwarnings("ignore", message=r".*(no `val_dataloader`|isinstance\(treespec)")
    if args.gemm_gflops is None:
        with torch_threads(1):
            args.gemm_gflops = gemm_gflops()
    print(f"GEMM rate (1024-square float32, one thread): {args.gemm_gflops:.1f} GFLOP/s", flush=True)
    rows = []
    try:
        for attention in args.attentions:
            rows.append(estimate(attention, args))
            r = rows[-1]
            print(f"{attention:>8}: step {r['step_s']:.3f} s (CPU {r['cpu_step_s']:.3f} s), validation "
                  f"{r['val_pass_s']:.1f} s ({r['val_timed']} of {r['val_batches']} batches timed), test "
                  f"{r['test_pass_s']:.1f} s: {r['total_min']:.1f} min (CPU time {r['cpu_total_min']:.1f} min), "
                  f"{r['cpu_ratio_to_target']:.2f}x the {args.target_min:g}-minute target in CPU time; matmuls "
                  f"{r['total_tflop']:.0f} TFLOP, floor {r['floor_min']:.1f} min on {args.cores} cores, a step "
                  f"runs at {r['cpu_gflops']:.1f} GFLOP/s per core", flush=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    write_csv(frame, out, "run_estimate.csv", say=False)
    columns = ["attention", "step_s", "val_pass_s", "test_pass_s", "total_min", "ratio_to_target", "cpu_step_s",
               "cpu_val_pass_s", "cpu_test_pass_s", "cpu_total_min", "cpu_ratio_to_target", "step_gflop",
               "cpu_gflops", "floor_min"]
    print(frame[columns].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"wrote {out / 'run_estimate.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
