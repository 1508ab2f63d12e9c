"""Rows, notes and figures of the MHLA learning analysis (Yau et al., arXiv 2410.10101, Figs. 1-2)."""

from __future__ import annotations

import math
from pathlib import Path

from analyses.plotting import pyplot, save

FLOOR = 1e-32  # log axes: exact zeros drawn here
SPREAD = ("train_mse", "distance")  # metrics that also get min and max over seeds
PUBLISHED_TEACHER = ("Published (Fig. 1, shape only): H = d^2 heads reach ~1e-16 (the convex solution's numerical "
                     "precision) by ~300-350 epochs; more layers or a full transformer do not; for d = 2, H = 8 and "
                     "16 end above H = 4.")
PUBLISHED_MEMORY = ("Published (Fig. 2, shape only): Algorithm 1's distance falls from ~3.5 to ~0.1 as lambda_min "
                    "rises from ~2^-13 to ~2^-7 (95%-100% orthogonal, 2^14 samples per set); full-rank data "
                    "(lambda_min = 0.06) gives 1e-7..1e-4 for convex and 1/2/4/8-head SGD, rank-deficient data ~1e0.")


def summarize(cells: list[dict], keys: list[str], metrics: list[str], curve_epochs: tuple) -> list[dict]:
    """One row per distinct ``keys`` (first-seen order): seed count, mean of each metric, min/max of ``SPREAD``,
    and the mean train MSE after each of ``curve_epochs`` (``mse@E``) when the cells carry curves."""
    groups: dict[tuple, list[dict]] = {}
    for cell in cells:
        groups.setdefault(tuple(cell[k] for k in keys), []).append(cell)
    rows = []
    for key, group in groups.items():
        row = {**dict(zip(keys, key)), "seeds": len(group)}
        for metric in metrics:
            values = [c[metric] for c in group]
            row[metric] = sum(values) / len(values)
            if metric in SPREAD:
                row[f"{metric}_min"], row[f"{metric}_max"] = min(values), max(values)
        for epoch in curve_epochs:
            curves = [c["curve"] for c in group if c.get("curve")]
            points = [curve[epoch] for curve in curves if epoch < len(curve)]
            row[f"mse@{epoch}"] = sum(points) / len(points) if points else None
        rows.append(row)
    return rows


def _row(rows: list[dict], **match) -> dict | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def teacher_notes(rows: list[dict], cfg) -> list[str]:
    """Protocol, the published shape, and ours in the same terms."""
    notes = [f"Protocol (ours, CPU): teacher = random MHLA with d^2 heads, V_h, Q_h ~ N(0, 1/d); tokens z_t ~ "
             f"N(0, I/T), T = {cfg.length} (one layer is 3-homogeneous in Z, so the scale only rescales targets; it "
             "keeps residual stacks finite); "
             f"{cfg.heldout} held-out sequences. Every gradient model: AdamW (weight decay 0), lr {cfg.lr} "
             f"cosine-decayed to 0, batch {cfg.batch}, {cfg.epochs} epochs, float64, student init N(0, 1/d). "
             "MSE = mean squared error / mean squared training target. 'x L layers': residual stack of single-head "
             "MHLA layers, Z <- Z + MHLA(Z), the last layer's output predicted. No full-transformer baseline. "
             f"Mean over {cfg.seeds} seed(s); per-seed curves in outputs/analyses/mhla_teacher/cells.json.",
             PUBLISHED_TEACHER]
    for count, dim in cfg.settings:
        setting = f"N={count}, d={dim}"
        convex, full = _row(rows, setting=setting, model="Alg. 1 (convex)"), _row(rows, setting=setting,
                                                                                  model=f"MHLA H={dim * dim}")
        if convex is None or full is None:
            continue
        trained = [r for r in rows if r["setting"] == setting and r["model"] != "Alg. 1 (convex)"]
        best = min(trained, key=lambda r: r["train_mse"])
        wider = [f"H={r['heads']}: {r['train_mse']:.1e}" for r in trained if r["layers"] == 1 and r["heads"] > dim**2]
        deep = [f"{r['layers']} layers: {r['train_mse']:.1e}" for r in trained if r["layers"] > 1]
        notes.append(f"Ours, {setting}: convex train {convex['train_mse']:.1e}, held-out {convex['heldout_mse']:.1e}; "
                     f"H = d^2 = {dim * dim} ends at {full['train_mse']:.1e} (seeds {full['train_mse_min']:.1e}.."
                     f"{full['train_mse_max']:.1e}); best trained: {best['model']} {best['train_mse']:.1e}; "
                     f"wider than d^2: {', '.join(wider) or '-'}; deeper single-head: {', '.join(deep) or '-'}.")
    return notes


def memory_notes(rows: list[dict], cfg) -> list[str]:
    """Protocol, the published shape, and ours in the same terms."""
    full, deficient = ([r for r in rows if r["orthogonal"] == f] for f in (0.0, 1.0))
    lambdas = {r["orthogonal"]: r["lambda_min"] for r in rows}
    notes = [f"Protocol (ours, CPU): d = {cfg.memory_dim} (tokens of dim {2 * cfg.memory_dim}, n = "
             f"{cfg.memory_dim + 1}), {cfg.memory_samples} samples per set (paper 2^14), Gaussian memories N(0, 1/d), "
             "orthogonal ones Haar; q, zeta ~ N(0, I/d) (zeta != 0 is needed for full rank, so the target's lower "
             "half is sum_j <q, k_j> v_j + |q|^2 zeta, exactly realisable by the one-head teacher, |p| = "
             f"{cfg.memory_dim}). AdamW as for mhla_teacher: lr {cfg.lr} cosine, batch {cfg.memory_batch}, "
             f"{cfg.memory_epochs} epochs, float64. 'orthogonal' = fraction of orthogonal memories; 'random start': "
             "W_0 + pinv(X)(y - X W_0), W_0 a random one-head MHLA (an exact least-squares solution that keeps W_0's "
             f"null-space part). Mean over {cfg.seeds} seed(s); per-seed cells in outputs/analyses/mhla_memory/"
             "cells.json.", PUBLISHED_MEMORY]
    shown = ", ".join(f"{f:.0%}: {lam:.1e} (2^{math.log2(lam):.1f})" if lam > 1e-12 else f"{f:.0%}: {lam:.0e}"
                      for f, lam in lambdas.items())
    notes.append(f"Ours, lambda_min by orthogonal fraction: {shown}.")
    for label, group in (("full rank (0% orthogonal)", full), ("rank deficient (100% orthogonal)", deficient)):
        if group:
            notes.append(f"Ours, {label}, distance: "
                         + "; ".join(f"{r['model']} {r['distance']:.1e}" for r in group) + ".")
    return notes


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, FLOOR)) for v in values) / len(values))


def plot_teacher(cells: list[dict], cfg, path: Path) -> Path:
    """MSE vs epoch (log y), one panel per setting: geometric mean over seeds, min-max band; convex dashed."""
    plt = pyplot()
    settings = list(dict.fromkeys(c["setting"] for c in cells))
    fig, axes = plt.subplots(1, len(settings), figsize=(6.5 * len(settings), 4.5), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        models = list(dict.fromkeys(c["model"] for c in cells if c["setting"] == setting))
        for model in models:
            group = [c for c in cells if c["setting"] == setting and c["model"] == model]
            if group[0]["curve"] is None:
                level = _geometric_mean([c["train_mse"] for c in group])
                ax.axhline(level, color="black", linestyle="--", label=f"{model}: {level:.0e}")
                continue
            length = min(len(c["curve"]) for c in group)
            epochs = range(length)
            columns = [[max(c["curve"][e], FLOOR) for c in group] for e in epochs]
            line = ax.plot(epochs, [_geometric_mean(col) for col in columns], label=model)[0]
            ax.fill_between(epochs, [min(col) for col in columns], [max(col) for col in columns],
                            color=line.get_color(), alpha=0.15)
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("train MSE / mean y^2")
        ax.set_title(f"random MHLA teacher, {setting}, T={cfg.length}")
        ax.legend(fontsize=7)
    return save(fig, path)


def plot_memory(cells: list[dict], cfg, path: Path) -> Path:
    """(a) distance vs lambda_min for the convex fits; (b) full rank vs rank deficient for every model."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    convex = list(dict.fromkeys(c["model"] for c in cells if c["heads"] is None))
    for model in convex:
        points = sorted((c["lambda_min"], max(c["distance"], FLOOR)) for c in cells
                        if c["model"] == model and c["lambda_min"] > 1e-12)
        if points:
            left.plot(*zip(*points), marker="o", linestyle="", label=model, alpha=0.7)
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("lambda_min(Lambda_D)  (lambda_min = 0 sets: right panel)")
    left.set_ylabel("||p(Theta_hat) - p(Theta)||_F")
    left.set_title(f"associative memory, d={cfg.memory_dim}, {cfg.memory_samples} samples, per seed")
    left.legend(fontsize=7)
    models = list(dict.fromkeys(c["model"] for c in cells if c["orthogonal"] in (0.0, 1.0)))
    for shift, (fraction, label) in zip((-0.15, 0.15), ((0.0, "full rank (Gaussian)"),
                                                         (1.0, "rank deficient (orthogonal)"))):
        for index, model in enumerate(models):
            values = [max(c["distance"], FLOOR) for c in cells if c["model"] == model and c["orthogonal"] == fraction]
            if values:
                middle = _geometric_mean(values)
                below, above = max(middle - min(values), 0), max(max(values) - middle, 0)
                right.errorbar(index + shift, middle, yerr=[[below], [above]],
                               fmt="o", color="C0" if fraction == 0.0 else "C1", label=label if index == 0 else None)
    right.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize=7)
    right.set_yscale("log")
    right.set_ylabel("||p(Theta_hat) - p(Theta)||_F (geometric mean, min-max)")
    right.legend(fontsize=7)
    return save(fig, path)
