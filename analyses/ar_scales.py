"""Feature scales, attention weights and gradients of the AR models of BASED and LLoPS (issue 33, point 2).

``python -m analyses.ar_scales [--variants based llops ...] [--steps 200] [--at 0 100 200] [--quick]``
builds the AR models of ``analyses.ar_ablation``'s wide row (width 96, BASED r = 16, LLoPS p = 4, its lr,
warmup and schedule) and each named variant of them (``VARIANTS``: another m, the embedding init, the short
convolution, unsquared features, ...), then measures at initialisation and after ``--at`` steps of the
ablation's own optimiser (AdamW, linear warmup and decay over ``--schedule-steps``) on one fixed validation
batch, one thread:

- per layer (``analyses._ar_probe``): |q|, |k|, |phi(q)|, |phi(k)|, the denominators (log10 of the mean kernel
  value and its spread over queries, eps's share), how spread the weights are (effective keys, top weight), how
  many of the m features carry them, the previous-token weight, the weight on the queried key and value and the
  preference for the right value among all values, the attention branch against the residual stream, and per
  parameter group (the sketch's own parameters, the q/k projection) the gradient norm and AdamW's step in units
  of the learning rate;
- per model: loss and query accuracy on the batch, training loss since the last probe, the same gradient
  numbers for the embeddings, the v/out projections, the FFNs and the rest.

``--sketch-lr`` gives the attention modules' own parameters another peak learning rate (a diagnostic: does the
sketch learn too fast or too slowly?).

Writes ``outputs/analyses/ar_scales/result.json`` and ``outputs/tables/ar_scales.{md,csv,png}`` (``--committed``:
``results/tables/``). No run folders: nothing here is resumed; the training is a short diagnostic, not a result.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from lra.model import AttentionBlock
from lra.run.outputs import TABLES
from lra.run.threads import torch_threads
from lra.schedules import scheduler
from lra.settings import Optim, Run

from . import ar_ablation
from ._ar_probe import adam_steps, parameter_groups, probe
from .plotting import pyplot, save
from .record import ANALYSIS_ROOT, tabulate, write_analysis_record

NAME = "ar_scales"
LLOPS = {"degree": 4, "features": 64, "square": True}
# name: (method, attention options, extra run.py overrides); "based" and "llops" are the ablation's wide row
VARIANTS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "based": ("based", {"feature_dim": 16}, []),
    "llops": ("llops", LLOPS, []),
    "llops_m256": ("llops", {**LLOPS, "features": 256}, []),
    "llops_embed0.02": ("llops", LLOPS, ["model.embed_init_std=0.02"]),
    "based_embed0.02": ("based", {"feature_dim": 16}, ["model.embed_init_std=0.02"]),
    "llops_unsquared": ("llops", {**LLOPS, "square": False}, []),
    "llops_p2": ("llops", {**LLOPS, "degree": 2}, []),
    "llops_taylor": ("llops", {**LLOPS, "constant": True, "linear_features": 16}, []),
    "llops_constant": ("llops", {**LLOPS, "constant": True}, []),
    "based_conv3": ("based", {"feature_dim": 16}, ["model.short_conv=3"]),  # the blocks of BASED and Zoology
    "llops_conv3": ("llops", LLOPS, ["model.short_conv=3"]),
}
QUICK = ["task.data.train=64", "task.data.val=16", "task.data.test=16"]
LAYER_KEYS = ("sketch", "qk")


def variant_config(name: str, width: int, seed: int, lr: float, extra: list[str]) -> Run:
    """The run ``analyses.ar_ablation`` trains for this variant's row (plus ``extra``)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
    method, options, overrides = VARIANTS[name]
    row = {"method": method, "options": options, "d": width}
    return ar_ablation.run_config(row, seed, lr, [*extra, *overrides])


def build(run: Run, probe_size: int):
    """Data, model (seeded with the run's seed), the fixed probe batch and an endless training-batch iterator."""
    from lra.build import build_data, build_model

    data = build_data(run)
    torch.manual_seed(run.seed)
    model = build_model(run, data.vocab_size, data.num_classes)
    first = next(iter(data.val_dataloader()))
    batch = {key: value[:probe_size] for key, value in first.items()}

    def batches():
        for epoch in itertools.count():
            loader = data.train_dataloader()
            loader.sampler.set_epoch(epoch)  # as Lightning does: each epoch its own order
            yield from loader

    return model, batch, batches()


def optimizer_for(model: torch.nn.Module, optim: Optim, sketch_lr: float | None) -> torch.optim.AdamW:
    """AdamW as ``task.optim`` sets it; ``sketch_lr``: another peak lr for the attention modules' own parameters
    (the sketch Theta, BASED's projections)."""
    blocks = [block for block in model.modules() if isinstance(block, AttentionBlock)]
    sketch = [p for block in blocks for p in block.attention.parameters()]
    ids = {id(p) for p in sketch}
    groups = [{"params": [p for p in model.parameters() if id(p) not in ids]},
              {"params": sketch, "lr": optim.lr if sketch_lr is None else sketch_lr}]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                             weight_decay=optim.weight_decay)


def measure(name: str, run: Run, steps: int, at: list[int], probe_size: int,
            sketch_lr: float | None = None) -> list[dict[str, Any]]:
    """Rows of one variant: per probed step, one row per layer and one ``layer = "model"`` row."""
    model, batch, train = build(run, probe_size)
    optim = run.task.optim
    optimizer = optimizer_for(model, optim, sketch_lr)
    schedule = scheduler(optimizer, optim, run.task.max_steps)
    rows, losses, started = [], [], time.perf_counter()
    for step in range(steps + 1):
        if step in at:
            layers, overall = probe(model, batch)
            overall.update(adam_steps(optimizer, parameter_groups(model)))
            for j, layer in enumerate(layers):
                grads = {f"{kind}_{key}": overall.pop(f"{kind}_{key}{j}", None) for key in LAYER_KEYS
                         for kind in ("grad", "rel", "adam")}
                rows.append({"variant": name, "step": step, "layer": str(j), **layer, **grads})
            train_loss = sum(losses) / len(losses) if losses else None
            rows.append({"variant": name, "step": step, "layer": "model", "train_loss": train_loss, **overall})
            losses = []
            print(f"{name} step {step}: loss {overall['loss']:.3f}, query acc {100 * overall['acc']:.1f}%, "
                  + ", ".join(f"L{j} eff_keys {r['eff_keys']:.2f} feat_eff {r['feat_eff']:.2f} prev {r['prev']:.2f} "
                              f"match_value {r['match_value']:.2f}" for j, r in enumerate(layers))
                  + f" ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        if step == steps:
            break
        loss = model.model_step(next(train))[0]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            print(f"{name}: loss {losses[-1]} at step {step + 1}; stopped", file=sys.stderr)
            break
    return rows


PLOTTED = (("loss", "loss on the probe batch"), ("feat_used", "features in use (fraction of m)"),
           ("eff_keys", "effective keys (fraction)"), ("value_pick", "weight on the queried value / mean on values"))


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Loss, feature use, weight spread and value selection against the training step, one line per variant
    (and layer: solid layer 0, dashed layer 1)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(4 * len(PLOTTED), 3.4))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    for ax, (metric, title) in zip(axes, PLOTTED):
        for n, variant in enumerate(variants):
            layers = ["model"] if metric == "loss" else sorted({r["layer"] for r in rows} - {"model"})
            for layer in layers:
                points = [(r["step"], r[metric]) for r in rows
                          if r["variant"] == variant and r["layer"] == layer and r.get(metric) is not None]
                if points:
                    ax.plot(*zip(*points), marker="o", color=f"C{n}", linestyle="--" if layer == "1" else "-",
                            label=variant if layer in ("model", "0") else None)
        ax.set(title=title, xlabel="step")
    axes[0].legend(fontsize=7)
    return save(fig, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analyses.ar_scales", description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["based", "llops"], choices=list(VARIANTS),
                        help="models to measure (default: the ablation's wide row, based and llops)")
    parser.add_argument("--width", type=int, default=96, help="model width (default 96, the ablation's wide row)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default 3e-3, the ablation's)")
    parser.add_argument("--steps", type=int, default=0, help="training steps after initialisation (default 0)")
    parser.add_argument("--at", type=int, nargs="+", default=None,
                        help="steps to measure at (default: 0 and every 100 up to --steps)")
    parser.add_argument("--sketch-lr", type=float, default=None,
                        help="peak lr of the attention modules' own parameters (default: --lr)")
    parser.add_argument("--schedule-steps", type=int, default=1500,
                        help="length of the lr schedule (default 1500, the ablation's; training stops at --steps)")
    parser.add_argument("--batch", type=int, default=64, help="training batch size (default 64, the task's)")
    parser.add_argument("--probe-size", type=int, default=64, help="validation sequences measured (default 64)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke version (tests)")
    parser.add_argument("--out-root", default=str(ANALYSIS_ROOT), help="the record goes to OUT_ROOT/ar_scales/")
    TABLES.add_to(parser)
    parser.add_argument("overrides", nargs="*", help="extra run.py overrides, e.g. model.dropout=0")
    args = parser.parse_args(argv)
    args.tables = TABLES.choose(parser, args)
    if args.quick:
        args.steps, args.at, args.probe_size, args.batch = 2, [0, 2], 8, 8
    if args.at is None:
        args.at = sorted({0, *range(100, args.steps + 1, 100), args.steps})
    if args.steps < 0 or min(args.at) < 0 or max(args.at) > args.steps:
        parser.error(f"--at {args.at} must lie in [0, --steps={args.steps}]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    extra = [f"task.max_steps={args.schedule_steps}", "task.optim.warmup_steps=100", f"task.batch_size={args.batch}",
             *(QUICK if args.quick else []), *args.overrides]
    print(f"{len(args.variants)} variant(s), {args.steps} training steps each at batch {args.batch}, one thread; "
          f"measured at steps {args.at} on {args.probe_size} validation sequences", file=sys.stderr, flush=True)
    rows, stopped = [], []
    with torch_threads(1):
        for name in args.variants:
            run = variant_config(name, args.width, args.seed, args.lr, extra)
            measured = measure(name, run, args.steps, args.at, args.probe_size, args.sketch_lr)
            rows += measured
            if missing := [s for s in args.at if s <= args.steps and s not in {r["step"] for r in measured}]:
                stopped.append(f"{name}: not measured at steps {missing} (training stopped on a non-finite loss)")
    config = {"variants": {name: list(VARIANTS[name][:2]) + [VARIANTS[name][2]] for name in args.variants},
              "width": args.width, "lr": args.lr, "sketch_lr": args.sketch_lr, "steps": args.steps, "at": args.at,
              "batch": args.batch, "schedule_steps": args.schedule_steps, "probe_size": args.probe_size,
              "seed": args.seed, "overrides": extra}
    sketch = "" if args.sketch_lr is None else f" (the attention's own parameters {args.sketch_lr:g})"
    notes = [f"AR models of analyses.ar_ablation at width {args.width}, lr {args.lr:g}{sketch} (AdamW, warmup 100, "
             f"linear decay over {args.schedule_steps} steps), batch {args.batch}, seed {args.seed}; measured in eval "
             f"mode on {args.probe_size} validation sequences at steps {args.at}. Metrics: analyses/_ar_probe.py.",
             *stopped]
    path = write_analysis_record(NAME, rows, keys=["variant", "step", "layer"], config=config, started=started,
                                 out_root=args.out_root, notes=notes)
    written = tabulate(NAME, path, args.tables)
    written.append(plot(rows, Path(args.tables) / f"{NAME}.png"))
    print(f"record: {path}\nwrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
