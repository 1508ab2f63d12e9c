"""One attention mechanism, this tree's ``attention_zoo`` against a git revision's, in one process:
``python -m benchmarks.attention_versions [--against REV] [--attention llops] [OVERRIDE ...]``.

Both versions build the mechanism as ``python run.py task=listops attention=<name> <overrides>`` would
(``lra.module.attention_factory``, each from its own ``attention_zoo``, the same seed) and each round runs forward
and backward of each, taking turns (ABBA), on the same full-protocol ListOps batches: ``(B, H, N, head_dim)``
inputs (the config's batch size, heads and width) with ``B`` sequences of real training-set lengths (drawn from
the config's ``data_dir`` with a fixed seed), padded to the batch's longest, and their key padding mask. Freed
memory is kept for reuse, as in training (``lra.run.allocator``). Time is the thread's CPU time on one intra-op
thread (time spent waiting for a core is not counted, so the ratio holds on a loaded machine; absolute times
still move with shared caches), or wall time with ``--threads 2`` (idle cores only). Prints each version's
median seconds a round and the median of the per-round ratios (this tree / REV), and how far the two versions'
outputs on the first batch differ; writes nothing: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from hydra.errors import HydraException

import attention_zoo
from benchmarks.revision import import_at
from benchmarks.step_versions import compare
from lra.config import compose_run
from lra.module import attention_factory
from lra.run.allocator import reuse_freed_memory
from lra.settings import Run
from lra_base.errors import UserError


def batch_lengths(data_dir: Path, batch: int, batches: int, seed: int = 0) -> list[np.ndarray]:
    """``batches`` draws of ``batch`` training-tree lengths from ListOps' train split."""
    path = data_dir / "listops" / "train.npz"
    if not path.exists():
        raise UserError(f"no ListOps data at {path}: run `python -m data_prep listops --out {data_dir}` first")
    with np.load(path) as split:
        lengths = np.diff(split["offsets"])
    rng = np.random.default_rng(seed)
    return [rng.choice(lengths, size=batch, replace=False) for _ in range(batches)]


def inputs(lengths: np.ndarray, heads: int, head_dim: int, seed: int) -> tuple[torch.Tensor, ...]:
    """``q, k, v`` ``(B, H, N, head_dim)`` with ``N`` the longest length, and the key padding mask ``(B, N)``."""
    g = torch.Generator().manual_seed(seed)
    n = int(lengths.max())
    q, k, v = (torch.randn(len(lengths), heads, n, head_dim, generator=g, requires_grad=True) for _ in range(3))
    mask = torch.arange(n)[None, :] < torch.as_tensor(lengths)[:, None]
    return q, k, v, mask


def forward_backward(module: torch.nn.Module, batches: list[tuple[torch.Tensor, ...]]) -> Callable[[], None]:
    """Forward and backward of ``module`` on every batch (a fixed output gradient)."""
    def run() -> None:
        for q, k, v, mask in batches:
            out = module(q, k, v, key_padding_mask=mask)
            out.backward(torch.ones_like(out))
    return run


def build(run: Run, zoo) -> torch.nn.Module:
    """The configured attention of the first layer, built from ``zoo`` after seeding torch with 0."""
    torch.manual_seed(0)
    return attention_factory(run, zoo)().train()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attention_versions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with (default: HEAD)")
    parser.add_argument("--attention", default="llops")
    parser.add_argument("--batches", type=int, default=2, help="batches a round (default 2)")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1, timed in thread CPU time; more: wall time, idle cores)")
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides, e.g. attention.degree=2 model.heads=4 data_dir=/data")
    args = parser.parse_intermixed_args(argv)  # overrides before and after the options
    torch.set_num_threads(args.threads)
    reuse_freed_memory()  # as training does: freed memory is reused, not returned and faulted in again
    try:
        run = compose_run(["task=listops", f"attention={args.attention}", *args.overrides])
        model = run.model
        heads, head_dim = model.heads, (model.qkv_dim or model.dim) // model.heads
        drawn = batch_lengths(Path(run.data_dir), run.task.batch_size, args.batches)
        batches = [inputs(lengths, heads, head_dim, seed) for seed, lengths in enumerate(drawn)]
        with tempfile.TemporaryDirectory() as folder:
            new = build(run, attention_zoo)
            old = build(run, import_at(args.against, Path(folder), "attention_zoo"))
            q, k, v, mask = batches[0]
            with torch.no_grad():
                gap = (new(q, k, v, key_padding_mask=mask) - old(q, k, v, key_padding_mask=mask)).abs().max()
            clock = time.thread_time if args.threads == 1 else time.perf_counter
            row = compare("attention", "us", 1, forward_backward(new, batches), forward_backward(old, batches),
                          args.rounds, args.warmup, clock)
    except (UserError, HydraException) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    timed = "one thread (CPU time)" if args.threads == 1 else f"{args.threads} threads (wall time)"
    print(f"{run.config()['attention']}: this tree against {args.against}, {len(drawn)} batches of {len(drawn[0])} "
          f"(longest {', '.join(str(int(lengths.max())) for lengths in drawn)}), {timed}, forward + backward, "
          f"medians of {args.rounds} rounds")
    print(f"  this tree {row['this_tree'] / 1e6:.4f} s, {args.against} {row['against'] / 1e6:.4f} s a round: "
          f"ratio {row['ratio']:.3f} ({row['ratio_min']:.3f}-{row['ratio_max']:.3f}); outputs differ by at most "
          f"{float(gap):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
