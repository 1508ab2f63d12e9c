"""The attention microscope's record (``analyses.microscope``) -> ``microscope.md``, ``microscope.csv`` and its figures.

Two parts: trained models (each mechanism's own matrix against softmax of the same q, k; one line per attention,
then per layer and head) and the approximation of the softmax model's matrices at matched feature counts (held-out
error, one column per size). The figures written beside the record are copied next to the table.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lra_base.atomic import copy_atomic, write_atomic
from results.analyses import format_value
from results.markdown import markdown_table

NAME = "microscope"
FIGURES = (f"{NAME}.png", f"{NAME}_approx.png")
SUMMARY = [("attention", "attention"), ("test_acc", "model test acc"), ("rel_error", "rel. error to softmax"),
           ("entropy_norm", "entropy/log L"),
           ("entropy_norm_softmax", "softmax entropy/log L"), ("top_k_mass", "top-k mass"),
           ("top_k_mass_softmax", "softmax top-k mass"), ("eff_rank", "eff. rank"),
           ("eff_rank_softmax", "softmax eff. rank"), ("negative_mass", "negative mass"),
           ("output_error", "matrix v vs output"), ("sequences", "sequences")]


def table(frame: pd.DataFrame, columns: list[tuple[str, str]]) -> str:
    """A markdown table of ``frame``'s named columns with their display titles."""
    present = [(key, title) for key, title in columns if key in frame.columns]
    rows = [[format_value(row[key]) for key, _ in present] for _, row in frame.iterrows()]
    return markdown_table([title for _, title in present], rows)


def trained_part(rows: pd.DataFrame, top_k: int) -> list[str]:
    """Per-attention averages, then every layer and head."""
    if rows.empty:
        return []
    every = rows[rows["layer"].astype(str) == "all"]
    detail = rows[rows["layer"].astype(str) != "all"]
    columns = [(k, t.replace("top-k", f"top-{top_k}")) for k, t in SUMMARY]
    return ["## Trained models: each mechanism's matrix vs softmax of its own q, k", "",
            "Mean over layers, heads and validation sequences:", "", table(every, columns), "",
            "Per layer and head:", "",
            table(detail, [("attention", "attention"), ("layer", "layer"), ("head", "head"), *columns[2:-1]]), ""]


def approx_part(rows: pd.DataFrame) -> list[str]:
    """Held-out relative error (mean over layers) per mechanism and variant, one column per feature count."""
    if rows.empty:
        return []
    rows = rows.assign(label=rows["mechanism"] + " (" + rows["variant"] + ")")
    order = list(dict.fromkeys(rows["label"]))
    size = "size" if "size" in rows.columns else "features"
    mean = rows.groupby(["label", size], sort=False)["rel_error"].mean().reset_index()
    wide = mean.pivot(index="label", columns=size, values="rel_error").reindex(order)
    sizes = sorted(wide.columns)
    body = [[label, *(format_value(wide.loc[label, m]) for m in sizes)] for label in order]
    detail = rows.sort_values(["layer"], kind="stable")
    return ["## Approximation: the softmax model's matrices, each mechanism at m features per head", "",
            "Relative Frobenius error ||A - S||_F / ||S||_F on held-out validation sequences, mean over layers, "
            "heads and sequences; each mechanism at its shape nearest to m (its exact count is the detail's `m`; "
            "linear has d features):", "",
            markdown_table(["mechanism (variant)", *(f"m={int(m)}" for m in sizes)], body), "",
            "Per layer:", "",
            table(detail, [("mechanism", "mechanism"), ("variant", "variant"), ("features", "m"), ("layer", "layer"),
                           ("rel_error", "rel. error"), ("rel_error_std", "std"), ("fit_loss", "fit loss"),
                           ("sequences", "sequences")]), ""]


def to_markdown(record: dict, figures: list[str]) -> str:
    """The whole page: provenance, both parts, the figures, the notes."""
    rows = pd.DataFrame(record["rows"])
    config = record.get("config") or {}
    mode = rows["mode"] if "mode" in rows else pd.Series([], dtype=str)
    lines = [f"# Analysis `{NAME}`: the attention microscope", "",
             f"- git {record.get('git_sha')}, {record.get('wall_time_s')} s, finished {record.get('finished_at')}.",
             f"- `python -m analyses.microscope {' '.join(config.get('overrides') or [])} "
             f"attention={','.join(config.get('attentions') or [])}`", ""]
    lines += trained_part(rows[mode == "trained"], int(config.get("top_k", 8)))
    lines += approx_part(rows[mode == "approx"])
    lines += [f"![{name}]({name})" for name in figures]
    if record.get("notes"):
        lines += ["", *(f"- {note}" for note in record["notes"])]
    return "\n".join(lines) + "\n"


def write_microscope_tables(record: dict, out: str | Path, record_path: Path | None = None) -> list[Path]:
    """Write ``<out>/microscope.{md,csv}`` and copy the figures found beside the record; return what was written."""
    out = Path(out)
    written = []
    figures = []
    for name in FIGURES:
        source = record_path.parent / name if record_path is not None else None
        if source is not None and source.is_file():
            out.mkdir(parents=True, exist_ok=True)
            if source.resolve() != (out / name).resolve():
                copy_atomic(source, out / name)  # never read through a link (LinkRefused names it)
            written.append(out / name)
        if (out / name).is_file():
            figures.append(name)
    frame = pd.DataFrame(record["rows"])
    frame = frame[[c for c in record.get("columns") or [] if c in frame.columns] or list(frame.columns)]
    write_atomic(out / f"{NAME}.csv", frame.to_csv(index=False))
    write_atomic(out / f"{NAME}.md", to_markdown(record, figures))
    return [out / f"{NAME}.csv", out / f"{NAME}.md", *written]
