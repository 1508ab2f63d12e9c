"""How long training waits for data: ``python -m benchmarks.loading [task=listops] [key=value ...]``.

Composes the config as ``run.py`` does (``experiment=quick`` unless another experiment is given), trains
``--steps`` steps on the CPU without validation, and times each step with a Lightning callback: the wait
is the time from the end of one training step to the start of the next (the dataloader's ``__next__``
plus Lightning's bookkeeping, so an upper bound), the step the time from one step's end to the next's.
Prints the waiting fraction; the target is under 5%. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time

import pytorch_lightning as pl

from lra.build import build
from lra.config import compose_run
from lra_base.errors import UserError


class LoadingTimer(pl.Callback):
    """Per training step: seconds waiting before it started and seconds from the previous step's end."""

    def __init__(self, skip: int = 3):
        self.skip, self.waits, self.steps = skip, [], []
        self._last_end: float | None = None
        self._start = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()
        if self._last_end is not None and batch_idx >= self.skip:
            self.waits.append(self._start - self._last_end)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._last_end is not None and batch_idx >= self.skip:
            self.steps.append(now - self._last_end)
        self._last_end = now


def measure(overrides: list[str], steps: int) -> LoadingTimer:
    if not any(o.startswith("experiment=") for o in overrides):
        overrides = ["experiment=quick", *overrides]
    run = compose_run(overrides)
    pl.seed_everything(run.seed, workers=True)
    built = build(run)
    datamodule, model = built.datamodule, built.model
    timer = LoadingTimer()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[timer], num_sanity_val_steps=0)
    trainer.fit(model, train_dataloaders=datamodule.train_dataloader())
    return timer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loading", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps to time (default 30)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. task=pathfinder attention=llops")
    args = parser.parse_args(argv)
    try:
        timer = measure(args.overrides, args.steps)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not timer.steps:
        print("error: too few steps timed; raise --steps", file=sys.stderr)
        return 2
    wait, total = sum(timer.waits), sum(timer.steps)
    print(f"{len(timer.steps)} steps timed: {1000 * total / len(timer.steps):.1f} ms a step, "
          f"{1000 * wait / len(timer.waits):.2f} ms waiting for data")
    print(f"waiting for data: {100 * wait / total:.2f}% of step time (target < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
