"""The report card's page: the verdict in plain words, the cost and learning in one line each, the figures, and
every number as ``python -m results`` tabulated the record (its markdown, embedded)."""

from __future__ import annotations

import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lra.run.machine import cpu_model, read_cpuinfo
from lra.run.record import git_sha
from lra_base.atomic import write_atomic

from .record import REPO


def number(value: float | None, digits: int = 3) -> str:
    """A value for prose: 3 significant digits, scientific below 1e-3, ``n/a`` when missing."""
    if value is None:
        return "n/a"
    return f"{value:.2e}" if value != 0 and abs(value) < 1e-3 else f"{value:.{digits}g}"


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    """The verdict line and one line per failure, with its number and what it was measured against."""
    judged = [r for r in rows if r["verdict"] in ("pass", "fail", "skipped")]
    failed = [r for r in judged if r["verdict"] == "fail"]
    skipped = [r for r in judged if r["verdict"] == "skipped"]
    passed = len(judged) - len(failed) - len(skipped)
    if not failed:
        reasons = sorted({r["detail"].removeprefix("skipped: ") for r in skipped})
        extra = f", {len(skipped)} skipped: {'; '.join(reasons)}" if skipped else ""
        return [f"**Passes every check that ran** ({passed} passed{extra})."]
    lines = [f"**FAILS {len(failed)} of {len(judged)} checks** ({passed} passed, {len(skipped)} skipped):", ""]
    for r in failed:
        measured = "" if r["value"] is None else f" {number(r['value'])} {r['measure']};"
        where = "" if r["section"] == "correctness" else f" ({r['attention']})"
        lines.append(f"- **{r['check']}**{where}:{measured} {r['detail']}")
    return lines


def cost_line(rows: list[dict[str, Any]], label: str) -> str | None:
    """Growth exponents and the time at the longest length, the card's attention first."""
    exponents = {r["attention"]: r["value"] for r in rows if r["check"] == "time growth exponent"}
    times = [r for r in rows if r["check"] == "fwd+bwd time" and r["value"] is not None]
    if not exponents or not times:
        return None
    longest = max(r["n"] for r in times)
    at = {r["attention"]: r["value"] for r in times if r["n"] == longest}
    others = ", ".join(f"{name} n^{number(e)}, {number(at.get(name), 4)} ms" for name, e in exponents.items()
                       if name != label)
    return (f"Cost: forward+backward time grows as n^{number(exponents.get(label))}; "
            f"{number(at.get(label), 4)} ms at {longest:,} tokens ({others or 'no baseline'}).")


def learning_lines(rows: list[dict[str, Any]], label: str) -> list[str]:
    """Test accuracy per task, the card's attention first, then the baselines."""
    lines = []
    for task in dict.fromkeys(r["check"] for r in rows if r["section"] == "learning"):
        part = {r["attention"]: r for r in rows if r["check"] == task}
        mine = part.get(label)
        others = ", ".join(f"{name} {number(r['value'], 4)}" for name, r in part.items() if name != label)
        shown = number(mine["value"], 4) if mine else "n/a"
        majority = next((r.get("majority") for r in part.values() if r.get("majority") is not None), None)
        lines.append(f"Learning, {task}: {shown}% test ({others}; majority class {number(majority, 4)}).")
    return lines


def headline(rows: list[dict[str, Any]], shown: str) -> list[str]:
    """The verdict, then the cost and learning in a line each (``shown``: the card's attention as rows name it)."""
    summary = [line for line in (cost_line(rows, shown), *learning_lines(rows, shown)) if line]
    return [*verdict(rows), *([""] if summary else []), *(f"- {line}" for line in summary)]


def page(label: str, shown: str, rows: list[dict[str, Any]], table_md: Path, figures: list[Path], args,
         options: list[str], seconds: float) -> str:
    """The card's markdown: ``label`` names the card, ``shown`` the attention in its rows; ``options``: those that
    make it other than the full card (``report_card.card_options``)."""
    flags = [word for word in options if word not in args.overrides]  # options ends with the overrides it counts
    command = shlex.join(["python", "-m", "analyses.report_card", *args.overrides, *flags])
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    which = "the full card" if not options else "the --quick card" if options == ["--quick"] else \
        f"not the full card: {' '.join(options)}"
    lines = [f"# Report card: `{label}`", "",
             f"`{command}` ({which}): git {git_sha(REPO)}, {when}, {seconds / 60:.1f} min on "
             f"{cpu_model(read_cpuinfo())}.", "", "## Verdict", "", *headline(rows, shown), ""]
    lines += [f"![{figure.stem.rsplit('_', 1)[-1]}]({figure.name})" for figure in figures]
    table = table_md.read_text(encoding="utf-8").split("\n", 1)[1].strip()
    lines += ["", f"## Every number (`python -m results`: [{table_md.name}](../{table_md.name}))", "", table, ""]
    return "\n".join(lines)


def write_page(path: Path, text: str) -> Path:
    """The page, atomically."""
    return write_atomic(path, text)
