"""Render the summary as LaTeX: one booktabs `table` per tag, our rows first, then the published rows."""

from __future__ import annotations

import re

import pandas as pd

from lra.run.record import DEFAULT_TAG
from results.markdown import attention_order, section_order, shown_tasks
from results.summary import AVERAGE, REFERENCE_ROWS, best_flags, is_reference, shown_beside

TITLES = {"listops": "ListOps", "text": "Text", "retrieval": "Retrieval", "image": "Image",
          "pathfinder": "Pathfinder", "pathx": "Path-X", AVERAGE: "Avg."}
SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
           "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: object) -> str:
    """`text` with LaTeX's special characters escaped."""
    return "".join(SPECIAL.get(char, char) for char in str(text))


def latex_cell(mean, std=float("nan"), best: bool = False) -> str:
    """"48.20 $\\pm$ 0.57", "48.20" with one seed, "" when missing; `best` wraps it in \\textbf."""
    if pd.isna(mean):
        return ""
    text = f"{mean:.2f}" + ("" if pd.isna(std) else f" $\\pm$ {std:.2f}")
    return f"\\textbf{{{text}}}" if best else text


def row_line(cells: list[str]) -> str:
    """One tabular row."""
    return " & ".join(cells) + r" \\"


def seed_range(ours: pd.DataFrame, tasks: list[str]) -> str:
    """"n = 3" or "n = 1--3": seeds per cell over the shown task columns."""
    counts = pd.concat([ours[f"{task}_n"] for task in tasks if task != AVERAGE]).dropna()
    if counts.empty:
        return "n = 0"
    low, high = int(counts.min()), int(counts.max())
    return f"n = {low}" if low == high else f"n = {low}--{high}"


def tag_tabular(tag: str, summary: pd.DataFrame, references: dict[str, pd.DataFrame]) -> str:
    """One tag's `table` float: caption, label and a booktabs tabular of our cells and published rows."""
    tasks = shown_tasks(summary)
    best = best_flags(summary).set_index(summary["attention"])
    ours = ~is_reference(summary["attention"])
    caption = (f"Long Range Arena test accuracy (\\%), tag \\texttt{{{escape(tag)}}}: mean $\\pm$ sample std over "
               f"seeds ({seed_range(summary[ours], tasks)}); best of ours in bold.")
    if tag != DEFAULT_TAG:
        caption += " Not the full protocol: not comparable with the published rows."
    lines = [r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{caption}}}",
             f"\\label{{tab:lra-{re.sub('[^A-Za-z0-9]+', '-', tag)}}}",
             f"\\begin{{tabular}}{{l{'r' * len(tasks)}}}", r"\toprule",
             row_line(["Attention", *(TITLES.get(task, escape(task)) for task in tasks)]), r"\midrule"]
    ran = attention_order(summary.loc[ours, "attention"], references)
    for attention, row in summary[ours].set_index("attention", drop=False).loc[ran].iterrows():
        cells = [latex_cell(row[f"{t}_mean"], row[f"{t}_std"], best.loc[attention, f"{t}_mean"]) for t in tasks]
        lines.append(row_line([escape(row["attention"]), *cells]))
    for _, row in summary[~ours].iterrows():
        lines.append(row_line([REFERENCE_ROWS[row["attention"]], *(latex_cell(row[f"{task}_mean"]) for task in tasks)]))
    for label, frame in references.items():
        if not shown_beside(tag, frame):
            continue
        methods = [method for method in ran if method in frame.index]
        if not methods or not any(task in frame.columns for task in tasks):
            continue
        lines += [r"\midrule", row_line([f"\\multicolumn{{{len(tasks) + 1}}}{{l}}{{\\emph{{{escape(label)}}}}}"])]
        for method in methods:
            published = [latex_cell(frame[task].get(method)) if task in frame.columns else "" for task in tasks]
            lines.append(row_line([escape(method), *published]))
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


def to_latex(summary: pd.DataFrame, references: dict[str, pd.DataFrame]) -> str:
    """The whole `lra.tex`: one table per tag (default first); needs `\\usepackage{booktabs}`."""
    tags = sorted(summary["tag"].unique(), key=section_order)
    parts = [r"% Long Range Arena tables written by `python -m results`; needs \usepackage{booktabs}."]
    parts += [tag_tabular(tag, summary[summary["tag"] == tag].reset_index(drop=True), references) for tag in tags]
    return "\n\n".join(parts) + "\n"
