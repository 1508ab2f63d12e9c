"""`python -m results --html`: the leaderboard page, a static `index.html` with its images in `index_files/`.

Built from the same summary frame as `lra.md`: one section per tag and task with our mean ± std (n seeds), the
published columns beside it exactly where the markdown has them (`shown_beside`; a delta only where the tag
`follows` the table's protocol; values from `add_published`), the protocol the section follows, sortable columns,
accuracy against throughput and against sequence length, the learning curves of each section's runs in one figure,
one block per run (config, git sha, wall time, tokens/s; its own learning curve only with `run_figures`, as
`--run-figures`: a figure per run takes about a second, too long for thousands) and the analyses' tables with
their figures. No server, no network: inline CSS and script, images beside the page; every text from a record is
escaped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from lra.run.record_compat import experiment_for
from lra_base.atomic import write_atomic
from results.collect import CLASSIC_TASKS, Problem
from results.curves import plot_learning_curves
from results.data_sections import is_data_part
from results.html_runs import analyses_part, problems_list, read_configs, run_id, runs_part, short_id
from results.html_template import Cell, esc, figure, inline, number, page, table, text
from results.markdown import (
    attention_order,
    format_cell,
    format_delta,
    reading_notes,
    section_order,
    shown_tasks,
    tag_notes,
)
from results.plots_extra import plot_accuracy_vs_length, plot_accuracy_vs_throughput, sequence_lengths
from results.protocol import (
    FROM_CONF,
    MOST_COMMON,
    SECTION_SEP,
    UNCHECKED,
    YOURS,
    base_tag,
    protocol_notes,
    section_experiments,
)
from results.summary import (
    AVERAGE,
    REFERENCE_ROWS,
    REFERENCES,
    add_published,
    best_flags,
    follows,
    is_reference,
    shown_beside,
)

PAGE, IMAGES = "index.html", "index_files"
OWN_IMAGE = re.compile(r"(run|throughput|curves)-[0-9a-f]{12}\.png|length\.png"
                       r"|analysis-[A-Za-z0-9][A-Za-z0-9_.-]*\.png")
CHECKED = {FROM_CONF: "checked against it", MOST_COMMON: "checked against the most common config among them",
           UNCHECKED: "recording no config (not checked)"}


def section_id(tag: str, task: str) -> str:
    """The id of a (tag, task) section; its table's id is `table_id`."""
    return short_id("sec", tag, task)


def table_id(tag: str, task: str) -> str:
    """The id of a (tag, task) table."""
    return short_id("table", tag, task)


def shown_references(tag: str, task: str, frames: dict[str, pd.DataFrame]) -> list[tuple[str, str, bool]]:
    """(file stem, label, with a delta) of each published table shown beside this tag that reports this task."""
    return [(stem, REFERENCES.get(stem, stem), follows(tag, frame)) for stem, frame in frames.items()
            if shown_beside(tag, frame) and task in frame.columns]


def protocol_html(tag: str, task: str, long: pd.DataFrame, frames: dict[str, pd.DataFrame],
                  lengths: dict[tuple[str, str], float]) -> str:
    """What a section's runs follow: the command and config, how they were checked, the sequence length and how
    each published table beside them relates."""
    if task == AVERAGE:
        lines = [f"`{AVERAGE}`: the mean of this tag's {', '.join(CLASSIC_TASKS)} means, only when all five exist."]
    else:
        lines = [protocol_line(tag, task, long)]
        runs = long[(long["task"] == task) & (long["status"] == "completed")].drop_duplicates("path")
        counts = runs["protocol"].value_counts()
        lines += [f"{count} completed run(s) {CHECKED.get(kind, f'checked against {kind}')}."
                  for kind, count in counts.items()]
        if (tag, task) in lengths:
            lines.append(f"Sequence length (`task.max_len`): {lengths[(tag, task)]:g}.")
    shown = shown_references(tag, task, frames)
    lines += [f"{label}: same protocol, Δ = ours − published." if delta else
              f"{label}: a protocol of its own, shown for context (no Δ)." for _, label, delta in shown]
    if not shown:
        lines.append("No published table is shown beside this tag's runs.")
    return '<p class="protocol">' + " ".join(map(inline, lines)) + "</p>"


def protocol_line(tag: str, task: str, long: pd.DataFrame) -> str:
    """The command a section's runs of ``task`` follow: their experiment's, with the settings its heading names for a
    section of runs that differ from it; for runs checked against the most common config, the tag has no config."""
    of_task = long[long["task"] == task]
    experiments = section_experiments(of_task, tag)
    if len(experiments) != 1 or not (of_task["protocol"] == FROM_CONF).any():
        experiment = experiment_for(base_tag(tag))
        if experiment is None:
            return f"Protocol: no experiment config for tag `{base_tag(tag)}` in `conf/`."
        experiments = {experiment}
    experiment = experiments.pop()
    command = f"`python run.py task={task}" + (f" experiment={experiment}`" if experiment else
                                               "` (the repo's defaults: the PyTorch-port protocol)")
    named = [setting for part in tag.split(SECTION_SEP)[1:] if part != YOURS and not is_data_part(part)
             for setting in part.split(", ") if not setting.startswith("experiment=")]
    return f"Protocol: {command}" + (", with the settings the heading names." if named else ".")


def run_links(runs: pd.DataFrame) -> Cell:
    """Links to the blocks of the runs a cell averages, by seed."""
    links = [f'<a href="#{run_id(path)}">seed {esc(seed)}</a>' for seed, path in zip(runs["seed"], runs["path"])]
    return Cell(" ".join(links), str(len(links)))


def task_table(tag: str, task: str, wide: pd.DataFrame, best: pd.DataFrame, long: pd.DataFrame,
               frames: dict[str, pd.DataFrame]) -> str:
    """One (tag, task) table: our attentions with a value, in the markdown's row order; majority class below."""
    references = {REFERENCES.get(stem, stem): frame for stem, frame in frames.items()}
    ours = wide[~is_reference(wide["attention"]) & wide[f"{task}_mean"].notna()].set_index("attention")
    shown = shown_references(tag, task, frames)
    per_task = task != AVERAGE
    header = [("attention", "text"), ("test accuracy (%)", "number")] + ([("seeds", "number")] if per_task else [])
    for _, label, delta in shown:
        header += [(f"{label} (published)", "number")] + ([(f"Δ {label}", "number")] if delta else [])
    if per_task:
        header += [("train tokens per fit second (mean)", "number"), ("parameters", "number"), ("runs", "number")]
    done = long[(long["status"] == "completed") & (long["metric"] == "test_acc") & (long["task"] == task)]
    rows = []
    for attention in attention_order(ours.index, references):
        row = ours.loc[attention]
        mean, n = row[f"{task}_mean"], (row[f"{task}_n"] if per_task else None)
        cells = [text(attention), number(format_cell(mean, row[f"{task}_std"], n, row.get(f"{task}_escaped")), mean,
                                         "best" if best.loc[attention, f"{task}_mean"] else "")]
        if per_task:
            cells.append(number(str(int(n)), n))
        for stem, _, delta in shown:
            published = row[f"{task}_{stem}"]
            cells.append(number(format_cell(published), published))
            if delta:
                value = row[f"{task}_delta_{stem}"]
                cells.append(number(format_delta(value), value, "up" if value > 0 else "down" if value < 0 else ""))
        if per_task:
            runs = done[done["attention"] == attention].sort_values(["seed", "path"])
            speed, params = runs["tokens_per_s"].mean(), runs["params"].dropna().head(1).tolist() or [None]
            cells += [number("" if pd.isna(speed) else f"{speed:,.0f}", speed),
                      number("" if params[0] is None else f"{int(params[0]):,}", params[0]), run_links(runs)]
        rows.append(cells)
    foot = []
    for _, row in wide[is_reference(wide["attention"]) & wide[f"{task}_mean"].notna()].iterrows():
        value = row[f"{task}_mean"]
        foot.append([text(REFERENCE_ROWS[row["attention"]]), number(format_cell(value), value)]
                    + [Cell("")] * (len(header) - 2))
    return table(table_id(tag, task), header, rows, foot)


def section_curves(tag: str, task: str, runs: pd.DataFrame, images: Path) -> tuple[str, list[Path]]:
    """The learning curves of a (tag, task) section's runs, one figure (`results.curves`), and the image written;
    ("", []) when none of them kept a `metrics.csv`."""
    png = images / f"{short_id('curves', tag, task)}.png"
    if not plot_learning_curves(runs[runs["task"] == task], png):
        return "", []
    return figure(f"{IMAGES}/{png.name}", f"learning curves, {task}, tag {tag}",
                  "Validation accuracy against training step of this table's runs (unfinished ones fainter)."), [png]


def tag_part(tag: str, summary: pd.DataFrame, wide: pd.DataFrame, long: pd.DataFrame, problems: list[Problem],
             frames: dict[str, pd.DataFrame], lengths: dict, images: Path,
             shared: list[str] | None = None) -> tuple[str, list[Path], dict]:
    """One tag: notes (`shared`: `results.markdown.shared_protocol_notes`' for it), throughput figure, a section per
    task shown in `lra.md` with its runs' learning curves, the records not averaged.

    Returns the HTML, the images written and {(tag, task): section id}.
    """
    mine, wide = summary[summary["tag"] == tag], wide[wide["tag"] == tag]
    best = best_flags(mine).set_index(mine["attention"])
    tasks = shown_tasks(mine) if not mine.empty else []
    runs = long[long["tag"] == tag]
    parts = [f'<h2 id="{short_id("tag", tag)}">tag <code>{esc(tag)}</code></h2>']
    steps = runs.loc[runs["status"] == "completed", "steps"] if "steps" in runs else []
    experiments = section_experiments(long, tag)
    notes = (tag_notes(tag, mine, steps, experiments) if not mine.empty else []) + protocol_notes(runs).get(tag, [])
    notes += list(shared or [])
    missing = [note for note in notes if note.startswith("Missing (no completed run)")]
    notes = [note for note in notes if note not in missing]
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{inline(note)}</li>" for note in notes) + "</ul>")
    if missing:
        parts.append("<details class=\"notes\"><summary>Classic tasks not run</summary>"
                     "<ul>" + "".join(f"<li>{inline(note)}</li>" for note in missing) + "</ul></details>")
    sections, written = {}, []
    for task in tasks:
        sections[(tag, task)] = section_id(tag, task)
        curves, pngs = section_curves(tag, task, runs, images)
        written += pngs
        parts += [f'<section id="{section_id(tag, task)}">', f"<h3>{esc(task)} <small>(tag {esc(tag)})</small></h3>",
                  protocol_html(tag, task, runs, frames, lengths),
                  task_table(tag, task, wide, best, runs, frames), curves, "</section>"]
    png = images / f"{short_id('throughput', tag)}.png"
    if plot_accuracy_vs_throughput(runs, png):
        written.append(png)
        parts.append(figure(f"{IMAGES}/{png.name}", f"accuracy against throughput, tag {tag}",
                            f"Tag `{tag}`: test accuracy of each completed run against its training tokens/s."))
    skipped = [p for p in problems if p.tag == tag]
    if skipped:
        parts += [f"<h3>Not averaged ({len(skipped)})</h3>", problems_list(skipped, set(long["path"]))]
    return "\n".join(parts), written, sections


def navigation(tags: list[str], sections: dict, analyses: bool) -> str:
    """Links to every tag, its task sections, the analyses and the runs."""
    items = []
    for tag in tags:
        tasks = [f'<a href="#{sid}">{esc(task)}</a>' for (t, task), sid in sections.items() if t == tag]
        items.append(f'<a href="#{short_id("tag", tag)}"><strong>{esc(tag)}</strong></a>: ' + " ".join(tasks))
    extra = ['<a href="#length">accuracy vs length</a>'] + (['<a href="#analyses">analyses</a>'] if analyses else [])
    return "<nav>" + " · ".join(items + extra + ['<a href="#runs">runs</a>']) + "</nav>"


def write_site(out: str | Path, summary: pd.DataFrame, long: pd.DataFrame, problems: list[Problem],
               frames: dict[str, pd.DataFrame], roots: list[str | Path],
               shared: dict[str, list[str]] | None = None, run_figures: bool = False) -> list[Path]:
    """Write `<out>/index.html` and its images (`<out>/index_files/`); return the paths written.

    `frames` maps a published table's file stem to its `load_reference` frame (as `lra.csv`); `roots` are searched
    for analysis records; `shared` holds each tag's notes on other tags of its protocol (`lra.md`'s);
    `run_figures` adds a learning-curve figure to every run's block (one figure per section otherwise). Images of
    ours from an earlier page that this one no longer shows are removed.
    """
    out = Path(out)
    images = out / IMAGES
    images.mkdir(parents=True, exist_ok=True)
    configs = read_configs(long)
    wide = add_published(summary, frames)
    lengths = sequence_lengths(long, configs)
    found = set(summary["tag"]) | {p.tag for p in problems if p.tag is not None}
    tags = sorted(found, key=section_order)
    references = {REFERENCES.get(stem, stem): frame for stem, frame in frames.items()}
    body, written, sections = [], [], {}
    for tag in tags:
        html, pngs, ids = tag_part(tag, summary, wide, long, problems, frames, lengths, images,
                                   (shared or {}).get(tag, []))
        body.append(html)
        written += pngs
        sections.update(ids)
    body.append('<h2 id="length">Accuracy against sequence length</h2>')
    if plot_accuracy_vs_length(summary, lengths, images / "length.png"):
        written.append(images / "length.png")
        body.append(figure(f"{IMAGES}/length.png", "accuracy against sequence length",
                           "Mean test accuracy per attention at each tag's sequence length (quick vs full protocol)."))
    else:
        body.append('<p class="notes">No task has runs at two sequence lengths yet.</p>')
    analyses, copied = analyses_part(roots, out, images)
    body.append(analyses)
    written += copied
    drawn = {path.name for path in written}
    with_curves = {sid for (tag, task), sid in sections.items() if f"{short_id('curves', tag, task)}.png" in drawn}
    runs, curves = runs_part(long, configs, images, sections, with_curves, run_figures)
    body += [f'<h2 id="runs">Runs ({long["path"].nunique()})</h2>', runs]
    written += curves
    unreadable = [p for p in problems if p.tag is None]
    if unreadable:
        body += [f"<h2>Unreadable records ({len(unreadable)})</h2>", problems_list(unreadable, set())]
    head = ['<h1>Long Range Arena leaderboard</h1>',
            f'<p>Test accuracy (%) from {long["path"].nunique()} run record(s) under '
            f'{", ".join(f"<code>{esc(root)}</code>" for root in roots)}, written by <code>python -m results --html'
            '</code> from the same summary as <code>lra.md</code>. Click a column header to sort it (numbers: '
            'highest first, again to reverse; blanks always last); a row\'s seeds link to its runs.</p>',
            '<details><summary>How to read the tables</summary><ul class="notes">'
            + "".join(f"<li>{inline(line.removeprefix('- '))}</li>" for line in reading_notes(references).splitlines())
            + "</ul></details>", navigation(tags, sections, bool(analyses))]
    write_atomic(out / PAGE, page("Long Range Arena leaderboard", "\n".join(head + body)))
    keep = {path.name for path in written}
    for stale in images.iterdir():
        if OWN_IMAGE.fullmatch(stale.name) and stale.name not in keep:
            stale.unlink()
    return [out / PAGE, *written]
