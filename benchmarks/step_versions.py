"""The step outside attention, this tree's ``lra`` against a git revision's, in one process:
``python -m benchmarks.step_versions [--against REV]``.

On shared cores absolute times drift with the other processes' load; a ratio measured within one process, the
two versions taking turns, does not. ``lra/`` at ``REV`` is unpacked (``git archive``) into a temporary folder and
imported under another name; both versions build the encoder of ``python run.py task=<task>`` (the full
protocol's shapes unless overrides say otherwise) with every attention a pass-through (``out = v``, as in
``benchmarks.step``) from the same seed, and each round times one training step of each (forward, backward,
AdamW, each version's: fused on the CPU where its ``lra.optimizer`` has it) on the same batch of full-length
tokens, in the thread's CPU time (one intra-op thread, so time spent waiting for a core is not counted; with
``--threads 2`` in wall time, which needs idle cores). The same is done for dropout alone (the ``Dropout``
module, forward and backward, on a ``(tokens, ffn_dim)`` tensor) and for drawing its bool masks (each version's
mask function; ``bernoulli``: this tree's against ``nn.Dropout``'s ``bernoulli_`` draw). Prints
each version's median microseconds a token (masks and dropout: nanoseconds an element) and the median of the
per-round ratios (this tree / REV). A benchmark, not a test: it writes nothing.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

import lra.dropout
import lra.model
import lra.optimizer
from benchmarks.revision import import_at
from benchmarks.step import PassThrough
from lra.config import compose_run
from lra.run.allocator import reuse_freed_memory
from lra.settings import Run
from lra_base.errors import UserError

MASK_FUNCTIONS = ("keep_mask", "drop_mask")  # lra.dropout's mask function, by its name at each revision
PARTS = ["masks", "bernoulli", "dropout", "step"]


def load_lra_at(rev: str, folder: Path) -> ModuleType:
    """``lra`` as it is at git revision ``rev``, unpacked under ``folder`` and imported as ``lra_at_<rev>``."""
    package = import_at(rev, folder, "lra")
    for part in ("model", "dropout", "optimizer"):
        if (folder / "lra" / f"{part}.py").exists():
            importlib.import_module(f"{package.__name__}.{part}")
    return package


def build(model_module: ModuleType, run: Run, seed: int = 0) -> torch.nn.Module:
    """The encoder of ``run`` from ``model_module`` (a version's ``lra.model``), attention replaced by ``out = v``."""
    model, max_len = run.model, run.task.max_len
    torch.manual_seed(seed)
    return model_module.Encoder(vocab_size=256, max_len=max_len, dim=model.dim, depth=model.depth,
                                num_heads=model.heads, ffn_dim=model.ffn_dim, dropout=model.dropout,
                                make_attention=lambda layer: PassThrough(), pooling=model.pooling,
                                qkv_dim=model.qkv_dim)


def training_step(version: ModuleType, encoder: torch.nn.Module, tokens: torch.Tensor,
                  lengths: torch.Tensor) -> Callable[[], None]:
    """One forward, backward and AdamW step of ``encoder`` with a linear read-out, as a function; AdamW as
    ``version`` (an ``lra`` package) builds it (torch's default before ``lra.optimizer``)."""
    head = torch.nn.Linear(encoder.norm.normalized_shape[0], 10)
    params = [*encoder.parameters(), *head.parameters()]
    optimizer = version.optimizer.adamw(params, lr=1e-4) if hasattr(version, "optimizer") else \
        torch.optim.AdamW(params, lr=1e-4)
    labels = torch.arange(tokens.shape[0]) % 10

    def step() -> None:
        out = encoder(tokens, lengths)
        loss = torch.nn.functional.cross_entropy(head(out if out.dim() == 2 else out.mean(1)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def dropout_pass(dropout_module: ModuleType, shape: tuple[int, int], p: float) -> Callable[[], None]:
    """Forward and backward of a version's ``Dropout(p)`` on a tensor of ``shape``."""
    layer = dropout_module.Dropout(p).train()
    x = torch.randn(shape, requires_grad=True)
    grad = torch.randn(shape)
    return lambda: layer(x).backward(grad)


def mask_draw(dropout_module: ModuleType, shape: tuple[int, int], p: float) -> Callable[[], None]:
    """A version's bool dropout mask for ``shape`` (its mask function, whichever name it has there)."""
    draw = getattr(dropout_module, next(n for n in MASK_FUNCTIONS if hasattr(dropout_module, n)))
    size, device = torch.Size(shape), torch.device("cpu")
    return lambda: draw(size, p, device)


def bernoulli_draw(shape: tuple[int, int], p: float) -> Callable[[], None]:
    """``nn.Dropout``'s CPU mask for ``shape``: a float ``bernoulli_`` draw."""
    return lambda: torch.empty(shape).bernoulli_(1 - p)


def compare(name: str, unit: str, per: int, new: Callable[[], None], old: Callable[[], None], rounds: int,
            warmup: int, clock: Callable[[], float] = time.thread_time) -> dict:
    """Time ``new`` and ``old`` in turns (by ``clock``), ``rounds`` times after ``warmup``."""
    times: dict[str, list[float]] = {"new": [], "old": []}
    for i in range(warmup + rounds):
        for label, fn in (("new", new), ("old", old)) if i % 2 == 0 else (("old", old), ("new", new)):
            start = clock()
            fn()
            if i >= warmup:
                times[label].append(clock() - start)
    scale = (1e6 if unit == "us" else 1e9) / per
    ratios = [a / b for a, b in zip(times["new"], times["old"])]
    return {"what": name, "unit": f"{unit}/{'token' if unit == 'us' else 'element'}",
            "this_tree": statistics.median(times["new"]) * scale, "against": statistics.median(times["old"]) * scale,
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_versions", description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with (default: HEAD)")
    parser.add_argument("--task", default="listops")
    parser.add_argument("--batch", type=int, default=8, help="sequences a step (default 8)")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--parts", nargs="+", default=PARTS, choices=PARTS)
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads (default 1, timed in thread CPU time; more: wall time, idle cores)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model.dropout=0.2")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    reuse_freed_memory()
    try:
        run = compose_run([f"task={args.task}", "attention=linear", *args.overrides])
        with tempfile.TemporaryDirectory() as folder:
            old = load_lra_at(args.against, Path(folder))
            rows = run_parts(args, run, old)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    threads = "one thread (CPU time)" if args.threads == 1 else f"{args.threads} threads (wall time)"
    print(f"this tree against {args.against}: {args.task}, batch {args.batch}, {threads}, medians of "
          f"{args.rounds} rounds (ratio: this tree / {args.against}, min-max over rounds)")
    for r in rows:
        print(f"{r['what']:>8}: {r['this_tree']:8.3f} vs {r['against']:8.3f} {r['unit']:<10} "
              f"ratio {r['ratio']:.3f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f})")
    return 0


def run_parts(args, run: Run, old: ModuleType) -> list[dict]:
    length = int(run.task.own.get("seq_len", run.task.max_len))
    p, hidden = float(run.model.dropout), run.model.ffn_dim
    tokens = args.batch * length
    clock = time.thread_time if args.threads == 1 else time.perf_counter  # one thread's CPU time misses the others'
    rows = []
    if "masks" in args.parts:
        shape = (tokens, hidden)
        rows.append(compare("masks", "ns", tokens * hidden, mask_draw(lra.dropout, shape, p),
                            mask_draw(old.dropout, shape, p), args.rounds, args.warmup, clock))
    if "bernoulli" in args.parts:  # against nn.Dropout's masks rather than REV's
        shape = (tokens, hidden)
        rows.append(compare("bernoulli", "ns", tokens * hidden, mask_draw(lra.dropout, shape, p),
                            bernoulli_draw(shape, p), args.rounds, args.warmup, clock))
    if "dropout" in args.parts:
        shape = (tokens, hidden)
        rows.append(compare("dropout", "ns", tokens * hidden, dropout_pass(lra.dropout, shape, p),
                            dropout_pass(old.dropout, shape, p), args.rounds, args.warmup, clock))
    if "step" in args.parts:
        ids = torch.randint(1, 256, (args.batch, length), generator=torch.Generator().manual_seed(0))
        lengths = torch.full((args.batch,), length)
        rows.append(compare("step", "us", tokens, training_step(lra, build(lra.model, run), ids, lengths),
                            training_step(old, build(old.model, run), ids, lengths), args.rounds, args.warmup, clock))
    return rows


if __name__ == "__main__":
    sys.exit(main())
