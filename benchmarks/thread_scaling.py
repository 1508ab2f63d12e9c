"""What a second thread buys each kind of work in a training step: ``python -m benchmarks.thread_scaling``.

The matmul floor of ``benchmarks.run_estimate`` assumes every core runs matmuls at the one-thread GEMM rate, so a
step whose other work does not split across threads cannot reach it however fast its kernels are. This times the
same training steps (``python run.py task=<task> attention=<a>``'s model, optimiser and the task's own training
batches, in order) at 1 and at N threads, taking turns ``--rounds`` times (the order alternating: ABBA), each after
``--warmup`` untimed steps: once without the profiler for the steps' wall time, then under torch's profiler, whose
ops' own times are summed into groups: matmuls, copies, fills, index moves, elementwise products, and everything
else (the rest of the ops plus the Python of autograd functions). The profiler adds a fixed cost to every op, which
weighs most on the many small ones (copies, "other"): read their speed-ups as lower bounds. Prints, per group, the
median time over rounds at each thread count and the median of the rounds' paired speed-ups (1 thread / N), then
the ``--top`` largest ops of "other" the same way.
Writes ``thread_scaling.csv`` (one row per round, thread count and group). Needs idle cores. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict

import pandas as pd
import pytorch_lightning as pl
from torch.profiler import ProfilerActivity, profile

from benchmarks import taking_turns, write_csv
from lra.build import build
from lra.config import compose_run
from lra.optimizer import adamw
from lra.run.allocator import reuse_freed_memory
from lra.run.outputs import BENCH
from lra.run.subnormals import flush_subnormals
from lra.run.threads import torch_threads
from lra_base.errors import UserError

GROUPS = {
    "matmul": {"aten::mm", "aten::bmm", "aten::addmm", "aten::addmm_", "aten::baddbmm", "aten::baddbmm_",
               "aten::addbmm", "aten::addbmm_"},
    "copy": {"aten::copy_", "aten::clone", "aten::contiguous"},
    "fill": {"aten::fill_", "aten::zero_"},
    "index": {"aten::index_select", "aten::index_copy", "aten::index_copy_", "aten::gather", "aten::scatter",
              "aten::scatter_", "aten::index", "aten::index_put_"},
    "product": {"aten::mul", "aten::mul_", "aten::addcmul", "aten::addcmul_"},
}
WALL = "steps (wall)"


def group_of(op: str) -> str:
    return next((name for name, ops in GROUPS.items() if op in ops), "other")


def timed_steps(step, batches: list, warmup: int) -> dict[str, float]:
    """Seconds per group (profiler self time) of ``step`` over ``batches[warmup:]``, and their wall time without
    the profiler (a pass of its own over the same batches)."""
    for batch in batches[:warmup]:
        step(batch)
    started = time.perf_counter()
    for batch in batches[warmup:]:
        step(batch)
    wall = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[warmup:]:
            step(batch)
    seconds: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        group, own = group_of(event.key), event.self_cpu_time_total / 1e6
        seconds[group] += own
        if group == "other":
            seconds[f"other: {event.key}"] += own
    seconds[WALL] = wall
    return dict(seconds)


def paired(frame: pd.DataFrame, key: str, many: int) -> pd.DataFrame:
    """Per ``key`` value: the median seconds at 1 and ``many`` threads over rounds and the median of the
    rounds' speed-ups (1 thread / ``many``)."""
    table = frame.pivot_table(index=[key, "round"], columns="threads", values="seconds", aggfunc="first").dropna()
    table["speed_up"] = table[1] / table[many]
    return table.groupby(level=0, sort=False).median()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.thread_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="listops")
    parser.add_argument("--attention", default="llops")
    parser.add_argument("--threads", type=int, default=2, help="the thread count compared with one (default 2)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps a round (default 8)")
    parser.add_argument("--warmup", type=int, default=8, help="untimed steps before each round (default 8)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--top", type=int, default=10, help="also print the N largest ops of 'other' (0: none)")
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. task.batch_size=8")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    if min(args.threads - 1, args.steps, args.rounds, args.warmup + 1) < 1:
        parser.error("--threads must be at least 2, --steps and --rounds at least 1, --warmup at least 0")
    reuse_freed_memory()
    flush_subnormals()  # as training does, before either thread count's threads start
    try:
        run = compose_run([f"task={args.task}", f"attention={args.attention}", *args.overrides])
        pl.seed_everything(0, verbose=False)
        built = build(run)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    model = built.model.train()
    optimizer = adamw(model.parameters(), lr=1e-4)
    count = args.warmup + args.steps
    batches = [b for b, _ in zip(built.datamodule.train_dataloader(), range(count))]

    def step(batch) -> None:
        model.model_step(batch)[0].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rows, ops = [], []
    for i, threads in taking_turns((1, args.threads), args.rounds):
        with torch_threads(threads):
            seconds = timed_steps(step, batches, args.warmup)
        for name, value in seconds.items():
            if name.startswith("other: "):
                ops.append({"round": i, "threads": threads, "op": name[7:], "seconds": value})
            else:
                rows.append({"round": i, "threads": threads, "group": name, "seconds": value})
    frame = pd.DataFrame(rows)
    best = paired(frame, "group", args.threads)
    print(f"{args.task}, {args.attention}: {args.steps} steps a round, medians of {args.rounds} rounds "
          f"(profiler self time per group; {WALL}: the whole steps without the profiler)")
    for group in [g for g in [*GROUPS, "other", WALL] if g in best.index]:
        one, many, up = best.at[group, 1], best.at[group, args.threads], best.at[group, "speed_up"]
        print(f"{group:>13}: 1 thread {one:7.3f} s, {args.threads} threads {many:7.3f} s, speed-up {up:.2f}x")
    if args.top and ops:
        top = paired(pd.DataFrame(ops), "op", args.threads).sort_values(args.threads, ascending=False).head(args.top)
        print(f"the largest ops of 'other' at {args.threads} threads:")
        for op, r in top.iterrows():
            print(f"{op[:40]:>40}: {r[1]:6.3f} s, {r[args.threads]:6.3f} s, {r['speed_up']:.2f}x")
    write_csv(frame, args.out, "thread_scaling.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
