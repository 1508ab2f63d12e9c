"""`python -m results [RUN_ROOT ...] [--out DIR] [--tag TAG] [--reference NAME]`: run records -> LRA tables.

Writes `runs.csv` (long: one row per run x metric), `lra.csv` (wide: mean, std, n per cell, in percent)
and `lra.md` under `--out`, and prints the markdown. Nothing is written when no usable record is found.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from results.atomic import write_atomic
from results.collect import collect
from results.markdown import to_markdown
from results.plots import write_plots
from results.summary import REFERENCES, load_reference, summarize


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m results", description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=["outputs"], metavar="RUN_ROOT",
                        help="directories searched recursively for result.json (default: outputs)")
    parser.add_argument("--out", default="results/tables", help="output directory (default: results/tables)")
    parser.add_argument("--tag", default=None, help="keep only runs with this config tag (default: all tags)")
    parser.add_argument("--reference", action="append", choices=sorted(REFERENCES), default=None,
                        help="published table(s) to show beside ours (default: lra_llops_table; repeatable)")
    parser.add_argument("--published-rows", action="store_true",
                        help="also list published methods we have no run of")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Collect, summarize, write the three tables and print the markdown; always exits 0 unless I/O fails."""
    args = parse_args(argv)
    for root in [r for r in args.roots if not Path(r).exists()]:
        print(f"warning: {root} does not exist", file=sys.stderr)
    everything, problems = collect(args.roots)
    long = everything
    if args.tag is not None:
        long = everything[everything["tag"] == args.tag]
        problems = [p for p in problems if p.tag in (None, args.tag)]
    if long.empty:
        tag = f" with tag {args.tag!r}" if args.tag is not None else ""
        print(f"No usable result.json records{tag} found under: {', '.join(args.roots)}. Nothing written.")
        if args.tag is not None and not everything.empty:
            print(f"Tags found: {', '.join(sorted(everything['tag'].unique()))}.")
        for problem in problems:
            print(f"  {problem.kind}: {problem.path}: {problem.message}")
        return 0
    summary = summarize(long)
    references = {REFERENCES[name]: load_reference(name) for name in args.reference or ["lra_llops_table"]}
    markdown = to_markdown(summary, problems, references, args.published_rows)
    out = Path(args.out)
    write_atomic(out / "runs.csv", long.to_csv(index=False))
    write_atomic(out / "lra.csv", summary.to_csv(index=False, float_format="%.4f"))
    write_atomic(out / "lra.md", markdown)
    plots = write_plots(summary, long, out)
    print(markdown, end="")
    written = [out / "runs.csv", out / "lra.csv", out / "lra.md", *plots]
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
