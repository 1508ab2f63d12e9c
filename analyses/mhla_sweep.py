"""Does the MHLA paper's head-count order appear under another learning rate or initialisation?

``python -m analyses.mhla_sweep [--quick] [--seeds 3]`` (Yau et al., arXiv 2410.10101, Fig. 1, d = 2).

``analyses.mhla_learning`` trains one-layer MHLA students (AdamW, lr 1e-2, init N(0, 1/d)) on a random MHLA
teacher with d^2 heads; for d = 2 ours end in the order H = 8 < H = 16 < H = 4 (train MSE), the paper's
H = 4 best (~1e-16) with H = 8 and 16 above it. This sweep repeats the d = 2 setting (N = 512 sequences of
T = 100 tokens, the same teacher and data per seed) over learning rates and initial weight scales (students'
V_h, Q_h ~ N(0, (s^2)/d)) and reports, per (lr, s), each H's final train MSE (mean, min, max over seeds) and
the order of the heads; a note says which settings give the paper's order.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass

import torch

from analyses._mhla_data import gaussian_sequences, random_mhla
from analyses._mhla_report import summarize
from analyses._mhla_training import MHLAStack, Summary, train_adamw
from analyses.mhla_learning import Config, epoch_seconds, generator
from analyses.record import ANALYSIS_ROOT, tabulate, write_analysis_record
from lra.run.outputs import TABLES

NAME = "mhla_sweep"


@dataclass(frozen=True)
class Sweep:
    count: int = 512
    dim: int = 2
    length: int = 100
    heads: tuple = (4, 8, 16)
    lrs: tuple = (3e-3, 1e-2, 3e-2)
    scales: tuple = (0.1, 1.0)
    seeds: int = 3
    epochs: int = 300
    batch: int = 64


QUICK = Sweep(count=64, length=10, heads=(4, 8), lrs=(1e-2,), scales=(1.0,), seeds=1, epochs=3, batch=32)


def cells_for(sweep: Sweep, seed: int) -> list[dict]:
    """Every (lr, scale, H) student on the seed's teacher and data (as ``mhla_learning``'s d = 2 setting)."""
    data = generator(1, sweep.count, sweep.dim, seed)
    teacher = random_mhla(sweep.dim, sweep.dim**2, data)
    z = gaussian_sequences(sweep.count, sweep.dim, sweep.length, data)
    with torch.no_grad():
        y = teacher.predict_last(z)
    seq = Summary.of(z)
    cells = []
    for (lr, scale, heads) in itertools.product(sweep.lrs, sweep.scales, sweep.heads):
        index = Config().heads.index(heads)  # mhla_learning's streams: lr 0.01, init x1 is its own run
        student = MHLAStack(sweep.dim, heads, 1, generator(2, sweep.count, sweep.dim, seed, index))
        with torch.no_grad():
            for parameter in student.parameters():
                parameter.mul_(scale)
        started = time.perf_counter()
        curve = train_adamw(student, seq, y, epochs=sweep.epochs, batch=sweep.batch, lr=lr,
                            generator=generator(3, sweep.count, sweep.dim, seed, index))
        cells.append({"lr": lr, "init_scale": scale, "heads": heads, "seed": seed, "train_mse": curve[-1]})
        print(f"mhla_sweep: seed {seed} lr {lr:g} init x{scale:g} H={heads}: train MSE {curve[-1]:.3g} "
              f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    return cells


def orders(rows: list[dict], sweep: Sweep) -> tuple[list[dict], list[str]]:
    """Per (lr, scale) the heads from lowest to highest mean train MSE, and the settings with the paper's order."""
    table, papers = [], []
    for lr, scale in itertools.product(sweep.lrs, sweep.scales):
        mine = {r["heads"]: r["train_mse"] for r in rows if r["lr"] == lr and r["init_scale"] == scale}
        order = sorted(mine, key=mine.get)
        for row in rows:
            if row["lr"] == lr and row["init_scale"] == scale:
                table.append({**row, "order": " < ".join(f"H={h}" for h in order)})
        if order and order[0] == sweep.dim**2:
            papers.append(f"lr {lr:g}, init x{scale:g} (H={order[0]} at {mine[order[0]]:.2g})")
    return table, papers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analyses.mhla_sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds (tests)")
    parser.add_argument("--seeds", type=int, help="seeds (default 3)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT))
    TABLES.add_to(parser)
    args = parser.parse_args(argv)
    args.tables = TABLES.choose(parser, args)
    sweep = QUICK if args.quick else Sweep()
    if args.seeds:
        sweep = Sweep(**{**sweep.__dict__, "seeds": args.seeds})
    started = time.time()
    runs = len(sweep.lrs) * len(sweep.scales) * len(sweep.heads) * sweep.seeds
    per_setting = sum(epoch_seconds(sweep.dim, h, sweep.count, sweep.length, sweep.batch) for h in sweep.heads)
    minutes = per_setting * sweep.epochs * runs / len(sweep.heads) / 60
    print(f"mhla_sweep: {runs} trainings of {sweep.epochs} epochs; expected ~{minutes:.0f} min on one idle core "
          "(one epoch probed per head count)", file=sys.stderr, flush=True)
    cells = [cell for seed in range(sweep.seeds) for cell in cells_for(sweep, seed)]
    rows = summarize(cells, ["lr", "init_scale", "heads"], ["train_mse"], ())
    table, papers = orders(rows, sweep)
    notes = [f"d = {sweep.dim}, N = {sweep.count}, T = {sweep.length}, teacher with d^2 = {sweep.dim**2} heads; "
             f"one-layer students, AdamW (no weight decay), cosine from lr, batch {sweep.batch}, {sweep.epochs} "
             f"epochs, float64, V_h, Q_h ~ N(0, s^2/d) with s = init_scale; train MSE / mean squared target, mean "
             f"(min, max) over {sweep.seeds} seed(s). mhla_learning's own setting is lr 0.01, init x1.",
             "The paper's order (H = d^2 = 4 lowest): " + ("; ".join(papers) if papers else "in no setting") + "."]
    path = write_analysis_record(NAME, table, keys=["lr", "init_scale", "heads"], config=sweep.__dict__,
                                 started=started, out_root=args.out_root, notes=notes)
    written = tabulate(NAME, path, args.tables)
    print(open(written[1], encoding="utf-8").read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
