"""Training steps under CPU allocator settings: ``python -m benchmarks.allocator [--settings ...] [overrides]``.

A full-protocol step allocates and frees gigabytes of activations whose sizes change with every batch's
longest sequence. ``run.py`` keeps freed memory for reuse (``lra.run.allocator``) and hands it back every
``RELEASE_EVERY`` steps; the memory the heap then grows into, or touches again after a release, costs page
faults, 4 KiB at a time. A setting is an environment a fresh process starts with:

* ``default``: none of the variables below;
* ``thp``: ``THP_MEM_ALLOC_ENABLE=1``, PyTorch's own switch (c10 ``alloc_cpu``): tensors of 2 MiB and more
  are 2 MiB-aligned and ``madvise(MADV_HUGEPAGE)``, so they fault in 2 MiB pages;
* ``glibc_thp``: ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35): the heap itself is madvised;
* ``both``: the two together;
* ``jemalloc``: jemalloc instead of glibc's malloc (``LD_PRELOAD``; Debian's ``libjemalloc2``), told to keep
  freed memory (``MALLOC_CONF``, as Intel's PyTorch CPU tuning guide does); skipped where it is not installed.

Transparent huge pages must be ``always`` or ``madvise`` (``/sys/kernel/mm/transparent_hugepage/enabled``) for
the madvise to act; the benchmark prints the mode. Each case runs ``--steps`` training steps (forward, backward,
AdamW) of ``python run.py task=<task> attention=<attention>``'s model on the task's own training batches, with
the run's release every ``--release-every`` steps, in its own process; the settings alternate over
``--rounds``. Reports per case the median CPU seconds of a step (the first ``--warmup`` left out), the mean
minor page faults a step (their count times 4 KiB, in MiB: a 2 MiB huge page faults once) and the peak resident
memory, and each setting's ratio to ``default``. Writes ``allocator.csv`` (with the task, attention, threads and
steps every case ran). A benchmark, not a test: run it on a quiet core (one thread by
default, so it can share a machine with a run on the other core).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import write_csv
from lra.run.outputs import BENCH

ROOT = Path(__file__).resolve().parents[1]
THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
SETTINGS = {
    "default": {},
    "thp": {"THP_MEM_ALLOC_ENABLE": "1"},
    "glibc_thp": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "both": {"THP_MEM_ALLOC_ENABLE": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
}
JEMALLOC = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
if JEMALLOC.exists():
    SETTINGS["jemalloc"] = {"LD_PRELOAD": str(JEMALLOC), "MALLOC_CONF": "oversize_threshold:1,background_thread:true,"
                            "metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1"}
VARIABLES = sorted({name for env in SETTINGS.values() for name in env})


def thp_mode() -> str:
    """The kernel's transparent-huge-page mode (the bracketed word), or ``unknown``."""
    try:
        text = THP_MODE.read_text()
    except OSError:
        return "unknown"
    return text[text.find("[") + 1 : text.find("]")] if "[" in text else text.strip()


def child(args) -> None:
    """One case: ``args.steps`` timed training steps; prints one JSON line."""
    import pytorch_lightning as pl

    from lra.build import build
    from lra.config import compose_run
    from lra.optimizer import adamw
    from lra.run.allocator import release_freed_memory, reuse_freed_memory

    run = compose_run([f"task={args.task}", f"attention={args.attention}", *args.overrides])
    if run.reuse_freed_memory:
        reuse_freed_memory()  # as run.py
    pl.seed_everything(run.seed, verbose=False)
    built = build(run)
    model = built.model
    optimizer = adamw(model.parameters(), lr=1e-4)
    cpu, faults = [], []
    for step, batch in enumerate(built.datamodule.train_dataloader()):
        if step == args.steps:
            break
        before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
        model.model_step(batch)[0].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if run.reuse_freed_memory and (step + 1) % args.release_every == 0:
            release_freed_memory()  # as lra.run.allocator.ReleaseFreedMemory, inside the step it follows
        cpu.append(time.process_time() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"cpu": cpu, "faults": faults, "peak_mib": peak_mib}))


def case_env(setting: str, threads: int) -> dict[str, str]:
    """This environment without any setting's variables, plus ``setting``'s (and the thread count, unless set)."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES} | SETTINGS[setting]
    env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


def run_case(setting: str, args) -> dict:
    env = case_env(setting, args.threads)
    command = [sys.executable, "-m", "benchmarks.allocator", "--child", "--task", args.task, "--attention",
               args.attention, "--steps", str(args.steps), "--release-every", str(args.release_every),
               *args.overrides]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"case {setting} failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    cpu, faults = out["cpu"][args.warmup :], out["faults"][args.warmup :]
    return {"setting": setting, "step_cpu_s": statistics.median(cpu), "mean_step_cpu_s": statistics.fmean(cpu),
            "faults_mib_per_step": statistics.fmean(faults) * 4 / 1024, "peak_mib": out["peak_mib"]}


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python -m benchmarks.allocator", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=["default", "thp", "both"])
    parser.add_argument("--task", default="listops")
    parser.add_argument("--attention", default="llops")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the statistics")
    parser.add_argument("--release-every", type=int, default=10, help="steps between releases (run.py: 50)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each case, unless set")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every case, e.g. task.batch_size=8")
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.steps <= args.warmup or min(args.release_every, args.rounds, args.threads) < 1:
        parser.error("--steps must exceed --warmup; --release-every, --rounds and --threads must be at least 1")
    out = BENCH.choose(parser, args)
    print(f"transparent huge pages: {thp_mode()}; {args.task} / {args.attention}, {args.steps} steps a case, "
          f"release every {args.release_every}", flush=True)
    rows = []
    for round_ in range(args.rounds):
        for setting in args.settings:
            rows.append({"round": round_, **run_case(setting, args)})
            r = rows[-1]
            print(f"round {round_} {setting:>9}: step {r['step_cpu_s']:.3f} s CPU (mean {r['mean_step_cpu_s']:.3f}), "
                  f"faults {r['faults_mib_per_step']:.0f} MiB a step, peak {r['peak_mib']:.0f} MiB", flush=True)
    frame = pd.DataFrame(rows)
    summary = frame.groupby("setting", sort=False)[["step_cpu_s", "mean_step_cpu_s", "faults_mib_per_step",
                                                     "peak_mib"]].median()
    if "default" in summary.index:
        summary["ratio_to_default"] = summary["mean_step_cpu_s"] / summary.loc["default", "mean_step_cpu_s"]
    summary.insert(0, "thp_mode", thp_mode())
    threads = case_env("default", args.threads)["OMP_NUM_THREADS"]
    case = {"task": args.task, "attention": args.attention, "threads": threads, "steps": args.steps,
            "release_every": args.release_every, "overrides": " ".join(args.overrides)}
    print(summary.to_string(float_format=lambda x: f"{x:.3f}"))
    summary = summary.assign(**case)  # what the table's title would otherwise have to assume
    write_csv(summary.reset_index(), out, "allocator.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
