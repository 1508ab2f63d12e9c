"""Length-grouped against random batching at the full protocol's ListOps shapes: ``python -m benchmarks.batching``.

Draws ``--train`` trees with the ListOps generator in memory (``task.data.generate``'s rules: 500-2000 tokens),
orders one epoch both ways (``task.batching=random``, the protocol, and ``length_grouped`` with
``task.batching_pool``) and prints the epoch's padding fraction each way, with a table over pool sizes. Then it
trains the full-protocol model (``task=listops``, batch 32, ``--attention``) on ``--steps`` batches of each
order, alternating between the orders so that a change in the machine's load hits both: the batches are taken at
evenly spaced quantiles of their padded width, so a few steps stand for the epoch. Prints the CPU, real (unpadded)
tokens per CPU second (and per wall second) each way and their ratios. On a shared machine read the ratios, not
the absolute rates.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from benchmarks import this_processor
from data_prep.compact import CompactSplit
from data_prep.listops import NUM_CLASSES, VOCAB, sample_trees
from lra.build import build_model
from lra.config import compose_run
from lra.data import SequenceDataset, pad_batch
from lra.optimizer import adamw
from lra.run.allocator import reuse_freed_memory
from lra.sampling import EpochSampler, LengthGroupedSampler
from lra.settings import Run
from lra_base.errors import UserError

POOLS = (1, 5, 10, 20, 50, 100)


def epoch_batches(sampler: EpochSampler, size: int) -> list[np.ndarray]:
    order = np.asarray(list(sampler))
    return [order[i:i + size] for i in range(0, len(order), size)]


def padding_fraction(batches: list[np.ndarray], lengths: np.ndarray) -> float:
    """Share of the computed tokens that are padding, each batch padded to its longest."""
    real = sum(int(lengths[b].sum()) for b in batches)
    return 1 - real / sum(len(b) * int(lengths[b].max()) for b in batches)


def quantile_batches(batches: list[np.ndarray], lengths: np.ndarray, count: int) -> list[np.ndarray]:
    """``count`` batches at evenly spaced quantiles of padded width (whole batches only)."""
    whole = [b for b in batches if len(b) == len(batches[0])]
    ranked = sorted(whole, key=lambda b: int(lengths[b].max()))
    return [ranked[int((i + 0.5) * len(ranked) / count)] for i in range(count)]


def train_steps(run: Run, batches: dict[str, list[dict]], warmup: int = 1) -> dict[str, list[float]]:
    """CPU seconds, wall seconds, real tokens and padded tokens per order over its batches, one optimizer step
    each, the orders alternating (each order's first ``warmup`` batches are run once untimed). CPU time is what
    the step costs however busy the machine; wall time counts the time other processes held the cores."""
    model = build_model(run, len(VOCAB), NUM_CLASSES).train()
    optimizer = adamw(model.parameters(), run.task.optim)

    def step(batch: dict) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        loss = model.model_step(batch)[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.process_time() - cpu, time.perf_counter() - wall

    for name in batches:
        for batch in batches[name][:warmup]:
            step(batch)
    totals = {name: [0.0, 0.0, 0, 0] for name in batches}
    for i in range(max(len(b) for b in batches.values())):
        for name, those in batches.items():
            if i < len(those):
                batch, total = those[i], totals[name]
                cpu, wall = step(batch)
                total[0], total[1] = total[0] + cpu, total[1] + wall
                total[2], total[3] = total[2] + int(batch["lengths"].sum()), total[3] + batch["tokens"].numel()
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batching", description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=3200, help="trees drawn (default 3200: 100 batches of 32)")
    parser.add_argument("--steps", type=int, default=6, help="timed steps of each order (default 6; 0: padding only)")
    parser.add_argument("--attention", default="linear", help="attention of the model trained (default linear)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. task.batching_pool=20")
    args = parser.parse_args(argv)
    try:
        run = compose_run(["task=listops", f"attention={args.attention}", *args.overrides])
    except (HydraException, OmegaConfBaseException, UserError) as err:  # each names the bad setting
        print(f"error: {err}", file=sys.stderr)
        return 2
    task, generate = run.task, run.task.data.generate
    if args.train < task.batch_size or args.steps < 0:
        print(f"error: --train must be >= task.batch_size={task.batch_size} and --steps >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if run.reuse_freed_memory:
        reuse_freed_memory()  # as training does
    print(f"CPU: {this_processor()}; torch threads: {torch.get_num_threads()}")
    tokens, offsets, labels, _ = sample_trees(args.train, seed=generate["seed"], log=lambda _: None,
                                              **{k: generate[k] for k in ("min_length", "max_length", "max_depth",
                                                                          "max_args")})
    split = CompactSplit(tokens, offsets, labels, {})
    lengths = np.minimum(np.diff(offsets), task.max_len)
    size, pool, seed = task.batch_size, task.batching_pool, run.seed
    print(f"{args.train} trees: mean {lengths.mean():.0f} tokens, median {np.median(lengths):.0f}; batch {size}, "
          f"max_len {task.max_len}")
    orders = {"random": epoch_batches(EpochSampler(len(lengths), seed), size),
              "length_grouped": epoch_batches(LengthGroupedSampler(lengths, seed, size, pool), size)}
    padding = {name: padding_fraction(batches, lengths) for name, batches in orders.items()}
    print(f"padding fraction of the epoch: random {padding['random']:.3f}, length_grouped (pool {pool}) "
          f"{padding['length_grouped']:.3f}")
    by_pool = {k: padding_fraction(epoch_batches(LengthGroupedSampler(lengths, seed, size, k), size), lengths)
               for k in POOLS}
    table = ", ".join(f"{k}: {fraction:.3f}" for k, fraction in by_pool.items())
    print(f"padding fraction by task.batching_pool: {table}")
    if not args.steps:
        return 0
    dataset = SequenceDataset(split, task.max_len)
    timed = {name: [pad_batch([dataset[int(i)] for i in b]) for b in quantile_batches(batches, lengths, args.steps)]
             for name, batches in orders.items()}
    result = train_steps(run, timed)
    for name, (cpu, wall, real, padded) in result.items():
        print(f"{name}: {args.steps} steps, {cpu:.1f} CPU s ({wall:.1f} s wall): {real / cpu:,.0f} real tokens "
              f"a CPU second ({padded / cpu:,.0f} computed; {real / wall:,.0f} real a wall second), padding "
              f"{1 - real / padded:.3f} in the timed batches")
    (cpu_r, wall_r, real_r, _), (cpu_g, wall_g, real_g, _) = result["random"], result["length_grouped"]
    expected = (1 - padding["length_grouped"]) / (1 - padding["random"])
    print(f"real tokens/s, length_grouped / random: {real_g / cpu_g / (real_r / cpu_r):.2f}x in CPU time, "
          f"{real_g / wall_g / (real_r / wall_r):.2f}x in wall time (the epoch's padding alone predicts "
          f"{expected:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
