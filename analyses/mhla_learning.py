"""MHLA learning analysis: Algorithm 1 against gradient training (Yau et al., arXiv 2410.10101, Sec. 4).

``python -m analyses.mhla_learning [--quick] [--seeds 3] [--out-root outputs/analyses] [--tables outputs/tables]``
(``--committed``: the tables and PNGs go to ``results/tables``, the committed copy)

``mhla_teacher`` (Fig. 1): a random MHLA teacher with ``d^2`` heads, Gaussian sequences of length T = 100,
``(N, d) = (512, 2), (2048, 4)``. Algorithm 1 (``fit_mhla``: least squares on the cubic features, SVD to heads)
against AdamW-trained one-layer MHLA with H in {1, 2, 4, 8, 16} and residual stacks of single-head layers.
MSE is normalised by the mean squared training target; held-out MSE on fresh sequences.

``mhla_memory`` (Fig. 2): the associative memory, d = 4 (``_mhla_data``), orthogonal/Gaussian mixtures vary
``lambda_min(Lambda_D)`` (``identifiability_certificate``); the metric is ``||p(Theta_hat) - p(Theta)||_F``
between function coefficients. Fits: Algorithm 1 (minimum-norm, float64 and float32), Algorithm 1 from a random
start ``W_0`` (the exact least-squares solution nearest ``W_0``: another zero-error fit), ``W`` trained by AdamW,
and AdamW-trained MHLA with 1/2/4/8 heads on all-Gaussian (full rank) and all-orthogonal (rank deficient) data.

It prints an expected time first (one epoch probed per setting), then a line per (setting, seed); finished
cells are kept (``_cells``), so a rerun after an interruption trains only the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from analyses._cells import CellCache, print_plan
from analyses._mhla_data import (
    DTYPE,
    coefficient_distance,
    gaussian_sequences,
    memory_sequences,
    memory_teacher,
    random_mhla,
)
from analyses._mhla_model import fit_mhla, identifiability_certificate
from analyses._mhla_report import memory_notes, plot_memory, plot_teacher, summarize, teacher_notes
from analyses._mhla_training import CoefficientModel, MHLAStack, Summary, normalised_mse, train_adamw
from analyses.record import ANALYSIS_ROOT, tabulate, write_analysis_record
from lra.run.outputs import TABLES
from lra_base.atomic import write_atomic

TEACHER, MEMORY = "mhla_teacher", "mhla_memory"
CONVEX = "Alg. 1 (convex)"


@dataclass(frozen=True)
class Config:
    """Sizes and the AdamW protocol (shared by every gradient-trained model)."""

    seeds: int = 3
    length: int = 100
    settings: tuple = ((512, 2), (2048, 4))
    heldout: int = 1024
    heads: tuple = (1, 2, 4, 8, 16)
    deep_layers: tuple = (2,)
    epochs: int = 300
    batch: int = 64
    lr: float = 1e-2
    curve_epochs: tuple = (10, 30, 100)
    memory_dim: int = 4
    memory_samples: int = 4096
    fractions: tuple = (0.0, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 1.0)
    memory_heads: tuple = (1, 2, 4, 8)
    memory_epochs: int = 150
    memory_batch: int = 128


QUICK = Config(seeds=1, length=20, settings=((96, 2),), heldout=64, heads=(1, 4), deep_layers=(2,), epochs=6,
               batch=32, curve_epochs=(2, 4), memory_dim=2, memory_samples=240, fractions=(0.0, 0.9, 1.0),
               memory_heads=(1, 2), memory_epochs=3, memory_batch=64)


def generator(*key: int) -> torch.Generator:
    """A generator seeded from integers (one per experiment cell, so cells do not depend on run order)."""
    seed = 0
    for part in key:
        seed = seed * 1_000_003 + part
    return torch.Generator().manual_seed(seed % 2**63)


def teacher_cells(cfg: Config, count: int, dim: int, seed: int) -> list[dict]:
    """One setting and seed: Algorithm 1 and every gradient-trained student on the same teacher and data."""
    data = generator(1, count, dim, seed)
    teacher = random_mhla(dim, dim * dim, data)
    z_train, z_test = (gaussian_sequences(n, dim, cfg.length, data) for n in (count, cfg.heldout))
    with torch.no_grad():
        y_train, y_test = teacher.predict_last(z_train), teacher.predict_last(z_test)
    power = float(y_train.pow(2).mean())
    train, test = Summary.of(z_train), Summary.of(z_test)
    setting = f"N={count}, d={dim}"
    with torch.no_grad():
        convex = fit_mhla(z_train, y_train)
        fits = [float((convex.predict_last(z) - y).pow(2).mean() / power) for z, y in ((z_train, y_train),
                                                                                        (z_test, y_test))]
    cells = [{"setting": setting, "model": CONVEX, "heads": convex.values.shape[0], "layers": 1, "seed": seed,
              "train_mse": fits[0], "heldout_mse": fits[1], "curve": None}]
    shapes = [(h, 1) for h in cfg.heads] + [(1, layers) for layers in cfg.deep_layers]
    for index, (heads, layers) in enumerate(shapes):
        student = MHLAStack(dim, heads, layers, generator(2, count, dim, seed, index))
        curve = train_adamw(student, train, y_train, epochs=cfg.epochs, batch=cfg.batch, lr=cfg.lr,
                            generator=generator(3, count, dim, seed, index))
        name = f"MHLA H={heads}" if layers == 1 else f"MHLA H=1 x {layers} layers"
        cells.append({"setting": setting, "model": name, "heads": heads, "layers": layers, "seed": seed,
                      "train_mse": curve[-1], "heldout_mse": normalised_mse(student, test, y_test, power),
                      "curve": curve})
    return cells


def memory_cells(cfg: Config, fraction: float, seed: int) -> list[dict]:
    """One orthogonal fraction and seed: ``lambda_min`` and the coefficient distance of every fit."""
    data = generator(4, round(fraction * 1000), seed)
    dim = cfg.memory_dim
    teacher = memory_teacher(dim)
    truth = teacher.coefficients().detach()
    z = memory_sequences(cfg.memory_samples, dim, fraction, data)
    with torch.no_grad():
        y = teacher.predict_last(z)
        start = random_mhla(2 * dim, 1, generator(5, seed))
        fits = {
            "Alg. 1 min-norm (float64)": fit_mhla(z, y).coefficients(),
            "Alg. 1 min-norm (float32)": fit_mhla(z.float(), y.float()).coefficients(),
            "Alg. 1 random start (float64)": start.coefficients()
            + fit_mhla(z, y - start.predict_last(z)).coefficients(),
        }
    lam = float(identifiability_certificate(z))
    seq = Summary.of(z)
    power = float(y.pow(2).mean())
    base = {"orthogonal": fraction, "seed": seed, "lambda_min": lam}
    cells = [{**base, "model": name, "heads": None, "distance": coefficient_distance(w, truth),
              "train_mse": _mse_of_coefficients(w, seq, y, power)} for name, w in fits.items()]
    students = [(CoefficientModel(2 * dim), "W by AdamW (from 0)", None)]
    if fraction in (0.0, 1.0):
        students += [(MHLAStack(2 * dim, h, 1, generator(6, seed, h)), f"MHLA H={h} (AdamW)", h)
                     for h in cfg.memory_heads]
    for index, (model, name, heads) in enumerate(students):
        curve = train_adamw(model, seq, y, epochs=cfg.memory_epochs, batch=cfg.memory_batch, lr=cfg.lr,
                            generator=generator(7, round(fraction * 1000), seed, index))
        cells.append({**base, "model": name, "heads": heads, "train_mse": curve[-1],
                      "distance": coefficient_distance(model.coefficients().detach(), truth)})
    return cells


def _mse_of_coefficients(w: torch.Tensor, seq: Summary, y: torch.Tensor, power: float) -> float:
    model = CoefficientModel(seq.last.shape[-1])
    with torch.no_grad():
        model.w.copy_(w.to(DTYPE))
    return normalised_mse(model, seq, y, power)


def epoch_seconds(dim: int, heads: int, count: int, length: int, batch: int) -> float:
    """Seconds of one AdamW epoch of a one-layer ``heads``-head MHLA on ``count`` random sequences."""
    gen = generator(9, count, dim, heads)
    z = gaussian_sequences(count, dim, length, gen)
    y = torch.randn(count, dim, generator=gen, dtype=z.dtype)
    student, seq = MHLAStack(dim, heads, 1, gen), Summary.of(z)
    train_adamw(student, seq[:batch], y[:batch], epochs=1, batch=batch, lr=1e-3, generator=gen)  # first-call costs
    started = time.perf_counter()
    train_adamw(student, seq, y, epochs=1, batch=batch, lr=1e-3, generator=gen)
    return time.perf_counter() - started


def expected_minutes(cfg: Config, teacher_todo: list[tuple], memory_todo: list[tuple]) -> float:
    """Minutes of the cells to do, every student timed as the widest one (one epoch probed per setting)."""
    seconds = 0.0
    students = len(cfg.heads) + len(cfg.deep_layers)
    for count, dim in {(count, dim) for count, dim, _ in teacher_todo}:
        epoch = epoch_seconds(dim, max(cfg.heads), count, cfg.length, cfg.batch)
        seconds += epoch * cfg.epochs * students * sum(1 for c, d, _ in teacher_todo if (c, d) == (count, dim))
    if memory_todo:
        epoch = epoch_seconds(2 * cfg.memory_dim, max(cfg.memory_heads), cfg.memory_samples, 2, cfg.memory_batch)
        for fraction, _ in memory_todo:
            students = 1 + (len(cfg.memory_heads) if fraction in (0.0, 1.0) else 0)
            seconds += epoch * cfg.memory_epochs * students
    return seconds / 60


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m analyses.mhla_learning", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds (tests)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 3, quick 1)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="record root (default: outputs/analyses)")
    TABLES.add_to(parser)
    args = parser.parse_args(argv)
    args.tables = TABLES.choose(parser, args)
    return args


def write(name: str, rows: list[dict], cells: list[dict], keys: list[str], cfg: Config, started: float,
          notes: list[str], args: argparse.Namespace, plot) -> list[Path]:
    """Record (+ per-seed ``cells.json`` beside it), tables and PNG of one analysis."""
    path = write_analysis_record(name, rows, keys=keys, config=asdict(cfg), started=started, published=None,
                                 out_root=args.out_root, notes=notes)
    write_atomic(path.parent / "cells.json", json.dumps(cells, indent=1))
    tables = tabulate(name, path, args.tables)
    return [path, path.parent / "cells.json", *tables, plot(cells, cfg, Path(args.tables) / f"{name}.png")]


def main(argv: list[str] | None = None) -> int:
    """Run both experiments, write two records, tables and PNGs; print the tables."""
    args = parse_args(argv)
    cfg = QUICK if args.quick else Config()
    cfg = replace(cfg, seeds=args.seeds) if args.seeds else cfg
    written = []
    cache = CellCache(Path(args.out_root) / "mhla_learning", asdict(cfg))
    teacher_jobs = [(n, d, seed) for n, d in cfg.settings for seed in range(cfg.seeds)]
    memory_jobs = [(fraction, seed) for fraction in cfg.fractions for seed in range(cfg.seeds)]
    teacher_todo = [job for job in teacher_jobs if f"teacher {job}" not in cache]
    memory_todo = [job for job in memory_jobs if f"memory {job}" not in cache]
    todo, total = len(teacher_todo) + len(memory_todo), len(teacher_jobs) + len(memory_jobs)
    print_plan("mhla_learning", todo, total - todo, expected_minutes(cfg, teacher_todo, memory_todo),
               "every student timed as the widest one")

    def cached(key: str, measure) -> list[dict]:
        cells, took = cache.measured(key, measure)
        print(f"mhla_learning: {key} ({took})", file=sys.stderr, flush=True)
        return cells

    started = time.time()
    cells = [c for n, d, seed in teacher_jobs
             for c in cached(f"teacher {(n, d, seed)}", lambda n=n, d=d, seed=seed: teacher_cells(cfg, n, d, seed))]
    rows = summarize(cells, ["setting", "model", "heads", "layers"], ["train_mse", "heldout_mse"], cfg.curve_epochs)
    written += write(TEACHER, rows, cells, ["setting", "model"], cfg, started, teacher_notes(rows, cfg), args,
                     plot_teacher)
    started = time.time()
    cells = [c for fraction, seed in memory_jobs
             for c in cached(f"memory {(fraction, seed)}", lambda f=fraction, s=seed: memory_cells(cfg, f, s))]
    rows = summarize(cells, ["orthogonal", "model", "heads"], ["lambda_min", "distance", "train_mse"], ())
    written += write(MEMORY, rows, cells, ["orthogonal", "model"], cfg, started, memory_notes(rows, cfg), args,
                     plot_memory)
    cache.clear()
    for path in written:
        if path.suffix == ".md":
            print(path.read_text(encoding="utf-8"))
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
