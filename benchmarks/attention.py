"""Speed and memory of attention mechanisms: ``python -m benchmarks.attention``.

For every mechanism and length: median forward and forward+backward time after warm-up, memory
(peak allocated on CUDA; on the CPU the bytes autograd saves for backward, which is what grows with
n), FLOPs counted by ``torch.utils.flop_counter``, and the fraction of the measured matmul rate they
reach. Each time is also given relative to ``linear`` and ``softmax`` at the same length, in this run.
Writes a CSV and a log-log PNG. ``--paper-fig2`` is the LLoPS paper's Fig. 2 setting (input dimension
128, lengths 1k-10k, p = 2). Timing belongs here, never in tests: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

import attention_zoo
from benchmarks import with_processor, write_csv
from lra.run.allocator import reuse_freed_memory
from lra.run.outputs import BENCH
from lra_base.atomic import save_figure

DEFAULT_NAMES = ["softmax", "linear", "based", "llops", "polysketch", "performer", "cosformer", "nystrom"]
FIG2 = {"names": ["softmax", "linear", "based", "llops", "polysketch"], "head_dim": 128,
        "lengths": [1024, 2048, 4096, 6144, 8192, 10240], "options": {"llops": {"degree": 2}}}


def accumulate_flops(self_shape, a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``self += a @ b`` (2 per multiply-add), batched or not."""
    *batch, m, k = a_shape
    return 2 * m * k * b_shape[-1] * (batch[0] if batch else 1)


# the counter keys formulas by op name, so in-place accumulations (state += phi^T v) would count as 0
IN_PLACE_FLOPS = {torch.ops.aten.baddbmm_: accumulate_flops, torch.ops.aten.addmm_: accumulate_flops}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, device: torch.device, repeats: int, warmup: int) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(device: torch.device, size: int = 2048) -> float:
    """Measured fp32 matmul rate of this device, FLOP/s."""
    a, b = torch.randn(2, size, size, device=device).unbind(0)
    seconds = median_time(lambda: a @ b, device, repeats=5, warmup=2)
    return 2 * size**3 / seconds


def saved_bytes(fn) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs (storage counted once)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def measure(name: str, n: int, args, options: dict, device: torch.device, rate: float) -> dict:
    """One row of the table: times, memory, FLOPs and matmul-rate fraction of ``name`` at length ``n``."""
    module = attention_zoo.build(name, head_dim=args.head_dim, num_heads=args.heads, max_len=n, **options)
    module = module.to(device).train()
    q, k, v = (torch.randn(args.batch, args.heads, n, args.head_dim, device=device) for _ in range(3))
    for t in (q, k, v):
        t.requires_grad_(True)
    mask = torch.ones(args.batch, n, dtype=torch.bool, device=device)

    def forward():
        with torch.no_grad():
            module(q, k, v, key_padding_mask=mask)

    def forward_backward():
        for t in (q, k, v):
            t.grad = None  # as in a model, where q, k, v are intermediates: no accumulation pass
        module(q, k, v, key_padding_mask=mask).sum().backward()

    row = {"attention": name, "length": n, "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim,
           "options": ";".join(f"{k}={v}" for k, v in options.items())}
    row["forward_s"] = median_time(forward, device, args.repeats, args.warmup)
    row["fwd_bwd_s"] = median_time(forward_backward, device, args.repeats, args.warmup)
    with FlopCounterMode(display=False, custom_mapping=IN_PLACE_FLOPS) as counter:
        forward_backward()
    flops = counter.get_total_flops() or float("nan")  # NaN: an op the counter cannot see (CPU SDPA)
    row["fwd_bwd_gflop"] = flops / 1e9
    row["matmul_fraction"] = flops / row["fwd_bwd_s"] / rate
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        forward_backward()
        row["memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        row["memory_mb"] = saved_bytes(lambda: module(q, k, v, key_padding_mask=mask)) / 2**20
    return row


def add_ratios(rows: list[dict]) -> None:
    """Time relative to ``linear`` and ``softmax`` at the same length (when they were measured)."""
    by_key = {(r["attention"], r["length"]): r for r in rows}
    for row in rows:
        for base in ("linear", "softmax"):
            ref = by_key.get((base, row["length"]))
            row[f"vs_{base}"] = row["fwd_bwd_s"] / ref["fwd_bwd_s"] if ref else float("nan")


def plot(frame, path: Path, memory_label: str = "memory (MiB)") -> None:
    """Log-log forward+backward time and memory against length, one line per attention."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, part in frame.groupby("attention", sort=False):
        axes[0].plot(part["length"], part["fwd_bwd_s"], marker="o", label=name)
        axes[1].plot(part["length"], part["memory_mb"], marker="o", label=name)
    for ax, label in zip(axes, ["forward+backward time (s)", memory_label]):
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel=label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.attention", description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="+", default=None, help=f"attentions (default: {' '.join(DEFAULT_NAMES)})")
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="NAME.OPTION=VALUE",
                        help="an attention option, e.g. --set llops.features=64 (repeatable)")
    parser.add_argument("--paper-fig2", action="store_true", help="LLoPS Fig. 2: head_dim 128, 1k-10k, p=2")
    parser.add_argument("--reuse-memory", action="store_true",
                        help="CPU: keep freed memory for reuse (glibc mallopt) instead of a fresh mmap per "
                             "tensor over 32 MB, whose page faults otherwise dominate memory-bound methods")
    BENCH.add_to(parser)
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    return args


def parse_options(settings: list[str], names: list[str]) -> dict[str, dict]:
    """``["llops.features=64"]`` -> ``{"llops": {"features": 64}}`` with int/float/bool values."""
    options: dict[str, dict] = {name: {} for name in names}
    for setting in settings:
        key, _, value = setting.partition("=")
        name, _, option = key.partition(".")
        if not option or name not in options:
            raise SystemExit(f"--set {setting!r}: expected NAME.OPTION=VALUE with NAME in {', '.join(names)}")
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                continue
        options[name][option] = {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value
    return options


def main(argv=None) -> int:
    import pandas as pd

    args = parse_args(argv)
    names = args.names or DEFAULT_NAMES
    options = parse_options(args.set, names)
    if args.paper_fig2:
        names, args.head_dim, args.lengths = FIG2["names"], FIG2["head_dim"], FIG2["lengths"]
        options = {name: {**FIG2["options"].get(name, {}), **options.get(name, {})} for name in names}
    unknown = sorted(set(names) - set(attention_zoo.available()))
    if unknown:
        raise SystemExit(f"unknown attention(s) {', '.join(unknown)}; valid: {', '.join(attention_zoo.available())}")
    device = torch.device(args.device)
    allocator = "default"
    if args.reuse_memory and device.type == "cpu":
        allocator = "reuse (mallopt)" if reuse_freed_memory() else "default (mallopt unavailable)"
    rate = matmul_rate(device)
    print(f"matmul rate on {device}: {rate / 1e9:.1f} GFLOP/s (fp32, threads={torch.get_num_threads()}, "
          f"allocator {allocator})")
    rows = []
    for n in args.lengths:
        for name in names:
            rows.append(measure(name, n, args, options.get(name, {}), device, rate))
            r = rows[-1]
            print(f"{name:>12} n={n:>6}: fwd {r['forward_s'] * 1e3:9.1f} ms  fwd+bwd {r['fwd_bwd_s'] * 1e3:9.1f} ms  "
                  f"mem {r['memory_mb']:8.1f} MiB  {r['matmul_fraction']:.2f} of matmul rate", flush=True)
    add_ratios(rows)
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    frame["allocator"] = allocator
    frame = with_processor(frame, device)  # a GPU's rows name the GPU
    stem = ("fig2" if args.paper_fig2 else f"bench_{args.device}") + ("_reuse" if args.reuse_memory else "")
    write_csv(frame, out, f"{stem}.csv", say=False)
    plot(frame, out / f"{stem}.png", "peak memory (MiB)" if device.type == "cuda" else "saved for backward (MiB)")
    show = ["attention", "length", "fwd_bwd_s", "vs_linear", "vs_softmax", "memory_mb", "matmul_fraction"]
    print(frame[show].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"wrote {out / (stem + '.csv')} and {out / (stem + '.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
