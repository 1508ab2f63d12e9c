"""The attention microscope: what an efficient attention does to the attention matrix, on real inputs.

``python -m analyses.microscope task=listops attention=softmax,linear,performer [checkpoint=PATH] [key=value ...]``

Other ``key=value`` words are Hydra overrides as for ``run.py`` (``experiment=quick`` unless one is given). Own keys:
``checkpoint`` (one attention's Lightning checkpoint; else a finished run of the composed config is reused, or a
model trained), ``mode`` (``trained``, ``approx`` or ``both``), ``batches``, ``batch_size`` (validation batches
captured), ``top_k``, ``approx`` (mechanisms), ``features`` (sizes m), ``fit_sequences``, ``fit_steps``,
``fit_lr``, ``out`` (records), ``models`` (where models are trained and looked for), ``tables`` (where
``python -m results`` renders the record: ``outputs/tables`` unless the word ``--committed`` is given, then
``results/tables``, the committed copy; empty: not rendered).

trained: each trained model's q, k, v per layer are captured on validation batches; per sequence (real tokens)
and head the mechanism's implicit matrix (its ``naive`` oracle, ``_microscope_capture``) is compared with
``softmax(q k^T / sqrt(d))`` of the same q, k: row entropy, top-k mass, relative Frobenius error, effective
rank; ``output_error`` checks that the matrix times v gives the module's real output.
approx: the trained softmax model's q, k and its softmax matrices; each mechanism at m features approximates them
(``_microscope_approx``), the LLoPS question (arXiv 2610.14219). Writes ``<out>/microscope/result.json`` (an
analysis record) and ``microscope.png``, ``microscope_approx.png`` beside it; ``python -m results`` tabulates it.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

from lra.config import compose_run
from lra.run.outputs import TABLES
from lra.settings import Run

from ._microscope_approx import DEFAULT_APPROXIMATORS, approximation_rows
from ._microscope_capture import capture, implicit_matrix, reproduction_error, softmax_matrix
from ._microscope_figure import approx_figure, trained_figure
from ._microscope_metrics import head_metrics
from ._microscope_models import (
    MODELS,
    NAME,
    checkpoint_for,
    load_model,
    run_accuracy,
    validation_batches,
)
from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

OWN = {"checkpoint": None, "mode": "both", "batches": 2, "batch_size": 16, "top_k": 8,
       "approx": ",".join(DEFAULT_APPROXIMATORS), "features": "16,32,64", "fit_sequences": 8, "fit_steps": 100,
       "fit_lr": 1e-2, "out": str(ANALYSIS_ROOT), "models": str(MODELS),
       "tables": None}  # None: lra.run.outputs.TABLES chooses
MODES = ("trained", "approx", "both")
NOTES = [
    "trained: each row averages over the captured validation sequences (real tokens only); `_softmax` columns "
    "are softmax(q k^T / sqrt(d)) on the same model's q, k; entropy_norm = row entropy / log L; "
    "output_error = |matrix v - module output| / |module output| (the materialised matrix is what the layer "
    "applied); entropy and top-k mass use |weights| when a row has negative entries (negative_mass).",
    "approx: the softmax model's q, k; error = ||A - S||_F / ||S||_F on held-out sequences, mean over sequences "
    "and heads; `fitted` maps were trained on other sequences' softmax matrices (polysketch: only its LayerNorm "
    "is learnable, the sketch stays random; llops: Theta; based: W_q, W_k; hedgehog: its maps).",
    "Nystromformer's trained matrix includes its depthwise value convolution (a band), as its oracle does; in "
    "approx mode it is built without one. FLatten's and PolaFormer's matrices leave out their per-channel value "
    "convolution (and PolaFormer's gate and opposite-sign half): output_error shows how much that is.",
]


def parse(argv: list[str]) -> tuple[dict, list[str], list[str]]:
    """Own settings, the attentions asked for, and the remaining Hydra overrides."""
    if any(word in ("-h", "--help") for word in argv):
        print(__doc__.strip())
        raise SystemExit(0)
    own, overrides, attentions = dict(OWN), [], ["softmax"]
    committed = "--committed" in argv
    for word in (word for word in argv if word != "--committed"):
        key, sep, value = word.partition("=")
        if not sep:
            raise SystemExit(f"microscope: expected key=value, got {word!r} (--help lists the keys)")
        if key in own:
            own[key] = type(OWN[key])(value) if OWN[key] is not None else value
        elif key == "attention":
            attentions = [a for a in value.split(",") if a]
        else:
            overrides.append(word)
    if not any(o.startswith("experiment=") for o in overrides):
        overrides.append("experiment=quick")
    if own["tables"] != "":
        if committed and own["tables"] is not None:
            raise SystemExit(f"microscope: tables={own['tables']} and --committed both say where the tables go: "
                             f"give one (--committed alone writes {TABLES.committed})")
        own["tables"] = str(TABLES.folder(own["tables"], committed))
    if own["mode"] not in MODES:
        raise SystemExit(f"microscope: mode must be one of {', '.join(MODES)}, got {own['mode']!r}")
    if own["checkpoint"] and len(attentions) != 1:
        raise SystemExit("microscope: checkpoint=PATH is one model: give exactly one attention")
    return own, attentions, overrides


def model_and_batches(attention: str, overrides: list[str], own: dict):
    """The trained model of ``attention`` (given or found or trained), its config and its captured layers."""
    if own["checkpoint"]:
        checkpoint = Path(own["checkpoint"])
    else:
        checkpoint = checkpoint_for(compose_run([*overrides, f"attention={attention}"]), Path(own["models"]))
    model, run = load_model(checkpoint)
    batches = validation_batches(run, own["batches"], own["batch_size"])
    layers = [capture(model, batch) for batch in batches]  # [batch][layer]
    return run, checkpoint, [[b[layer] for b in layers] for layer in range(len(layers[0]))]


def sequences_of(layer_batches) -> list[tuple[Tensor, Tensor]]:
    """Every captured sequence's q, k ``(1, H, L, d)`` of one layer, cut to its real tokens."""
    return [c.sequence(i)[:2] for c in layer_batches for i in range(c.q.shape[0])]


def matrices_of(layer_batches):
    """Per captured sequence of one layer, cut to its L real tokens: (v, out, matrix, softmax matrix).

    Each batch is materialised as the layer saw it (padded, masked), then cut.
    """
    for c in layer_batches:
        matrix, softmax = implicit_matrix(c.module, c.q, c.k, c.extras, c.mask), softmax_matrix(c.q, c.k, c.mask)
        for i in range(c.q.shape[0]):
            yield c.sequence(i, matrix, softmax)[2:]


@torch.no_grad()
def trained_rows(attention: str, run: Run, checkpoint: Path | str, layers, top_k: int) -> tuple[list[dict], dict]:
    """Per (layer, head) rows averaged over sequences, an ``all`` row, and the matrices of one sequence to draw."""
    rows, drawn = [], {}
    for layer, layer_batches in enumerate(layers):
        per_head: dict[int, list[dict]] = {}
        for v, out, matrix, softmax in matrices_of(layer_batches):
            output_error = reproduction_error(matrix, v, out)
            for head, values in enumerate(head_metrics(matrix[0], softmax[0], top_k)):
                per_head.setdefault(head, []).append({**values, "output_error": output_error})
            if layer not in drawn or abs(matrix.shape[-1] - 64) < abs(drawn[layer][0].shape[-1] - 64):
                drawn[layer] = (matrix[0], softmax[0])  # the sequence nearest 64 tokens
        for head, values in per_head.items():
            rows.append(summary_row(attention, layer, head, values))
    mean = {k: statistics.fmean(r[k] for r in rows) if isinstance(v, float) else v for k, v in rows[0].items()}
    rows.append({**mean, "layer": "all", "head": "all"})
    accuracy = run_accuracy(Path(checkpoint))
    for row in rows:
        row.update(accuracy, checkpoint=str(checkpoint), depth=run.model.depth, dim=run.model.dim)
    return rows, drawn


def summary_row(attention: str, layer: int, head: int, values: list[dict]) -> dict:
    """Mean over sequences of each metric for one head."""
    mean = {k: statistics.fmean(v[k] for v in values) for k in values[0]}
    return {"mode": "trained", "attention": attention, "layer": layer, "head": head, **mean,
            "sequences": len(values)}


def main(argv: list[str] | None = None) -> Path:
    started = time.time()
    own, attentions, overrides = parse(sys.argv[1:] if argv is None else argv)
    out = Path(own["out"])
    rows, drawn = [], {}
    if own["mode"] in ("trained", "both"):
        for attention in attentions:
            run, checkpoint, layers = model_and_batches(attention, overrides, own)
            attention_rows, drawn[attention] = trained_rows(attention, run, checkpoint, layers, own["top_k"])
            rows += attention_rows
            print(f"microscope: {attention}: rel_error {attention_rows[-1]['rel_error']:.4f}", file=sys.stderr)
    if own["mode"] in ("approx", "both"):
        soft = {**own, "checkpoint": own["checkpoint"] if attentions == ["softmax"] else None}
        _, checkpoint, layers = model_and_batches("softmax", overrides, soft)
        qk = [sequences_of(layer) for layer in layers]
        approx = approximation_rows(qk, own["approx"].split(","), [int(m) for m in own["features"].split(",")],
                                    fit_sequences=own["fit_sequences"], steps=own["fit_steps"], lr=own["fit_lr"],
                                    log=lambda line: print(f"microscope: {line}", file=sys.stderr))
        rows += [{**row, "checkpoint": str(checkpoint)} for row in approx]
        approx_figure(approx, out / NAME / f"{NAME}_approx.png")
    if drawn:
        trained_figure(drawn, out / NAME / f"{NAME}.png")
    config = {"attentions": attentions, "overrides": overrides, **own}
    keys = ["mode", "attention", "mechanism", "variant", "size", "layer", "head"]
    path = write_analysis_record(NAME, rows, keys=keys, config=config, started=started, out_root=out, notes=NOTES)
    print(f"microscope: wrote {path}", file=sys.stderr)
    if own["tables"]:
        written = tabulate(NAME, path, own["tables"])
        print(f"microscope: wrote {', '.join(map(str, written))}", file=sys.stderr)
    return path


if __name__ == "__main__":
    main()
