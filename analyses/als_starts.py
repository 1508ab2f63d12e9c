"""Is the LLoPS kernel fit limited by its optimiser or by its map? ALS from random starts on one cell.

``python -m analyses.als_starts [--layer 0] [--degree 2] [--starts 2] [--sweeps 40] [--quick]``

On the captured q, k of one layer of ``kernel_approx``'s AR model (trained or reused exactly as that analysis
does), fit a rank-1 LLoPS map (arXiv 2610.14219) by alternating least squares from ``--starts`` random sketches,
without the Adam fit first, and print each start's fit error and held-out Frobenius error over the rank-m SVD
bound. When every start ends at the error of ``kernel_approx``'s ``llops_als`` row, the gap to the bound is the
map's, not the fit's (docs/analyses.md, "Kernel approximation").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from . import _kernel_maps as maps
from . import kernel_approx as ka
from ._runs import run_folder, train_or_reuse
from .record import ANALYSIS_ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analyses.als_starts", description=__doc__.splitlines()[0])
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--degree", type=int, default=2, help="p of the kernel (q . k)^p")
    parser.add_argument("--features", type=int, default=64, help="m")
    parser.add_argument("--starts", type=int, default=2)
    parser.add_argument("--sweeps", type=int, default=40)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke version (tests)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="where kernel_approx keeps its AR model")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    fit = ka.QUICK_FIT if args.quick else ka.FitSettings()
    run = ka.model_config(args.depth, args.quick)
    record = train_or_reuse(run, run_folder(Path(args.out_root) / ka.NAME, "model", run))
    seq_len = int(run.task.own["seq_len"])
    tokens = ka.capture_tokens(run, fit.fit_sequences + fit.heldout_sequences)
    captured = ka.capture_qk(ka.load_model(run, record), tokens)
    (q_fit, q_out), (k_fit, k_out) = (ka.split_vectors(x, fit.fit_sequences, seq_len) for x in captured[args.layer])
    exact = maps.exact_kernel(q_out.double(), k_out.double(), args.degree)
    bound = maps.relative_frobenius(maps.truncated_svd(exact, args.features)[0], exact)
    print(f"layer {args.layer} p={args.degree} m={args.features}: held-out SVD bound {bound:.4f}", flush=True)
    heads, d = q_fit.shape[0], q_fit.shape[-1]
    for start in range(args.starts):
        fmap = maps.LLoPSMap(heads, args.degree, d, args.features, torch.Generator().manual_seed(100 + start))
        started = time.perf_counter()
        errors = maps.als_refine(fmap, q_fit, k_fit, args.degree, sweeps=args.sweeps)
        held = maps.relative_frobenius(maps.predict(fmap, q_out, k_out), exact)
        print(f"start {start}: fit error {errors[0]:.4f} after one sweep, {errors[-1]:.4f} after {args.sweeps}; "
              f"held-out {held:.4f} = {held / bound:.2f}x the bound ({time.perf_counter() - started:.0f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
