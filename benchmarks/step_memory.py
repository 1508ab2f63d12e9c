"""Peak resident memory of a training step: ``python -m benchmarks.step_memory [--tasks ...] [--attentions ...]``.

Each (task, attention) runs in a fresh Python process, so no cell inherits another's freed memory: the
model of ``python run.py task=<task> attention=<attention>`` (full-protocol shapes; ``benchmarks.step``'s
full-length random batch) trains ``--steps`` Lightning steps with glibc set as training sets it
(``reuse_freed_memory``). Reported: the process's resident memory when training starts (Python, torch,
Lightning, model, batch), the peak during the steps (``VmHWM`` reset at that point through
``/proc/self/clear_refs``; ``getrusage``'s lifetime peak where that is not possible), their difference
(what the step itself takes), and the step time.

A task with ``task.micro_batches`` n computes each batch in n accumulated parts, so one part is what a step
holds at once: the cell measures a part (``--batch`` defaults to the task's batch over n). ``--batch`` below
the part at ``--fit-batch`` (default 32, over n) measures a smaller batch and scales the step's memory up
linearly (activations grow with the batch; the weights are under a megabyte); ``fits`` says whether the
process peak there stays within ``--fit-gib`` (4). ``--guard-gib`` caps a cell's
data segment (``RLIMIT_DATA``) so a cell that would not fit stops instead of pressing the machine; it is
then reported as over the guard. The cap is set when training starts, after the imports, the Hydra
config and the model (fixed costs whose allocation failures end in other libraries' error paths, some of which
hang); a cell whose data segment is already over the cap then is over the guard without a step. Default: the
linear-time mechanisms of the zoo on Text (4,096 tokens) and Retrieval (2 x 4,000). Writes ``step_memory.csv``.
A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

import attention_zoo
from benchmarks import attention_name, write_csv
from benchmarks.loading import LoadingTimer
from benchmarks.step import VOCAB
from lra.build import build_model, example_batch
from lra.config import compose_run
from lra.run.allocator import reuse_freed_memory
from lra.run.outputs import BENCH
from lra.run.subnormals import flush_subnormals

TASKS = ["text", "retrieval"]
MIB = 2**20


def status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Start ``VmHWM`` again from the current resident size (Linux ``clear_refs`` 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_bytes() -> int:
    """The resident high-water mark: ``VmHWM``, else ``getrusage`` (kilobytes on Linux)."""
    return status_bytes("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class OverGuard(MemoryError):
    """The cell's data segment would pass ``--guard-gib``."""


class PeakProbe(pl.Callback):
    """Resident memory when training starts; resets the high-water mark there and caps the data segment at
    ``cap`` bytes (``RLIMIT_DATA``) for the steps."""

    def __init__(self, cap: int | None = None):
        self.cap = cap

    def on_train_start(self, trainer, pl_module) -> None:
        self.before = status_bytes("VmRSS") or peak_bytes()
        self.reset = reset_peak()
        if self.cap:
            data = status_bytes("VmData") or 0
            if data > self.cap:
                raise OverGuard(f"can't allocate memory: the data segment is {data / MIB:.0f} MiB when training "
                                f"starts, over the {self.cap / MIB:.0f} MiB cap")
            resource.setrlimit(resource.RLIMIT_DATA, (self.cap, self.cap))


def measure_here(task: str, attention: str, batch_size: int | None, steps: int, overrides: list[str],
                 cap: int | None = None) -> dict:
    """One cell in this process: memory before training, the peak over ``steps`` steps (the data segment capped
    at ``cap`` bytes from the first step), the step time."""
    run = compose_run([f"task={task}", f"attention={attention}", *overrides])
    if run.flush_subnormals:
        flush_subnormals()  # as run.py
    if run.reuse_freed_memory:
        reuse_freed_memory()
    pl.seed_everything(run.seed, verbose=False)
    micro = run.task.micro_batches
    batch_size = batch_size or run.task.batch_size // micro
    batch = example_batch(run, batch_size, VOCAB, torch.Generator().manual_seed(0))
    model = build_model(run, VOCAB, run.task.num_classes)
    probe, timer = PeakProbe(cap), LoadingTimer(skip=1)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, limit_val_batches=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[probe, timer], num_sanity_val_steps=0)
    trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader([batch] * steps, batch_size=None))
    peak = peak_bytes()
    return {"task": task, "attention": attention, "batch": batch_size, "micro_batches": micro,
            "length": batch["tokens"].shape[1],
            "rss_before_mb": probe.before / MIB, "step_peak_mb": (peak - probe.before) / MIB,
            "peak_rss_mb": peak / MIB, "peak_reset": probe.reset,
            "step_s": (sum(timer.steps) / len(timer.steps)) if timer.steps else None}


def measure_fresh(task: str, attention: str, args) -> dict:
    """One cell in a fresh Python process (``--child``); a failure becomes a row with its status."""
    command = [sys.executable, "-m", "benchmarks.step_memory", "--child", "--tasks", task, "--attentions", attention,
               "--steps", str(args.steps), "--guard-gib", str(args.guard_gib)]
    command += ["--batch", str(args.batch)] if args.batch else []
    command += ["--", *args.overrides] if args.overrides else []
    root = str(Path(__file__).resolve().parents[1])  # the child imports this package from where the parent did
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    row = {"task": task, "attention": attention, "batch": args.batch, "status": "ok"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {**row, "status": f"timeout after {args.timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return {**row, **json.loads(lines[-1])}
    err = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    memory = any(s in done.stderr for s in ("can't allocate memory", "MemoryError", "Cannot allocate memory"))
    return {**row, "status": f"over the {args.guard_gib:g} GiB guard" if memory else f"failed: {err[0][:200]}"}


def with_fit(row: dict, fit_batch: int, fit_gib: float) -> dict:
    """Adds the process peak at ``fit_batch`` (measured, or the step's memory scaled linearly) and ``fits``;
    with micro-batches the step holds one part, ``fit_batch`` over their number, at a time."""
    if row.get("status") != "ok":
        return {**row, "fit_batch": fit_batch, "peak_at_fit_mb": None, "fits": False}
    scale = fit_batch / row.get("micro_batches", 1) / row["batch"]
    peak = row["rss_before_mb"] + scale * row["step_peak_mb"]
    return {**row, "fit_batch": fit_batch, "peak_at_fit_mb": peak, "extrapolated": scale != 1,
            "fits": peak <= fit_gib * 1024}


def linear_time_attentions() -> list[str]:
    """The zoo's mechanisms whose cost grows linearly with the length (each class's ``quadratic`` says)."""
    return [name for name in attention_zoo.available() if not attention_zoo.get(name).quadratic]


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    parser.add_argument("--attentions", nargs="+", default=linear_time_attentions(), type=attention_name)
    parser.add_argument("--batch", type=int, default=None, help="measured batch (default: the task's, 32)")
    parser.add_argument("--fit-batch", type=int, default=32, help="batch the fit is judged at")
    parser.add_argument("--fit-gib", type=float, default=4.0)
    parser.add_argument("--steps", type=int, default=2, help="steps per cell (the first allocates AdamW's state)")
    parser.add_argument("--guard-gib", type=float, default=6.0, help="data-segment cap of each cell; 0: none")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    BENCH.add_to(parser)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every cell, e.g. experiment=quick")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.child:
        cap = int(args.guard_gib * 2**30) if args.guard_gib > 0 else None
        try:
            print(json.dumps(measure_here(args.tasks[0], args.attentions[0], args.batch, args.steps, args.overrides,
                                          cap)))
            code = 0
        except BaseException as err:  # every failure ends in os._exit below, not in exit handlers
            print(f"{type(err).__name__}: {err}", file=sys.stderr)
            code = 3
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip exit handlers: under the guard, a failing malloc can make them spin for minutes
    rows = []
    for task in args.tasks:
        for attention in args.attentions:
            rows.append(with_fit(measure_fresh(task, attention, args), args.fit_batch, args.fit_gib))
            r = rows[-1]
            parts = f" in {r['micro_batches']} parts" if r.get("micro_batches", 1) > 1 else ""
            said = (f"before {r['rss_before_mb']:6.0f} MiB, step +{r['step_peak_mb']:6.0f} MiB (batch {r['batch']}), "
                    f"at batch {args.fit_batch}{parts}: {r['peak_at_fit_mb']:6.0f} MiB, "
                    f"fits {args.fit_gib:g} GiB: {r['fits']}"
                    if r["status"] == "ok" else r["status"])
            print(f"{task:>10} {attention:>11}: {said}", flush=True)
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    write_csv(frame, out, "step_memory.csv", say=False)
    misfits = frame[~frame["fits"].astype(bool)]
    names = ", ".join(f"{t}/{a}" for t, a in zip(misfits.task, misfits.attention))
    print(f"{len(frame) - len(misfits)} of {len(frame)} cells fit in {args.fit_gib:g} GiB at batch {args.fit_batch}"
          + (f"; not: {names}" if names else ""))
    print(f"wrote {out / 'step_memory.csv'} (threads: {os.environ.get('OMP_NUM_THREADS', 'default')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
