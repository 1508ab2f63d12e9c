"""Render the summary, published numbers and problem list as markdown (no `tabulate` needed)."""

from __future__ import annotations

import math

import pandas as pd

from lra.run.record import DEFAULT_TAG, INTERRUPTED
from results.collect import CLASSIC_TASKS, UNTAGGED, Problem
from results.curves import RAN
from results.data_sections import is_data_part
from results.escapes import ESCAPE_AT, escape_steps
from results.markdown_text import md_code, md_text
from results.protocol import SECTION_SEP, YOURS, base_tag, quick_scale, section_experiments
from results.summary import (
    AVERAGE,
    PEER_CODE_BESIDE,
    REFERENCE_ROWS,
    best_flags,
    follows,
    is_reference,
    rules_of_sections,
    shown_beside,
)


def format_cell(mean, std=math.nan, n=None, escaped=None) -> str:
    """"48.20 ± 0.57 (n=2)"; one seed gives "48.20 (n=1)"; no n gives "48.20"; NaN gives "".

    With several seeds and a count of escaped runs (`results.escapes`): "18.90 ± 0.35 (n=3, escaped 1/3)".
    """
    if pd.isna(mean):
        return ""
    text = f"{mean:.2f}"
    if not pd.isna(std):
        text += f" ± {std:.2f}"
    if n is not None and not pd.isna(n):
        several = int(n) > 1 and escaped is not None and not pd.isna(escaped)
        text += f" (n={int(n)}, escaped {int(escaped)}/{int(n)})" if several else f" (n={int(n)})"
    return text


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A padded pipe table; first column left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells):
        pairs = enumerate(zip(cells, widths, strict=True))
        padded = [cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in pairs]
        return "| " + " | ".join(padded) + " |"
    rule = "|" + "|".join(("-" * (w + 1) + ":") if i else ("-" * (w + 2)) for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def shown_tasks(summary: pd.DataFrame) -> list[str]:
    """Tasks (and `average`) with at least one value of ours in this tag, in summary column order."""
    ours = summary[~is_reference(summary["attention"])]
    tasks = [column[: -len("_mean")] for column in summary.columns if column.endswith("_mean")]
    return [task for task in tasks if ours[f"{task}_mean"].notna().any()]


def format_delta(value) -> str:
    """Ours − published with its sign ("+1.20", "−3.40", "0.00"); NaN gives ""."""
    if pd.isna(value):
        return ""
    text = f"{abs(value):.2f}"
    return text if text == "0.00" else ("+" if value > 0 else "−") + text


def bold(text: str, flag: bool) -> str:
    """Markdown bold when `flag` and there is text."""
    return f"**{text}**" if flag and text else text


def attention_order(attentions, references: dict[str, pd.DataFrame]) -> list[str]:
    """Attentions in the published tables' row order, then the others by name."""
    order = list(dict.fromkeys(name for frame in references.values() for name in frame.index))
    return sorted(attentions, key=lambda a: (order.index(a) if a in order else len(order), a))


def tag_table(tag: str, summary: pd.DataFrame, references: dict[str, pd.DataFrame],
              published_rows: bool = False) -> str:
    """One tag's table: per task our cell (best in bold), then each published column shown beside this tag and,
    where the tag follows that table's protocol, ours − published.

    Rows = our attentions; ``published_rows`` adds the published methods we have not run (blank on our side).
    """
    order = references  # rows keep the published tables' order in every section
    references = {label: frame for label, frame in references.items() if shown_beside(tag, frame)}
    deltas = {label: follows(tag, frame) for label, frame in references.items()}
    columns = shown_tasks(summary)
    best = best_flags(summary).set_index(summary["attention"])
    ours = summary[~is_reference(summary["attention"])].set_index("attention")
    references_rows = summary[is_reference(summary["attention"])]
    header = ["attention"]
    for task in columns:
        header.append(md_text(task))
        for label, frame in references.items():
            if task in frame.columns:
                header += [f"{md_text(task)} ({label})"] + ([f"{md_text(task)} Δ ({label})"] if deltas[label] else [])
    attentions = attention_order(ours.index, order)
    if published_rows:
        published = attention_order({name for frame in references.values() for name in frame.index}, references)
        attentions += [a for a in published if a not in attentions]
    rows = []
    for attention in attentions:
        row = [md_text(attention)]
        for task in columns:
            mine = ours.loc[attention] if attention in ours.index else None
            mean = math.nan if mine is None else mine[f"{task}_mean"]
            if mine is not None:
                n = None if task == AVERAGE else mine[f"{task}_n"]
                escaped = mine.get(f"{task}_escaped")
                cell = format_cell(mean, mine[f"{task}_std"], n, escaped)
                row.append(bold(cell, best.loc[attention, f"{task}_mean"]))
            else:
                row.append("")
            for label, frame in references.items():
                if task in frame.columns:
                    published = frame[task].get(attention, math.nan)
                    row += [format_cell(published)] + ([format_delta(mean - published)] if deltas[label] else [])
        rows.append(row)
    for _, first in references_rows.iterrows():
        row = [REFERENCE_ROWS[first["attention"]]]
        for task in columns:
            row.append(format_cell(first[f"{task}_mean"]))
            row += [""] * sum((1 + deltas[label]) * (task in frame.columns) for label, frame in references.items())
        rows.append(row)
    return markdown_table(header, rows)


def format_hours(seconds) -> str:
    """"2.41 h" ("" when unknown)."""
    return "" if pd.isna(seconds) else f"{seconds / 3600:.2f} h"


def escape_cell(progress: pd.DataFrame, path: str, unfinished: bool) -> str:
    """The escape step ("" without a curve; "never", or "not by <last step>" for an unfinished run)."""
    if path not in progress.index:
        return ""
    step = progress.loc[path, "escape_step"]
    if not pd.isna(step):
        return f"{step:,}"
    return f"not by {progress.loc[path, 'last_step']:,}" if unfinished else "never"


def runs_table(long: pd.DataFrame, rules: pd.DataFrame | None = None) -> str:
    """One row per completed run: test and best validation accuracy, the step it escaped the plateau at (tasks of
    `results.escapes.ESCAPE_AT`: "never" when it did not), wall time, training tokens/s, git sha; then a row per
    unfinished (interrupted) run, its test cell saying how far it got and its val acc the best so far; then a row
    per rule of `rules` (`results.rules.read_rules`' columns) with its test and validation accuracy, so that a
    run's val acc reads against the rule's on the same split."""
    done = long[long["status"] == "completed"]
    unfinished = long[long["status"] == INTERRUPTED].drop_duplicates("path")
    values = done.pivot_table(index="path", columns="metric", values="value", aggfunc="first")
    progress = escape_steps(long, RAN).set_index("path")
    with_escape = pd.concat([done["task"], unfinished["task"]]).isin(list(ESCAPE_AT)).any()
    rows = []
    order = ["attention", "task", "seed"]
    for run in pd.concat([done.drop_duplicates("path").sort_values(order, kind="stable"),
                          unfinished.sort_values(order, kind="stable")]).itertuples():
        stopped = run.status == INTERRUPTED
        metric = values.loc[run.path] if run.path in values.index else pd.Series(dtype="float64")
        best_val = progress.loc[run.path, "best_val"] if stopped and run.path in progress.index else math.nan
        last = progress.loc[run.path, "last_step"] if stopped and run.path in progress.index else None
        test = (f"unfinished (validated to step {last:,})" if last is not None else "unfinished") if stopped else \
            format_cell(100 * metric.get("test_acc", math.nan))
        escape = [escape_cell(progress, run.path, stopped)] if with_escape else []
        rows.append([md_text(run.attention), md_text(run.task), md_text(run.seed), test,
                     format_cell(100 * (best_val if stopped else metric.get("val_acc", math.nan))), *escape,
                     format_hours(run.wall_time_s), "" if pd.isna(run.tokens_per_s) else f"{run.tokens_per_s:,.0f}",
                     md_text(run.device), md_text("" if pd.isna(run.git_sha) else str(run.git_sha)[:7])])
    for rule in ([] if rules is None else rules.itertuples()):
        rows.append([md_text(rule.rule), md_text(rule.task), "", format_cell(100 * rule.value),
                     format_cell(100 * rule.val), *([""] if with_escape else []), "", "", "", ""])
    header = ["attention", "task", "seed", "test acc", "val acc", *(["escape step"] if with_escape else []),
              "wall time", "train tokens/s", "device", "git sha"]
    return markdown_table(header, rows)


def problem_lines(problems: list[Problem]) -> list[str]:
    """Bullet lines: kind, path, run and message."""
    lines = []
    for problem in problems:
        run = f" ({md_text(problem.run)})" if problem.run else ""
        lines.append(f"- {problem.kind}: `{md_code(problem.path)}`{run}: {md_text(problem.message)}")
    return lines


def reading_notes(references: dict[str, pd.DataFrame]) -> str:
    """How to read every table, printed once under the title."""
    classic = ", ".join(CLASSIC_TASKS)
    lines = [
        "Ours: test accuracy (%) of the best-validation checkpoint, mean ± sample std (ddof=1) over seeds "
        "of completed runs, n = seeds; a single seed shows no ±. Blank = no run, never zero.",
        f"`{AVERAGE}` = mean of the {classic} means, only when all five are present.",
        "**Bold** = the highest mean of our attentions in that column (at the shown decimals; ties all bold).",
        "`Δ (paper)` = ours − published, in accuracy points, printed only where our runs follow that table's "
        "protocol (tag `study_port` = the Nystromformer port's settings beside the Nystromformer port; tag "
        "`skyformer_port` = its 50,000-step protocol beside the Skyformer port; tag `lra_original` beside the LRA "
        "paper). `default` differs from every published protocol (ListOps: lr 1e-3 among others), so the published "
        "tables are shown beside it for context, without a delta. Each published number is the test accuracy of "
        "that table's own split, checkpoint and steps (docs/protocol.md sections 6 and 9).",
        "`tag` = the name of the settings a run was made with (`experiment=<name>` sets it; none: `default`); a "
        "tag's protocol is the repo's config for that task and experiment. `yours` = runs read from outside "
        "`results/runs/` (your own), shown apart from the committed ones.",
        f"`escape step` (ListOps) = the first step whose validation accuracy reaches "
        f"{100 * ESCAPE_AT['listops']:.0f}%, "
        "leaving the plateau where a model predicts little more than the label frequencies (`never`: no such step); "
        "`escaped k/n` = k of the n seeds averaged in that cell did.",
        "`majority class` = accuracy of always predicting the test set's most frequent class. `root-operator rule` "
        "(ListOps) = accuracy of predicting, per root operator, the label most frequent among training trees with "
        "that root (`python -m results.rules`): a model at that level has found the root operator and nothing more.",
        "Text (IMDB) has no validation split: the checkpoint is chosen on a held-out slice of train.",
        *(f"`({label})`: {(frame.attrs.get('source') or 'published numbers').rstrip('.')}."
          for label, frame in references.items()),
        "Runs with different `tag`s are never averaged together: each tag has its own section.",
        "Config drift: a run whose `task`, `model` or `trainer` settings differ from its tag's protocol (the repo's "
        "Hydra config for that task and the tag's experiment; settings that say only where or how a run ran, such "
        "as data locations, loader workers, devices and logging, aside: `lra/identity.py`) gets a section of its "
        "own, named by the differing settings (`<tag> · key=value, ...`) and averaged only with runs that differ "
        "the same way (e.g. a comparison at fewer `task.max_steps`). A run whose record names other data (its split "
        "files' checksums) than most of its section's runs of the task gets a section `<tag> · data <digest>`. "
        "Read beside "
        "the committed records (`results/runs/`), your own runs get sections `<tag> · yours`: they never replace or "
        "join a committed number. A cell whose runs come from several commits says so under its table.",
    ]
    return "\n".join(f"- {line}" for line in lines)


def steps_text(steps) -> str:
    """``1,500 steps`` or ``100-1,500 steps`` for the training steps the runs took ("" when none is known)."""
    known = sorted({int(step) for step in steps if pd.notna(step)})
    if not known:
        return ""
    span = f"{known[0]:,}" if len(known) == 1 else f"{known[0]:,}-{known[-1]:,}"
    return f"{span} steps"


def tag_notes(tag: str, summary: pd.DataFrame, steps=(), experiments: set[str] | None = None) -> list[str]:
    """Under one tag's table: a warning unless it is the full protocol, and the classic tasks not run; ``steps``
    are the training steps its completed runs took, ``experiments`` the experiments they ran (``quick_scale``)."""
    lines = []
    if SECTION_SEP in tag:
        base, parts = base_tag(tag), tag.split(SECTION_SEP)[1:]
        if any(part != YOURS and not is_data_part(part) for part in parts):
            lines.append(f"These runs differ from tag `{md_code(base)}`'s protocol in the settings the heading "
                         f"names: they are averaged only with runs that differ in the same way, never with "
                         f"`{md_code(base)}`'s.")
        if any(is_data_part(part) for part in parts):
            lines.append("These runs trained on other data than the rest of this section's runs of the task (the "
                         "heading names the digest of their split files' checksums): never averaged with them.")
        if tag.endswith(SECTION_SEP + YOURS):
            lines.append("Your runs (outside `results/runs/`): shown apart from the committed runs of this tag, "
                         "never averaged with them.")
    if quick_scale(tag, experiments):
        took = steps_text(steps)
        lines.append(f"**Pipeline check at reduced scale** (short sequences{', ' + took if took else ''} on a CPU): "
                     "it shows that every attention trains, not how they rank; no published number is comparable.")
    elif base_tag(tag) != DEFAULT_TAG and SECTION_SEP not in tag:
        tagged = "carry no `tag`" if tag == UNTAGGED else f"are tagged `{md_code(tag)}`, not `{DEFAULT_TAG}`"
        lines.append(f"These runs {tagged}: a published table is shown beside them only when it follows the "
                     f"same protocol.")
    lines += missing_line(summary[~is_reference(summary["attention"])])
    return lines


def missing_line(ours: pd.DataFrame) -> list[str]:
    """One line naming the classic tasks without a completed run, per group of attentions that miss the same ones."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for _, row in ours.iterrows():
        absent = tuple(task for task in CLASSIC_TASKS if pd.isna(row[f"{task}_mean"]))
        if absent:
            groups.setdefault(absent, []).append(str(row["attention"]))
    parts = []
    for absent, names in groups.items():
        who = "every attention here" if len(names) == len(ours) else ", ".join(f"`{md_code(n)}`" for n in names)
        parts.append(f"{', '.join(absent)} for {who}")
    return [f"Missing (no completed run): {'; '.join(parts)}."] if parts else []


def shared_protocol_notes(shared: dict[tuple[str, str], list[str]], summary: pd.DataFrame) -> dict[str, list[str]]:
    """Per tag, a note for each other tag of the same protocol on a task (`results.protocol.shared_protocols`),
    with that tag's cells: its runs are this protocol too, though listed and averaged in their own section."""
    notes: dict[str, list[str]] = {}
    for (tag, task), others in sorted(shared.items()):
        for other in others:
            rows = summary[(summary["tag"] == other) & ~is_reference(summary["attention"])]
            cells = [f"`{md_code(row['attention'])}` " + format_cell(
                         row[f"{task}_mean"], row[f"{task}_std"], row[f"{task}_n"], row.get(f"{task}_escaped"))
                     for _, row in rows.iterrows() if pd.notna(row[f"{task}_mean"])]
            if cells:
                notes.setdefault(tag, []).append(
                    f"{md_text(task)}: the runs of tag `{md_code(other)}` follow this protocol too (its config differs "
                    f"in no task, model or trainer setting); they are averaged in their own section, not here: "
                    f"{', '.join(cells)}.")
    return notes


def peer_code_notes(tag: str, summary: pd.DataFrame) -> list[str]:
    """Under `tag`'s table, the cells of the runs a peer's own code made under the same protocol
    (`PEER_CODE_BESIDE`): their numbers on our data, beside ours."""
    lines = []
    for peer in [peer for peer, beside in PEER_CODE_BESIDE.items() if beside == tag]:
        rows = summary[(summary["tag"] == peer) & ~is_reference(summary["attention"])]
        cells = [f"`{md_code(row['attention'])}` {md_text(task)} " + format_cell(
                     row[f"{task}_mean"], row[f"{task}_std"], row[f"{task}_n"], row.get(f"{task}_escaped"))
                 for _, row in rows.iterrows() for task in CLASSIC_TASKS if pd.notna(row.get(f"{task}_mean"))]
        if cells:
            lines.append(f"The port's own code on our data, this protocol (tag `{md_code(peer)}`, its own "
                         f"section; `python -m analyses.{md_code(peer)}`): {', '.join(cells)}.")
    return lines


def section_order(tag: str) -> tuple:
    """`default` first, then by the tag the runs were made under, its own runs before sections apart from it."""
    return base_tag(tag) != DEFAULT_TAG, base_tag(tag), tag


def mixed_versions(long: pd.DataFrame) -> list[str]:
    """A note for every cell whose runs come from more than one commit (`git_sha`)."""
    done = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    lines = []
    for (attention, task), runs in done.groupby(["attention", "task"], sort=True):
        shas = sorted({str(sha)[:7] for sha in runs["git_sha"].dropna()})
        if len(shas) > 1:
            lines.append(f"`{md_code(attention)}` {md_text(task)} averages runs of {len(shas)} code versions "
                         f"({', '.join(shas)}).")
    return lines


def mixed_devices(long: pd.DataFrame) -> list[str]:
    """A note for every cell whose runs trained on more than one kind of device (``results.machines.device_kind``),
    naming the seeds of each."""
    done = long[(long["status"] == "completed") & (long["metric"] == "test_acc")]
    lines = []
    for (attention, task), runs in done.groupby(["attention", "task"], sort=True):
        kinds = runs.groupby("device", sort=True)["seed"].apply(lambda seeds: ", ".join(map(str, sorted(seeds))))
        if len(kinds) > 1:
            parts = "; ".join(f"{md_text(kind)}: seed{'s' if ',' in seeds else ''} {seeds}"
                              for kind, seeds in kinds.items())
            lines.append(f"`{md_code(attention)}` {md_text(task)} averages runs on different devices ({parts}): "
                         "the same settings, other dropout draws and kernels.")
    return lines


def to_markdown(summary: pd.DataFrame, problems: list[Problem], references: dict[str, pd.DataFrame],
                published_rows: bool = False, notes: dict[str, list[str]] | None = None,
                long: pd.DataFrame | None = None, rules: pd.DataFrame | None = None) -> str:
    """The whole `lra.md`: one section per tag (table, notes, runs not averaged), then unreadable records.

    `notes` adds lines under a tag's table (e.g. `results.protocol.protocol_notes`); with `long`, the
    full-protocol section also lists each run's wall time and throughput, and below them the section's `rules`.
    """
    found = set(summary["tag"]) | {p.tag for p in problems if p.tag is not None}
    tags = sorted(found, key=section_order)
    parts = ["# Long Range Arena: test accuracy (%)", reading_notes(references)]
    for tag in tags:
        mine = summary[summary["tag"] == tag]
        parts += [f"## tag `{md_code(tag)}`", tag_table(tag, mine, references, published_rows)]
        steps = [] if long is None else long.loc[(long["tag"] == tag) & (long["status"] == "completed"), "steps"]
        experiments = None if long is None else section_experiments(long, tag)
        lines = tag_notes(tag, mine, steps, experiments) + (notes or {}).get(tag, []) + peer_code_notes(tag, summary)
        lines += [f"`({label})`: {md_text(frame.attrs['notes'])}" for label, frame in references.items()
                  if shown_beside(tag, frame) and frame.attrs.get("notes") and tag in set(mine["tag"])]
        here = None if long is None else long[long["tag"] == tag]
        lines += [] if here is None else mixed_versions(here) + mixed_devices(here)
        if lines:
            parts.append("\n".join(f"- {line}" for line in lines))
        if long is not None and not quick_scale(tag, experiments) and (long["tag"] == tag).any():
            ran = {(tag, task) for task in long.loc[(long["tag"] == tag) & long["status"].isin(RAN), "task"]}
            shown = None if rules is None or rules.empty else rules_of_sections(rules, ran)
            parts += ["Runs (wall time: training, validation and test, summed over resumed segments; tokens/s: "
                      "real (unpadded) training tokens per second of fitting, validation passes included):",
                      runs_table(long[long["tag"] == tag], shown)]
        skipped = [p for p in problems if p.tag == tag]
        if skipped:
            parts.append(f"Not averaged ({len(skipped)}):\n\n" + "\n".join(problem_lines(skipped)))
    unreadable = [p for p in problems if p.tag is None]
    if unreadable:
        parts += [f"## Unreadable records ({len(unreadable)})", "\n".join(problem_lines(unreadable))]
    return "\n\n".join(parts) + "\n"
