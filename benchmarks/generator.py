"""Speed of the Pathfinder generator: ``python -m benchmarks.generator [--task pathfinder|pathx] [--images N]``.

Generates one chunk in this process (tables built first, not timed) and prints images/s for one worker
and the projected wall time of the default 200k images with the given number of workers. A benchmark,
not a test: the numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from data_prep import pathfinder


def measure(task: str, images: int, seed: int = 0) -> float:
    """Images per second of one worker generating ``images`` images of ``task``."""
    params = pathfinder.TASKS[task]
    for margin in params.margins:
        pathfinder.tables_for(params, margin)
    params = dataclasses.replace(params, chunk=images)
    started = time.perf_counter()
    pathfinder.make_chunk(params, seed, 0, images)
    return images / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generator", description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(pathfinder.TASKS), default="pathfinder")
    parser.add_argument("--images", type=int, help="images to time (default: one chunk of the task)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="workers for the projection (default: the CPUs this process may use)")
    parser.add_argument("--count", type=int, default=200_000, help="images in the projection (default 200000)")
    args = parser.parse_args(argv)
    images = args.images or pathfinder.TASKS[args.task].chunk
    rate = measure(args.task, images)
    total = args.count / (rate * args.workers)
    load = os.getloadavg()[0]
    print(f"{args.task}: {rate:.0f} images/s per worker ({images} images timed, load average {load:.1f})")
    print(f"projected: {args.count} images with {args.workers} workers in {total / 60:.1f} min "
          f"(assumes each worker gets a free core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
