"""The whole-run estimate, this tree against a git revision, the two taking turns:
``python -m benchmarks.run_estimate_versions --against REV [--rounds N] [--attentions llops]``.

One ``benchmarks.run_estimate`` moves by 10-20% between windows of these machines (docs/benchmarks.md, "Whole run"),
more than a code change worth measuring; two estimates taken back to back share their window. ``REV``'s code
(``lra``, ``attention_zoo``, ``benchmarks``, ``conf``, ``data_prep``, ``run.py``) is unpacked with ``git archive``
into a temporary folder, and each round runs ``python -m benchmarks.run_estimate`` once from there and once from
this tree, each in a fresh process with the same options, overrides and data (the order alternates: ABBA). Reported
per attention: each version's median total (wall minutes) and wall / floor (the floor as each version counts it, at
that run's own GEMM rate), and the median and range of the rounds' paired ratios (this tree / REV), printed as
``results.bench_tables`` renders the CSV. Both use the threads ``run_estimate`` uses, so wall times need idle cores.
Writes ``run_estimate_versions.csv`` (every run's row, rewritten after each run: a later failure keeps the runs
done) under ``outputs/tables/bench/`` (``--committed``: ``results/tables/bench/``). A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import attention_name, this_processor, write_csv
from benchmarks.revision import ROOT, unpack
from lra.run.outputs import BENCH
from lra_base.errors import UserError

CODE = ["lra", "attention_zoo", "benchmarks", "conf", "data_prep", "run.py"]
LATER_CODE = ["lra_base"]  # unpacked where the revision has it (since 59b6cb6: the floor below lra and data_prep)
NEEDED = {"total_min", "floor_min", "gemm_gflops"}  # run_estimate's columns this compares (d750e0e and later)


def absolute_data_dir(overrides: list[str]) -> list[str]:
    """``overrides`` with ``data_dir`` made absolute (the revision runs from another folder); ``data`` by default."""
    given = [o for o in overrides if o.startswith("data_dir=")]
    data_dir = Path(given[-1].split("=", 1)[1] if given else "data").expanduser()
    return [o for o in overrides if o not in given] + [f"data_dir={data_dir.resolve()}"]


def estimate(folder: Path, out: Path, args) -> list[dict]:
    """One ``run_estimate`` in a fresh process from ``folder``, its CSV's rows."""
    import pandas as pd

    command = [sys.executable, "-m", "benchmarks.run_estimate", "--attentions", *args.attentions,
               "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--out", str(out), *args.overrides]
    env = {**os.environ, "PYTHONPATH": str(folder)}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"run_estimate from {folder} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    frame = pd.read_csv(out / "run_estimate.csv")
    if missing := NEEDED - set(frame.columns):
        raise UserError(f"run_estimate from {folder} wrote no {', '.join(sorted(missing))}: its revision predates the "
                        f"floor columns; give --against d750e0e or later")
    return frame.to_dict("records")


def commit_of(rev: str | None) -> str:
    """Short sha of ``rev``'s commit, or of this tree's HEAD (``+changes`` where the compared code differs from it)."""
    git = ["git", "-C", str(ROOT)]
    sha = subprocess.run([*git, "rev-parse", "--short", f"{rev or 'HEAD'}^{{commit}}"], capture_output=True,
                         text=True).stdout.strip()
    dirty = rev is None and subprocess.run([*git, "diff", "--quiet", "HEAD", "--", *CODE]).returncode != 0
    return sha + ("+changes" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from results.bench_tables import run_estimate_versions_table

    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_estimate_versions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="git revision to compare with")
    parser.add_argument("--attentions", nargs="+", default=["llops"], type=attention_name)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument("--steps", type=int, default=3, help="run_estimate's timed training steps (median)")
    parser.add_argument("--warmup", type=int, default=1, help="run_estimate's untimed first steps")
    BENCH.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both versions, e.g. data_dir=...")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.overrides = absolute_data_dir(args.overrides)
    rows, out = [], Path(args.out)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            old = Path(tmp) / "revision"
            if missing := sorted(set(CODE) - set(unpack(args.against, old, [*CODE, *LATER_CODE]))):
                raise UserError(f"--against {args.against}: it has no {', '.join(missing)}, so its run_estimate would "
                                f"import this tree's; give a later commit")
            commits = {"this tree": commit_of(None), args.against: commit_of(args.against)}
            processor = this_processor()  # both versions' rows: the revision's run_estimate may predate the column
            for i in range(args.rounds):
                pair = [("this tree", ROOT), (args.against, old)]
                for version, folder in pair if i % 2 else pair[::-1]:
                    for row in estimate(folder, Path(tmp) / f"{i}-{folder.name}", args):
                        rows.append({"round": i, "version": version, "commit": commits[version], **row,
                                     "processor": processor})
                        print(f"round {i + 1}, {version}: {row['attention']} {row['total_min']:.1f} min "
                              f"(floor {row['floor_min']:.1f} at {row['gemm_gflops']:.1f} GFLOP/s)", flush=True)
                    write_csv(pd.DataFrame(rows), out, "run_estimate_versions.csv", say=False)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        if rows:
            print(f"the {len(rows)} runs done before it are in {out / 'run_estimate_versions.csv'}", file=sys.stderr)
        return 2
    print(f"whole-run estimate, this tree against {args.against}, medians of {args.rounds} rounds "
          f"(ratio: this tree / {args.against}, min-max over rounds):")
    print(run_estimate_versions_table(pd.DataFrame(rows)))
    print(f"wrote {out / 'run_estimate_versions.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
