"""What `python -m results` says on the terminal: which sections `--tag` keeps, what it left out, and a short
summary of the tables it wrote (the tables themselves only with `--print`, every written file with `--verbose`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from lra.run.record import INTERRUPTED
from results.collect import Problem
from results.protocol import SECTION_SEP, base_tag

SHOWN_TAGS = 8


def tag_matches(section: str | None, tag: str) -> bool:
    """Whether `--tag tag` keeps `section`: a section's full heading name, or a bare tag that keeps the tag's own
    section and every section derived from it (`quick` keeps `quick · task.eval_every=50 · yours`)."""
    if section is None:
        return False
    return section == tag or (SECTION_SEP not in tag and base_tag(section) == tag)


def select_tag(long: pd.DataFrame, problems: list[Problem], tag: str) -> tuple[pd.DataFrame, list[Problem]]:
    """The rows and problems `--tag tag` keeps; unreadable records (no tag) are always kept."""
    kept = long[long["tag"].map(lambda section: tag_matches(section, tag)).astype(bool)]
    return kept, [p for p in problems if p.tag is None or tag_matches(p.tag, tag)]


def left_out_key(section: str, tag: str) -> str:
    """What a left-out section is listed under: its tag, the argument that asks for it with its derived sections;
    its full name when it shares the filter's tag (that tag would bring back what the filter chose to leave)."""
    return section if base_tag(section) == base_tag(tag) else base_tag(section)


def left_out_lines(everything: pd.DataFrame, kept: pd.DataFrame, tag: str) -> list[str]:
    """What `--tag tag` left out (runs and sections per tag) and how to ask for it; none when it kept every run."""
    left = everything[~everything["path"].isin(set(kept["path"]))].drop_duplicates("path")
    if left.empty:
        return []
    keys = left["tag"].map(lambda section: left_out_key(section, tag))
    groups = left.assign(key=keys).groupby("key", sort=True)["tag"].agg(["size", "nunique"])
    shown = [f"  {key!r}: {runs} run(s)" + (f" in {sections} sections" if sections > 1 else "")
             for key, (runs, sections) in groups.head(SHOWN_TAGS).iterrows()]
    if len(groups) > SHOWN_TAGS:
        shown.append(f"  ... and {len(groups) - SHOWN_TAGS} more")
    return [f"--tag {tag!r} left out {len(left)} run(s) in {left['tag'].nunique()} section(s):", *shown,
            "Ask for them with --tag TAG (a tag brings its derived `TAG · ...` sections too; a full section name "
            "only that section), or give no --tag for all of them."]


def run_status_counts(long: pd.DataFrame, problems: list[Problem]) -> tuple[int, int, int]:
    """(completed and averaged, unfinished, not averaged for another reason) over the runs of `long`."""
    runs = long.drop_duplicates("path")
    flagged = {p.path for p in problems}
    unfinished = int((runs["status"] == INTERRUPTED).sum())
    completed = int(((runs["status"] == "completed") & ~runs["path"].isin(flagged)).sum())
    return completed, unfinished, len(runs) - completed - unfinished


def problem_counts(problems: list[Problem]) -> str:
    """`2 duplicate, 1 malformed`: how many records each kind of problem kept out of the averages."""
    counts = Counter(p.kind for p in problems)
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))


def section_count(long: pd.DataFrame, problems: list[Problem]) -> tuple[int, int]:
    """(sections of lra.md, tags they come from)."""
    sections = set(long["tag"]) | {p.tag for p in problems if p.tag is not None}
    return len(sections), len({base_tag(section) for section in sections})


def summary_lines(out: Path, long: pd.DataFrame, problems: list[Problem], written: list[Path],
                  page: bool) -> list[str]:
    """The few lines printed instead of the tables: where they went, how many runs and sections, what was kept
    out of the averages and why, and the flags that show more."""
    completed, unfinished, other = run_status_counts(long, problems)
    sections, tags = section_count(long, problems)
    lines = [f"Tables written to {out}: lra.md, lra.csv, runs.csv, lra.tex"
             + (", index.html" if page else "") + f" ({len(written)} files in all; --verbose lists them)",
             f"Runs: {completed} completed, {unfinished} unfinished, {other} not averaged; "
             f"{sections} section(s) from {tags} tag(s)"]
    if problems:
        lines.append(f"Not averaged or not read: {problem_counts(problems)} (each with its reason in {out / 'lra.md'})")
    lines.append("--print prints the tables (lra.md) here.")
    return lines
