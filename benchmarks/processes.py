"""Two one-thread DDP processes against one process of two threads: ``python -m benchmarks.processes``.

A second thread speeds a full-protocol llops step up only 1.3-1.55x (``benchmarks.thread_scaling``): the
small ops and the Python of the chunk loops do not split across threads. Two processes split the batch
instead (``trainer=ddp``: each rank takes half of each step's 32 examples, ``task.batch_size`` being the
step's batch over all ranks, and half of each validation), so each runs everything on its own core. This trains
the same short run both ways with ``run.py`` (``--steps`` optimizer steps of the real training batches, a
validation pass every ``--every`` steps: 50 and 50 keep the protocol's ratio of validation to training), the two
ways taking turns for ``--rounds`` rounds (ABBA), and reads each record's ``fit_time_s`` (steps and validations,
no start-up, no test pass). Prints each round's times and ratio (DDP / threads) and the medians.
Writes ``processes.csv``. Needs 2 idle cores and the task's data. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks import taking_turns, this_processor, write_csv
from lra.run.outputs import BENCH
from results.bench_tables import processes_table

ROOT = Path(__file__).resolve().parents[1]
WAYS = {  # name: (torch threads per process, run.py overrides)
    "threads": (2, []),
    "ddp": (1, ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true"]),
}


def fit_seconds(way: str, args: argparse.Namespace, folder: Path) -> float:
    """``run.py``'s training time for one short run (``fit_time_s`` of its record)."""
    threads, extra = WAYS[way]
    command = [sys.executable, "run.py", f"task={args.task}", f"attention={args.attention}",
               f"task.max_steps={args.steps}", f"task.eval_every={args.every}", "trainer.enable_progress_bar=false",
               f"hydra.run.dir={folder}", *extra, *args.overrides]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    record = folder / "result.json"
    if done.returncode != 0 or not record.is_file():
        raise RuntimeError(f"{way} run failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return float(json.loads(record.read_text())["fit_time_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.processes", description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="listops")
    parser.add_argument("--attention", default="llops")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps a run (default 100)")
    parser.add_argument("--every", type=int, default=50, help="validation every N steps (default 50)")
    parser.add_argument("--rounds", type=int, default=2)
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both ways, e.g. seed=1")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    if min(args.steps, args.every, args.rounds) < 1:
        parser.error("--steps, --every and --rounds must be at least 1")
    print(f"CPU: {this_processor()}; {args.task}, {args.attention}: {args.steps} steps, validation every {args.every}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lra-processes-") as tmp:
        for i, way in taking_turns(WAYS, args.rounds):
            try:
                seconds = fit_seconds(way, args, Path(tmp) / f"{way}-{i}")
            except RuntimeError as err:
                print(f"error: {err}", file=sys.stderr)
                return 1
            rows.append({"round": i, "way": way, "fit_s": seconds})
            print(f"round {i}: {way:>7} {seconds:8.1f} s")
    frame = pd.DataFrame(rows)
    print(processes_table(frame))
    write_csv(frame, args.out, "processes.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
