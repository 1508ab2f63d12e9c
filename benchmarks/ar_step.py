"""Where an associative-recall training step's time goes: ``python -m benchmarks.ar_step [--steps N] [key=value]``.

The AR ablation (``analyses.ar_ablation``) trains a small model on short sequences, so per-step costs that do
not scale with the model can dominate. On one thread, the same model, data and optimiser are timed as
1. ``data``: the training DataLoader alone (batches made and collated);
2. ``model``: forward, loss, backward and AdamW in a plain loop on one batch (the model's own cost);
3. ``loop``: the same plain loop reading from the DataLoader;
4. ``run``: ``lra.run.train.run`` (Lightning with the run's callbacks and loggers; ``fit_time_s`` and its tokens/s).
Also the model step's FLOPs (``torch.utils.flop_counter``) and its top operators by self CPU time. Overrides
are ``run.py``'s (defaults: the ablation's LLoPS p = 4, m = 64, width 64). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from lra.build import plain_training
from lra.config import compose_run
from lra.run.train import run

DEFAULTS = ["task=ar", "attention=llops", "attention.degree=4", "attention.features=64", "attention.square=true",
            "model.dim=64", "model.ffn_dim=128", "task.optim.lr=3e-3", "task.optim.warmup_steps=100",
            "trainer.enable_progress_bar=false"]


def timed(fn, steps: int) -> float:
    """Seconds per call of ``fn`` over ``steps`` calls after 5 warm-up calls."""
    for _ in range(5):
        fn()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ar_step", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data, model, step = plain_training(compose_run([*DEFAULTS, *args.overrides]), lr=1e-3)
    loader = data.train_dataloader()
    batches = iter(loader)
    one = next(batches)
    tokens = model.tokens_in(one)

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:
            batches = iter(loader)
            return next(batches)

    per_step = {"data": timed(next_batch, args.steps), "model": timed(lambda: step(one), args.steps),
                "loop": timed(lambda: step(next_batch()), args.steps)}
    with FlopCounterMode(display=False) as flops:
        step(one)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            step(one)
    with tempfile.TemporaryDirectory() as tmp:
        steps = [f"task.max_steps={args.steps}", f"task.eval_every={args.steps}"]
        record = run(compose_run([*DEFAULTS, *args.overrides, *steps]), Path(tmp) / "run")
    per_step["run"] = record["fit_time_s"] / args.steps
    print(f"{tokens} tokens a step; model step {flops.get_total_flops() / 1e9:.2f} GFLOP "
          f"({flops.get_total_flops() / per_step['model'] / 1e9:.1f} GFLOP/s)")
    for name, seconds in per_step.items():
        print(f"{name:>6}: {1e3 * seconds:7.2f} ms a step, {tokens / seconds / 1e3:7.1f}k tokens/s")
    print(f"   run: {record['tokens_per_s'] / 1e3:.1f}k real training tokens/s recorded (one validation included)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    print(json.dumps({k: round(v * 1e3, 3) for k, v in per_step.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
