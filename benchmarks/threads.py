"""The quick job's time on an idle machine and beside one busy process: ``python -m benchmarks.threads``.

OpenMP threads that wait by spinning hold a core while they wait, so a 2-thread job beside one other busy
process on 2 cores stalls at every parallel region; threads that sleep at once pay a wake-up at every
region, which on an idle machine costs as much as a second thread gains. A policy is ``PASSIVE`` or
``ACTIVE`` (``OMP_WAIT_POLICY``) or ``spin:N`` (libgomp's ``GOMP_SPINCOUNT=N``: spin N rounds, then sleep;
libgomp's own default when neither is set is 300000, about 3 ms), and a first case sets none of them nor
``OMP_NUM_THREADS``: what ``run.py`` does by itself (``lra.run.threads``). Each case runs
``python run.py task=listops attention=<a> experiment=quick task.max_steps=<steps>`` in a fresh process
(outputs under a temporary folder) with ``OMP_NUM_THREADS`` and the policy set, once with the machine as it
is ("idle": run it on a quiet machine) and once beside a one-thread busy loop ("busy"). Reports the whole
command's wall time and the training time the run records (``fit_time_s``: steps and their validations), and for
the suite's own case the thread counts it switched to (``choices``, from its log: "1 (0.6)" = one thread while
others kept 0.6 cores busy; empty: it kept torch's default; "?": the run left no log). ``--repeats N`` runs every
case N times. Writes ``threads.csv``. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import write_csv
from lra.run.outputs import BENCH

ROOT = Path(__file__).resolve().parents[1]
CHOICE = re.compile(r"threads: (\d+) \(other processes keep ([0-9.]+) of")  # lra.run.threads' log line
SPIN = "import itertools\nfor _ in itertools.count():\n    pass\n"  # one core busy, no OpenMP


@contextlib.contextmanager
def load(kind: str) -> Iterator[None]:
    """``busy``: a one-thread spinning process for the duration; ``idle``: nothing."""
    if kind == "idle":
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def job_command(attention: str, steps: int, run_dir: Path, overrides: list[str]) -> list[str]:
    """The quick job, cut to ``steps`` steps with one validation at the end, in ``run_dir``."""
    return [sys.executable, str(ROOT / "run.py"), "task=listops", f"attention={attention}", "experiment=quick",
            f"task.max_steps={steps}", f"task.eval_every={steps}", "trainer.enable_progress_bar=false",
            f"hydra.run.dir={run_dir}", *overrides]


def job_env(threads: int | None, policy: str) -> dict[str, str]:
    """This environment with the thread count and wait policy (``PASSIVE``, ``ACTIVE``, ``spin:N``) of one case;
    ``threads=None``: none of them set, the suite chooses (``lra.run.threads``: libgomp's spin, free cores)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    if threads is None:
        return env
    if policy.startswith("spin:"):
        return {**env, "OMP_NUM_THREADS": str(threads), "GOMP_SPINCOUNT": str(int(policy[5:]))}
    if policy not in ("PASSIVE", "ACTIVE"):
        raise ValueError(f"policy {policy!r}: use PASSIVE, ACTIVE or spin:N (GOMP_SPINCOUNT)")
    return {**env, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": policy}


def run_case(attention: str, steps: int, threads: int | None, policy: str, kind: str, overrides: list[str]) -> dict:
    """One case in a fresh process: wall seconds of the command and the run's recorded fit time."""
    with tempfile.TemporaryDirectory() as tmp, load(kind):
        run_dir = Path(tmp) / "run"
        start = time.perf_counter()
        done = subprocess.run(job_command(attention, steps, run_dir, overrides), env=job_env(threads, policy),
                              cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        record = run_dir / "result.json"
        fit = json.loads(record.read_text()).get("fit_time_s") if record.exists() else None
        log = run_dir / "run.log"
        choices = "; ".join(f"{n} ({b})" for n, b in CHOICE.findall(log.read_text())) if log.exists() else "?"
    row = {"attention": attention, "steps": steps, "threads": "auto" if threads is None else threads,
           "policy": policy, "load": kind, "choices": choices,
           "wall_s": wall, "fit_s": fit, "status": "ok" if done.returncode == 0 else f"exit {done.returncode}"}
    if done.returncode:
        row["status"] += ": " + (done.stderr.strip().splitlines() or [""])[-1][:200]
    return row


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python -m benchmarks.threads", description=__doc__.splitlines()[0])
    parser.add_argument("--attention", default="llops")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--policies", nargs="+", default=["PASSIVE", "ACTIVE", "spin:300000"],
                        help="PASSIVE, ACTIVE or spin:N (GOMP_SPINCOUNT=N); the first is used for one thread. "
                             "A first case always runs with none of them set: the suite's own choice")
    parser.add_argument("--loads", nargs="+", default=["idle", "busy"], choices=["idle", "busy"])
    parser.add_argument("--repeats", type=int, default=1, help="runs of every case (default 1)")
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every case")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    cases = [(None, "suite")] + [(t, p) for t, p in itertools.product(args.threads, args.policies)
                                 if t > 1 or p == args.policies[0]]  # one thread never waits at a barrier
    rows = []
    for _, kind, (threads, policy) in itertools.product(range(args.repeats), args.loads, cases):
        rows.append(run_case(args.attention, args.steps, threads, policy, kind, args.overrides))
        r = rows[-1]
        fit = f"{r['fit_s']:.1f}" if r["fit_s"] is not None else "-"
        chose = f" (chose {r['choices']})" if r["choices"] else ""
        print(f"{kind:>5} {r['threads']} thread(s) {policy:>12}: {r['wall_s']:6.1f} s command, {fit} s training"
              f"{chose}  {r['status'] if r['status'] != 'ok' else ''}", flush=True)
    out = Path(args.out)
    write_csv(pd.DataFrame(rows), out, "threads.csv", say=False)
    print(f"wrote {out / 'threads.csv'}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
