"""One attention mechanism, this tree's ``attention_zoo`` against a git revision's, in one process:
``python -m benchmarks.attention_versions [--against REV] [--attention llops] [KEY=VALUE ...]``.

Both versions build the mechanism from the same seed (its ``conf/attention/<name>.yaml`` options, then the
``KEY=VALUE`` overrides) and each round runs forward and backward of each, taking turns (ABBA), on the same
full-protocol ListOps batches: ``(B, H, N, head_dim)`` inputs with ``B`` sequences of real training-set lengths
(drawn from ``--data-dir``'s ListOps train split with a fixed seed), padded to the batch's longest, and their
key padding mask. Freed memory is kept for reuse, as in training (``lra.allocator``). Time is the thread's CPU
time on one intra-op thread (time spent waiting for a core is not counted, so the ratio holds on a loaded machine;
absolute times still move with shared caches), or wall time with ``--threads 2`` (idle cores only). Prints each
version's median seconds a round and the median of the per-round ratios (this tree / REV), and how far the two
versions' outputs on the first batch differ; writes nothing: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
import yaml

import attention_zoo
from benchmarks.revision import ROOT, import_at
from benchmarks.step_versions import compare
from lra.allocator import reuse_freed_memory
from lra.errors import UserError


def options_of(name: str, overrides: list[str]) -> dict:
    """The mechanism's yaml options (without ``name``) with ``KEY=VALUE`` overrides (values read as YAML)."""
    path = ROOT / "conf" / "attention" / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"no conf/attention/{name}.yaml; known: {', '.join(attention_zoo.available())}")
    options = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k != "name"}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"override {item!r} is not KEY=VALUE (e.g. degree=2)")
        options[key] = yaml.safe_load(value)
    return options


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


def build(zoo: ModuleType, name: str, heads: int, head_dim: int, options: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    return zoo.build(name, head_dim=head_dim, num_heads=heads, **options).train()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attention_versions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with (default: HEAD)")
    parser.add_argument("--attention", default="llops")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--batch", type=int, default=32, help="sequences a batch (default 32, the protocol's)")
    parser.add_argument("--batches", type=int, default=2, help="batches a round (default 2)")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1, timed in thread CPU time; more: wall time, idle cores)")
    parser.add_argument("overrides", nargs="*", help="the mechanism's options, e.g. degree=2")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    reuse_freed_memory()  # as training does: freed memory is reused, not returned and faulted in again
    try:
        options = options_of(args.attention, args.overrides)
        batches = [inputs(lengths, args.heads, args.head_dim, seed)
                   for seed, lengths in enumerate(batch_lengths(args.data_dir, args.batch, args.batches))]
        with tempfile.TemporaryDirectory() as folder:
            old_zoo = import_at(args.against, Path(folder), "attention_zoo")
            new = build(attention_zoo, args.attention, args.heads, args.head_dim, options)
            old = build(old_zoo, args.attention, args.heads, args.head_dim, options)
            q, k, v, mask = batches[0]
            with torch.no_grad():
                gap = (new(q, k, v, key_padding_mask=mask) - old(q, k, v, key_padding_mask=mask)).abs().max()
            clock = time.thread_time if args.threads == 1 else time.perf_counter
            row = compare("attention", "us", 1, forward_backward(new, batches), forward_backward(old, batches),
                          args.rounds, args.warmup, clock)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    timed = "one thread (CPU time)" if args.threads == 1 else f"{args.threads} threads (wall time)"
    print(f"{args.attention} {options}: this tree against {args.against}, {args.batches} batches of {args.batch} "
          f"(lengths {', '.join(str(int(b[3].sum(1).max())) for b in batches)} longest), {timed}, forward + backward, "
          f"medians of {args.rounds} rounds")
    print(f"  this tree {row['this_tree'] / 1e6:.4f} s, {args.against} {row['against'] / 1e6:.4f} s a round: "
          f"ratio {row['ratio']:.3f} ({row['ratio_min']:.3f}-{row['ratio_max']:.3f}); outputs differ by at most "
          f"{float(gap):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
