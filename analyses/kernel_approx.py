"""LLoPS kernel-approximation analysis (arXiv 2610.14219, RMAE table; the bound of its Theorem 3.1).

``python -m analyses.kernel_approx [--quick] [--features 64] [--depth 4] [--fit-steps 3000] [--out-root ...]``

1. Trains (or reuses) a causal softmax model on ``task=ar`` (run dir ``<out-root>/kernel_approx/model-<digest>``,
   ``analyses._runs``).
2. Captures every layer's q, k ``(H, N, head_dim)`` on fresh AR sequences (a data seed no split uses), per head,
   each head's vectors scaled by their RMS norm on the fit sequences; the first sequences give the fit vectors,
   the rest the held-out ones.
3. For p = 2, 3 and the first, middle and last layer: random sketch, 2-layer MLP and LLoPS feature maps of size m
   (``_kernel_maps``), and the truncated SVD of the held-out kernel matrix ``K = (Q K^T)^p`` (every held-out
   query against every held-out key, so the matrix is far larger than m).
4. ``RMAE = sum |K_hat - K| / sum |K|`` and ``||K_hat - K||_F / ||K||_F`` on the held-out matrix, summed over heads.

It prints the expected time first (a probe of the fits on random vectors, the AR model's from ``_runs``), then
one line per cell; finished cells are kept (``_cells``), so a rerun after an interruption measures only the rest.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from lra.build import build_model
from lra.config import compose_run
from lra.model import AttentionBlock
from lra.run.outputs import TABLES
from lra.run.record import write_json_atomic
from lra.run.threads import torch_threads
from lra.settings import Run
from lra.tasks import ar

from . import _kernel_maps as maps
from ._cells import CellCache, print_plan
from ._runs import expected_minutes, run_folder, train_or_reuse
from .plotting import pyplot, save
from .record import ANALYSIS_ROOT, REPO, tabulate, write_analysis_record

NAME = "kernel_approx"
PUBLISHED = "llops_rmae_table"  # results/reference/<PUBLISHED>.csv
METHODS = ("polysketch_random", "mlp_2layer", "llops", "llops_als", "svd_rank_m")
MODEL = ["model.dim=64", "model.ffn_dim=128", "model.heads=2", "model.dropout=0.0", "task.max_steps=1000",
         "task.eval_every=250", "task.optim.lr=3e-3", "task.optim.warmup_steps=100"]
QUICK_MODEL = ["model.dim=32", "model.ffn_dim=64", "model.heads=2", "task.max_steps=20", "task.eval_every=10",
               "task.data.train=256", "task.data.val=64", "task.data.test=64"]
CAPTURE_SEED = 1000  # AR data seed for the captured sequences; the splits use task.data.seed + 0, 1, 2


@dataclass(frozen=True)
class FitSettings:
    """Captured sequences and the fitting of the learned maps (same steps and batch; each map its own lr)."""

    fit_sequences: int = 64
    heldout_sequences: int = 16
    steps: int = 3000
    batch: int = 256
    mlp_lr: float = 3e-3
    llops_lr: float = 1e-2
    draws: int = 4
    degrees: tuple[int, ...] = (2, 3)
    als_sweeps: int = 20  # alternating least squares after the Adam fit (llops_als); 0: none


QUICK_FIT = FitSettings(fit_sequences=4, heldout_sequences=2, steps=20, batch=64, draws=2, als_sweeps=2)


def model_config(depth: int, quick: bool) -> Run:
    """The run of ``run.py task=ar attention=softmax`` at this depth, marked as this analysis's run."""
    overrides = ["task=ar", "attention=softmax", f"model.depth={depth}", "tag=kernel_approx",
                 "trainer.enable_progress_bar=false", *(QUICK_MODEL if quick else MODEL)]
    return compose_run(overrides).asked_by(NAME)  # results.collect leaves runs of an analysis to its own table


def load_model(run: Run, record: dict[str, Any]) -> ar.LitModule:
    """The trained model (best checkpoint), in eval mode."""
    vocab = int(run.task.own["vocab_size"])
    model = build_model(run, vocab, vocab)
    state = torch.load(record["best_checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    model.load_state_dict(state)
    return model.eval()


@torch.no_grad()
def capture_qk(model: ar.LitModule, tokens: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Per layer, q and k ``(H, B N, head_dim)`` of ``tokens`` ``(B, N)``, read by a pre-hook on the attention."""
    seen: dict[int, tuple[Tensor, Tensor]] = {}
    blocks = [b for b in model.encoder.blocks if isinstance(b, AttentionBlock)]

    def keeper(layer: int):
        def hook(module, args):
            q, k = args[0], args[1]  # (B, H, N, head_dim)
            seen[layer] = (q.transpose(0, 1).flatten(1, 2), k.transpose(0, 1).flatten(1, 2))
        return hook

    handles = [b.attention.register_forward_pre_hook(keeper(i)) for i, b in enumerate(blocks)]
    try:
        lengths = torch.full((tokens.shape[0],), tokens.shape[1], dtype=torch.long)
        model({"tokens": tokens, "lengths": lengths})
    finally:
        for handle in handles:
            handle.remove()
    return [seen[i] for i in range(len(blocks))]


def capture_tokens(run: Run, count: int) -> Tensor:
    """``count`` AR sequences ``(count, seq_len)`` from a data seed the training splits do not use."""
    task = run.task.own
    split = ar.make_mqar(count, seq_len=int(task["seq_len"]), num_pairs=int(task["num_pairs"]),
                         vocab_size=int(task["vocab_size"]), seed=int(run.task.data.own["seed"]) + CAPTURE_SEED)
    return torch.from_numpy(np.stack([split.sequence(i) for i in range(count)]))


def split_vectors(x: Tensor, fit_count: int, seq_len: int) -> tuple[Tensor, Tensor]:
    """Fit and held-out vectors (different sequences), both divided by the fit vectors' RMS norm per head."""
    fit, heldout = x[:, : fit_count * seq_len], x[:, fit_count * seq_len :]  # (H, n, d)
    scale = fit.pow(2).sum(-1).mean(-1).sqrt()[:, None, None]  # (H, 1, 1)
    return fit / scale, heldout / scale


def evaluate_cell(q: tuple[Tensor, Tensor], k: tuple[Tensor, Tensor], p: int, m: int, fit: FitSettings,
                  seed: int) -> dict[str, dict[str, float]]:
    """Held-out RMAE and relative Frobenius error of every method for one (layer, p)."""
    (q_fit, q_out), (k_fit, k_out) = q, k
    heads, d = q_fit.shape[0], q_fit.shape[-1]
    exact = maps.exact_kernel(q_out.double(), k_out.double(), p)  # (H, Nq, Nk)
    gen = torch.Generator().manual_seed(seed)
    cells: dict[str, dict[str, float]] = {}
    draws = [maps.random_sketch(q_out, k_out, p, m, gen) for _ in range(fit.draws)]
    cells["polysketch_random"] = {"rmae": statistics.fmean(maps.rmae(a, exact) for a in draws),
                                  "fro": statistics.fmean(maps.relative_frobenius(a, exact) for a in draws)}
    learned = {"mlp_2layer": maps.MLPMap(heads, d, m, m, gen), "llops": maps.LLoPSMap(heads, p, d, m, gen)}
    lrs = {"mlp_2layer": fit.mlp_lr, "llops": fit.llops_lr}
    for method, fmap in learned.items():
        losses = maps.fit_map(fmap, q_fit, k_fit, p, steps=fit.steps, batch=fit.batch, lr=lrs[method], generator=gen)
        approx = maps.predict(fmap, q_out, k_out)
        sub = slice(0, q_out.shape[1])  # a fit block of the held-out size: fit error beside held-out error
        fit_exact = maps.exact_kernel(q_fit[:, sub].double(), k_fit[:, sub].double(), p)
        cells[method] = {"rmae": maps.rmae(approx, exact), "fro": maps.relative_frobenius(approx, exact),
                         "fit_rmae": maps.rmae(maps.predict(fmap, q_fit[:, sub], k_fit[:, sub]), fit_exact),
                         "final_loss": statistics.fmean(losses[-20:])}
    if fit.als_sweeps:
        als = copy.deepcopy(learned["llops"])
        fit_errors = maps.als_refine(als, q_fit, k_fit, p, sweeps=fit.als_sweeps)
        approx = maps.predict(als, q_out, k_out)
        cells["llops_als"] = {"rmae": maps.rmae(approx, exact), "fro": maps.relative_frobenius(approx, exact),
                              "fit_fro": fit_errors[-1], "fit_fro_first_sweep": fit_errors[0]}
    approx, tail = maps.truncated_svd(exact, m)
    cells["svd_rank_m"] = {"rmae": maps.rmae(approx, exact), "fro": maps.relative_frobenius(approx, exact),
                           "fro_from_tail": float(tail.sum().sqrt() / exact.norm())}
    return cells


def cell_key(p: int, layer: int) -> str:
    return f"p{p}-layer{layer}"


def measure(captured: list[tuple[Tensor, Tensor]], layers: list[int], seq_len: int, m: int, fit: FitSettings,
            seed: int, cache: CellCache) -> dict[tuple[int, int], dict[str, dict[str, float]]]:
    """Every (p, layer) cell, on one thread: the fits are many tiny steps, a second thread only adds sync cost.
    Cells in ``cache`` (an interrupted earlier call with the same settings) are reused, new ones stored."""
    cells = {}
    with torch_threads(1):
        for layer in layers:
            q, k = (split_vectors(x, fit.fit_sequences, seq_len) for x in captured[layer])
            for p in fit.degrees:
                cell, took = cache.measured(cell_key(p, layer),
                                            partial(evaluate_cell, q, k, p, m, fit, seed=seed + 100 * layer + p))
                cells[(p, layer)] = cell
                errors = ", ".join(f"{name} {c['rmae']:.3f}" for name, c in cell.items())
                print(f"layer {layer} p={p} ({took}): RMAE {errors}", file=sys.stderr, flush=True)
    return cells


def probe_cell_seconds(heads: int, d: int, m: int, fit: FitSettings, seq_len: int) -> float:
    """Seconds of one cell on one thread, from a few fit steps and one ALS sweep on random vectors of the
    cell's shapes (the highest degree: the slowest)."""
    with torch_threads(1):
        gen = torch.Generator().manual_seed(0)
        q, k = (torch.randn(heads, fit.fit_sequences * seq_len, d, generator=gen) / d**0.5 for _ in range(2))
        p, probe_steps, seconds = max(fit.degrees), 5, 0.0
        for fmap in (maps.MLPMap(heads, d, m, m, gen), maps.LLoPSMap(heads, p, d, m, gen)):
            maps.fit_map(fmap, q, k, p, steps=1, batch=fit.batch, lr=1e-3, generator=gen)  # first-call costs
            started = time.perf_counter()
            maps.fit_map(fmap, q, k, p, steps=probe_steps, batch=fit.batch, lr=1e-3, generator=gen)
            seconds += (time.perf_counter() - started) / probe_steps * fit.steps
        if fit.als_sweeps:
            started = time.perf_counter()
            maps.als_refine(maps.LLoPSMap(heads, p, d, m, gen), q, k, p, sweeps=1)
            seconds += (time.perf_counter() - started) * fit.als_sweeps
        return seconds


def table_rows(cells: dict[tuple[int, int], dict[str, dict[str, float]]], layers: list[int], m: int,
               degrees: tuple[int, ...]) -> list[dict[str, Any]]:
    """One row per (p, method): RMAE per layer and their mean, then the relative Frobenius errors."""
    rows = []
    for p in degrees:
        for method in (name for name in METHODS if name in cells[(p, layers[0])]):
            row: dict[str, Any] = {"p": p, "method": method, "m": m}
            for metric, prefix, mean in (("rmae", "", "mean"), ("fro", "fro_", "fro_mean")):
                values = [cells[(p, layer)][method][metric] for layer in layers]
                row.update({f"{prefix}layer{layer}": v for layer, v in zip(layers, values)})
                row[mean] = statistics.fmean(values)
            rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], layers: list[int], path: Path) -> Path:
    """RMAE per method at the first, middle and last layer (log y), ours solid and published dashed, per p."""
    published = pd.read_csv(REPO / "results" / "reference" / f"{PUBLISHED}.csv", comment="#")
    plt = pyplot()
    degrees = sorted({r["p"] for r in rows})
    fig, axes = plt.subplots(1, len(degrees), figsize=(4.5 * len(degrees) + 1.5, 3.6), squeeze=False)
    colors = dict(zip(METHODS, ("tab:red", "tab:orange", "tab:blue", "tab:green", "black")))
    ticks = [f"ours {layer}\npaper {paper}" for layer, paper in zip(layers, (0, 8, 15))]
    for ax, p in zip(axes[0], degrees):
        for method in METHODS:
            ours = next(r for r in rows if r["p"] == p and r["method"] == method)
            ax.plot(ticks, [ours[f"layer{layer}"] for layer in layers], "o-", color=colors[method], label=method)
            paper = published[(published["p"] == p) & (published["method"] == method)]
            if len(paper):
                values = paper.iloc[0][["layer0", "layer8", "layer15"]].astype(float).tolist()
                ax.plot(ticks, values, "s--", color=colors[method], mfc="none", alpha=0.6)
        ax.set(yscale="log", title=f"p = {p} (dashed: published)", ylabel="held-out RMAE")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    return save(fig, path)


def fit_gap(cells: dict[tuple[int, int], dict[str, dict[str, float]]]) -> str:
    """Mean RMAE of each learned map on a fit block beside its held-out RMAE (overfitting or underfitting)."""
    parts = []
    for method in ("mlp_2layer", "llops"):
        fit = statistics.fmean(cell[method]["fit_rmae"] for cell in cells.values())
        heldout = statistics.fmean(cell[method]["rmae"] for cell in cells.values())
        parts.append(f"{method} {fit:.3g} / {heldout:.3g}")
    return ("Mean RMAE on fit pairs / held-out pairs: " + ", ".join(parts) +
            " (per cell in cells.json); --fit-steps sets the Adam budget.")


def bound_ratios(cells: dict[tuple[int, int], dict[str, dict[str, float]]], layers: list[int]) -> str:
    """Each LLoPS fit's held-out Frobenius error over the rank-m SVD bound, per p and layer."""
    parts = []
    for method in ("llops", "llops_als"):
        ratios = [f"p={p} layer {layer}: {cell[method]['fro'] / cell['svd_rank_m']['fro']:.2f}x"
                  for (p, layer), cell in sorted(cells.items()) if method in cell and layer in layers]
        if ratios:
            parts.append(f"{method} " + ", ".join(ratios))
    return "Held-out Frobenius error / SVD bound: " + "; ".join(parts) + "."


def notes(run: Run, record: dict[str, Any], fit: FitSettings, layers: list[int], shapes: dict,
          cells: dict[tuple[int, int], dict[str, dict[str, float]]]) -> list[str]:
    """What we measured, and how it differs from the paper's setting."""
    model, task = run.model, run.task.own
    return [
        f"Model: causal softmax, task=ar (seq_len {task['seq_len']}, {task['num_pairs']} pairs), depth "
        f"{model.depth}, width {model.dim}, {model.heads} heads of {model.dim // model.heads}, dropout "
        f"{model.dropout}, {record.get('steps')} steps; test accuracy on queries "
        f"{100 * record['metrics']['test_acc']:.1f}%. "
        f"Our layers {layers} stand for the paper's 0, 8, 15 (16 layers).",
        f"Vectors: per head, {shapes['fit']} fit and {shapes['heldout']} held-out q and k per head from "
        f"{fit.fit_sequences} and {fit.heldout_sequences} fresh AR sequences (all positions); RMAE and Frobenius "
        "errors are summed over heads and over every held-out query x held-out key pair.",
        f"polysketch_random: Gaussian product sketch, mean of {fit.draws} draws, not trained. mlp_2layer (hidden m, "
        f"GELU) and llops (rank 1, no squaring, initialised at a random sketch): Adam, MSE on the raw kernel value, "
        f"{fit.steps} steps of {fit.batch} x {fit.batch} fit pairs, cosine decay from lr {fit.mlp_lr} (MLP) and "
        f"{fit.llops_lr} (LLoPS), each the best of 3e-3, 1e-2, 3e-2 by error on fit pairs in a trial run.",
        "svd_rank_m: truncated SVD of the held-out K itself (an oracle that sees the held-out matrix). It minimises "
        "the Frobenius error, so fro_* of every method is >= its fro_* (Theorem 3.1's bound sum_{i>m} sigma_i^2); "
        "its RMAE is not a strict lower bound of the other methods' RMAE, since RMAE is an L1 error.",
        fit_gap(cells),
        f"llops_als: the Adam fit above, then {fit.als_sweeps} sweeps of alternating least squares over every fit "
        "query x fit key pair (each of the 2p factors of Theta_q, Theta_k solved exactly with the others fixed; "
        "float64, ridge 1e-8 of the mean diagonal).",
        bound_ratios(cells, layers),
        "The paper does not state its m or head size for this table; ours: m and head_dim above.",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.kernel_approx", description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=64, help="feature size m of every map (default 64)")
    parser.add_argument("--depth", type=int, default=4, help="layers of the AR model (>= 3; default 4)")
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke version (tests)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="record and model under OUT_ROOT/kernel_approx/")
    TABLES.add_to(parser)
    parser.add_argument("--fit-steps", type=int, default=None, help="Adam steps per learned map (default 3000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sketches and the fits")
    args = parser.parse_args(argv)
    args.tables = TABLES.choose(parser, args)
    if args.depth < 3:
        parser.error("--depth must be >= 3 so that the first, middle and last layers differ")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    fit = QUICK_FIT if args.quick else FitSettings()
    fit = replace(fit, steps=args.fit_steps) if args.fit_steps else fit
    run = model_config(args.depth, args.quick)
    out = Path(args.out_root) / NAME
    model_dir = run_folder(out, "model", run)
    layers = [0, args.depth // 2, args.depth - 1]
    seq_len = int(run.task.own["seq_len"])
    cache = CellCache(out, {"features": args.features, "seed": args.seed, "layers": layers, "fit": asdict(fit),
                            "model": model_dir.name})
    keys = [cell_key(p, layer) for layer in layers for p in fit.degrees]
    todo = [key for key in keys if key not in cache]
    model_minutes, untrained = expected_minutes({"model": (run, model_dir)}, 1)
    heads = run.model.heads
    head_dim = run.model.dim // heads
    cell_seconds = probe_cell_seconds(heads, head_dim, args.features, fit, seq_len) if todo else 0.0
    detail = f"~{cell_seconds / 60:.1f} min a cell" + (f", the AR model ~{model_minutes:.0f} min" if untrained else "")
    print_plan(NAME, len(todo), len(keys) - len(todo), model_minutes + len(todo) * cell_seconds / 60, detail)
    record = train_or_reuse(run, model_dir)
    captured = capture_qk(load_model(run, record), capture_tokens(run, fit.fit_sequences + fit.heldout_sequences))
    cells = measure(captured, layers, seq_len, args.features, fit, args.seed, cache)
    rows = table_rows(cells, layers, args.features, fit.degrees)
    shapes = {"fit": fit.fit_sequences * seq_len, "heldout": fit.heldout_sequences * seq_len}
    config = {"features": args.features, "depth": args.depth, "quick": args.quick, "seed": args.seed,
              "layers": layers, "fit": asdict(fit), "model_run": str(record.get("run_dir")),
              "model_test_acc": record["metrics"]["test_acc"], "model_steps": record.get("steps")}
    path = write_analysis_record(NAME, rows, keys=["p", "method"], config=config, started=started,
                                 published=PUBLISHED, out_root=args.out_root,
                                 notes=notes(run, record, fit, layers, shapes, cells))
    write_json_atomic(path.parent / "cells.json", [{"p": p, "layer": layer, "method": method, **values}
                                                   for (p, layer), cell in cells.items()
                                                   for method, values in cell.items()])
    cache.clear()
    written = tabulate(NAME, path, args.tables)
    written.append(plot(rows, layers, Path(args.tables) / f"{NAME}.png"))
    print(Path(written[1]).read_text(encoding="utf-8"))
    print(f"record: {path}\nwrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
