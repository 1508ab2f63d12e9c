"""`python -m results [RUN_ROOT ...] [--out DIR] [--tag TAG] [--print] [--verbose]`: run records -> LRA tables.

By default it reads the committed records (`results/runs/`) and your own (`outputs/`) and writes under
`outputs/tables/`; `--committed` rebuilds the committed tables (`results/tables/`) from `results/runs/` only,
so a fresh clone reproduces them byte for byte.

Writes under `--out`: `runs.csv` (long: one row per run x metric, with its status and the protocol it was checked
against), `lra.csv` (wide: `<task>_{mean,std,n}` in percent, then per published table `<task>_<reference>` and
`<task>_delta_<reference>` = ours − published), `lra.md` (best per column in bold, published columns and deltas
beside ours, runs not averaged with the reason: failed, duplicate, config drift, ...), `lra.tex` (booktabs, one
table per tag), PNG plots and, with `--html`, the leaderboard page `index.html` (+ `index_files/`, see
`results.html`; `--run-figures` adds each run's own learning curve, a second or so per run).
It prints a short summary (where the tables went, how many runs and sections, what was not averaged and why);
`--print` prints the markdown instead (on stdout, the summary then on stderr), `--verbose` lists every file written.
`--tag TAG` keeps the tag's sections, its derived ones (`TAG · <settings>`, `TAG · yours`) included, or one
section given by its full heading name, and says what it left out.
Nothing is written when no usable record is found.
Analysis records (`kind: analysis`, from `analyses`) become `<analysis>.{csv,md}` each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from lra.run.run_files import COMMITTED_RUNS_NAME
from lra_base.atomic import LinkRefused, check_writable, refuse_link, write_atomic
from results.analyses import find_analyses, write_analysis_tables
from results.collect import collect
from results.escapes import add_escapes
from results.html import write_site
from results.latex import to_latex
from results.markdown import shared_protocol_notes, to_markdown
from results.microscope import NAME as MICROSCOPE
from results.microscope import write_microscope_tables
from results.plots import write_plots
from results.protocol import base_tag, protocol_notes, run_experiment, shared_protocols
from results.report import left_out_lines, select_tag, summary_lines
from results.rules import read_rules, split_spread_note
from results.summary import (
    DEFAULT_REFERENCES,
    REFERENCES,
    add_published,
    load_reference,
    rules_of_sections,
    summarize,
)

COMMITTED_ROOT, COMMITTED_OUT = COMMITTED_RUNS_NAME, "results/tables"
USER_ROOTS, USER_OUT = (COMMITTED_ROOT, "outputs"), "outputs/tables"


def check_output_folder(out: str | Path) -> None:
    """``NotWritable`` when tables cannot be written under ``out``; ``LinkRefused`` naming a symbolic link among
    its files or its page's images (a plot drawn over one would be written through it)."""
    out = Path(out)
    check_writable(out, "give another --out DIR")
    for folder in (out, out / "index_files"):
        if folder.is_dir() and not folder.is_symlink():
            for entry in sorted(folder.iterdir()):
                refuse_link(entry)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m results", description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=None, metavar="RUN_ROOT",
                        help=f"directories searched recursively for result.json (default: {' '.join(USER_ROOTS)})")
    parser.add_argument("--out", default=None, help=f"output directory (default: {USER_OUT})")
    parser.add_argument("--committed", action="store_true",
                        help=f"rebuild the committed tables: read only {COMMITTED_ROOT}, write {COMMITTED_OUT}")
    parser.add_argument("--tag", default=None,
                        help="keep only this tag's sections, its derived ones (TAG · <settings>, TAG · yours) "
                             "included, or one section by its full heading name (default: all tags)")
    parser.add_argument("--reference", action="append", choices=[*sorted(REFERENCES), "all"], default=None,
                        help=f"published table(s) to show beside ours (default: {', '.join(DEFAULT_REFERENCES)}; "
                             "each only beside the runs it applies to; repeatable; "
                             "all = every table in results/reference/ registered in results.summary.REFERENCES)")
    parser.add_argument("--published-rows", action="store_true",
                        help="also list published methods we have no run of")
    parser.add_argument("--html", action="store_true",
                        help="also write the leaderboard page: index.html and index_files/ (see results.html)")
    parser.add_argument("--run-figures", action="store_true",
                        help="with --html, also draw every run's own learning curve in its block (about a second a "
                             "run; without it each table's runs share one figure)")
    parser.add_argument("--print", action="store_true", dest="print_tables",
                        help="print the tables (lra.md) on stdout; the summary goes to stderr")
    parser.add_argument("--verbose", action="store_true", help="also list every file written")
    args = parser.parse_args(argv)
    if args.run_figures and not args.html:
        parser.error("--run-figures draws figures of the page: give --html with it")
    if args.committed and (args.roots or args.out):
        parser.error("--committed reads results/runs and writes results/tables; give no RUN_ROOT or --out with it")
    args.roots = [COMMITTED_ROOT] if args.committed else (args.roots or list(USER_ROOTS))
    args.out = args.out or (COMMITTED_OUT if args.committed else USER_OUT)
    return args


def split_notes(found: tuple[Path, dict] | None, rules: pd.DataFrame, long: pd.DataFrame) -> dict[str, str]:
    """{tag: the split-spread note} for each ListOps section whose rule was scored on the test split the
    ``listops_splits`` record measured (same SHA-256)."""
    if found is None or rules.empty:
        return {}
    test = ((found[1].get("config") or {}).get("data") or {}).get("test")
    note = split_spread_note(found[1])
    ran = {(tag, task) for tag, task in zip(long["tag"], long["task"]) if task == "listops"}
    shown = rules_of_sections(rules, ran)
    return {tag: note for tag, data in zip(shown["tag"], shown["test_data"]) if note and test and data == test}


def runs_table(long: pd.DataFrame) -> pd.DataFrame:
    """``runs.csv``: the long table, each run's experiment resolved (``run_experiment``; ``none`` for the repo's
    defaults, blank when unknown)."""
    shown = [run_experiment(value, tag) for value, tag in zip(long["experiment"], long["tag"], strict=True)]
    return long.assign(experiment=[None if e is None else e or "none" for e in shown])


def write_analyses(args: argparse.Namespace) -> dict[str, tuple[Path, dict]]:
    """Write each analysis record's tables and name them in one line on stderr (one line each, naming the files,
    with ``--verbose``)."""
    analyses = find_analyses(args.roots)
    for name, (path, record) in analyses.items():
        if name == MICROSCOPE:  # its own page: two parts and figures
            written = write_microscope_tables(record, args.out, path)
        else:
            written = write_analysis_tables(name, record, args.out, path)
        if args.verbose:
            print(f"analysis {name} ({path}): wrote {', '.join(map(str, written))}", file=sys.stderr)
    if analyses and not args.verbose:
        print(f"Analysis tables written to {args.out}: {', '.join(analyses)} (--verbose lists the files)",
              file=sys.stderr)
    return analyses


def say_nothing_found(args: argparse.Namespace, everything: pd.DataFrame, problems: list, left_out: list[str]) -> None:
    """What is printed when no usable run record is left to tabulate (nothing is written then)."""
    tag = f" with tag {args.tag!r}" if args.tag is not None else ""
    print(f"No usable result.json records{tag} found under: {', '.join(args.roots)}. Nothing written.")
    if args.tag is not None and not everything.empty:
        print(f"Tags found: {', '.join(sorted(everything['tag'].map(base_tag).unique()))}.")
        print("\n".join(left_out))
    for problem in problems:
        print(f"  {problem.kind}: {problem.path}: {problem.message}")


def write_tables(args: argparse.Namespace, long: pd.DataFrame, problems: list,
                 analyses: dict[str, tuple[Path, dict]]) -> tuple[str, list[Path]]:
    """Summarize ``long`` and write the tables, plots and (``--html``) the page: (the markdown, the files written)."""
    rules = read_rules(args.roots)
    summary = add_escapes(summarize(long, rules), long)
    names = list(REFERENCES) if "all" in (args.reference or []) else list(dict.fromkeys(args.reference or []))
    frames = {name: load_reference(name) for name in names or DEFAULT_REFERENCES}
    references = {REFERENCES[name]: frame for name, frame in frames.items()}
    notes = protocol_notes(long)
    shared = shared_protocol_notes(shared_protocols(long), summary)
    for tag, lines in shared.items():
        notes.setdefault(tag, []).extend(lines)
    for tag, line in split_notes(analyses.get("listops_splits"), rules, long).items():
        notes.setdefault(tag, []).append(line)
    markdown = to_markdown(summary, problems, references, args.published_rows, notes, long, rules)
    out = Path(args.out)
    write_atomic(out / "runs.csv", runs_table(long).to_csv(index=False))
    write_atomic(out / "lra.csv", add_published(summary, frames).to_csv(index=False, float_format="%.4f"))
    write_atomic(out / "lra.md", markdown)
    write_atomic(out / "lra.tex", to_latex(summary, references))
    plots = write_plots(summary, long, out)
    site = write_site(out, summary, long, problems, frames, args.roots, shared, args.run_figures) if args.html else []
    return markdown, [out / "runs.csv", out / "lra.csv", out / "lra.md", out / "lra.tex", *plots, *site]


def main(argv: list[str] | None = None) -> int:
    """Collect, summarize, write the tables and plots and print a short summary of them (the markdown itself with
    ``--print``); always exits 0 unless I/O fails."""
    args = parse_args(argv)
    try:
        check_output_folder(args.out)
    except OSError as err:  # a read-only folder, a link where a table or plot goes
        print(f"error: {err}", file=sys.stderr)
        return 2
    for root in [r for r in args.roots if not Path(r).exists()]:
        print(f"warning: {root} does not exist", file=sys.stderr)
    analyses = write_analyses(args)
    everything, problems = collect(args.roots)
    long, left_out = everything, []
    if args.tag is not None:
        long, problems = select_tag(everything, problems, args.tag)
        left_out = left_out_lines(everything, long, args.tag)
    if long.empty:
        say_nothing_found(args, everything, problems, left_out)
        return 0
    markdown, written = write_tables(args, long, problems, analyses)
    if args.print_tables:
        print(markdown, end="")
    report = sys.stderr if args.print_tables else sys.stdout  # with --print, stdout holds lra.md alone
    lines = summary_lines(Path(args.out), long, problems, written, args.html) + left_out
    lines += [f"  {path}" for path in written] if args.verbose else []
    print("\n".join(lines), file=report)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LinkRefused as err:  # a figure to copy onto the page is a link
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
