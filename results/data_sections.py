"""Runs of one section and task on other data get a section of their own: ``"<tag> · data <digest>"``.

A record names the data it trained on (``lra.data_identity``: its split files' SHA-256). Two data folders prepared
with the same settings can hold other examples (another import, a folder prepared again by another version). A run
folder refuses a resume on other data, but a table would still average such runs in one cell. So among the
completed runs of a (section, task) that name their data, those not on the usual data move to a section per data,
named by the digest of its split checksums (as ``lra.data_identity.describe_data`` prints it). The usual data is the
one most of them used: most of the committed runs, where any names its data (a tie: the smaller digest). A run that
does not name its data (an older record, data made in memory) stays where it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from lra.identity import digest
from results.protocol import SECTION_SEP

DATA_PART = "data "  # a section part "data <digest>": runs on other data than the rest of their tag's


def data_digest(run: dict[str, Any]) -> str | None:
    """The digest of the split checksums the run's record names, or None when it names none."""
    data = run.get("data")
    splits = data.get("splits") if isinstance(data, dict) else None
    return digest(splits) if isinstance(splits, dict) and splits else None


def mark_other_data(runs: list[dict[str, Any]], committed: Callable[[dict[str, Any]], bool]) -> None:
    """Move each completed run on other data than most of its (section, task)'s to ``"<tag> · data <digest>"``; the
    usual data is the committed runs' (``committed(run)``) where any of them names its data, so that your runs never
    outvote them."""
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], str]]] = {}
    for run in runs:
        if run["status"] == "completed" and (found := data_digest(run)) is not None:
            groups.setdefault((run["tag"], run["task"]), []).append((run, found))
    for members in groups.values():
        voters = [found for run, found in members if committed(run)] or [found for _, found in members]
        counts = Counter(voters)
        if len({found for _, found in members}) < 2:
            continue
        usual = min(counts, key=lambda found: (-counts[found], found))
        for run, found in members:
            if found != usual:
                run["tag"] = f"{run['tag']}{SECTION_SEP}{DATA_PART}{found}"


def is_data_part(part: str) -> bool:
    """Whether a section's part (between ``SECTION_SEP``) names other data (``mark_other_data``)."""
    return part.startswith(DATA_PART)
