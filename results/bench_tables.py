"""The benchmarks' committed CSVs as markdown: ``python -m results.bench_tables [--bench DIR] [--out FILE]``.

The benchmark tables of docs/benchmarks.md are copied from the file this writes (default
``results/tables/bench/tables.md``), so every number there can be regenerated from
``results/tables/bench/*.csv``; a CSV that is absent leaves its section out. Benchmarks measure;
only this module formats.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from lra.run.record_compat import has_column
from lra_base.atomic import write_atomic
from results.markdown import markdown_table

BENCH_DIR = Path(__file__).resolve().parent / "tables" / "bench"
OWN_OUT = Path("outputs/tables/bench/tables.md")  # the committed CSVs rendered without --committed


def _num(value, digits: int = 1) -> str:
    """"1,234.5"; NaN/None gives ""."""
    return "" if pd.isna(value) else f"{value:,.{digits}f}"


def kernel_table(frame: pd.DataFrame) -> str:
    """``benchmarks.attention``: forward+backward ms per length (rows) and attention (columns)."""
    wide = frame.pivot_table(index="length", columns="attention", values="fwd_bwd_s", aggfunc="first") * 1e3
    names = list(dict.fromkeys(frame["attention"]))
    rows = [[f"{n:,}", *(_num(wide.at[n, a]) for a in names)] for n in wide.index]
    return markdown_table(["n", *names], rows)


def step_table(frame: pd.DataFrame) -> str:
    """``benchmarks.step``: training tokens/s (thousands) and the attention's share of the step."""
    names = list(dict.fromkeys(frame["attention"]))
    rows = []
    for (task, length), part in frame.groupby(["task", "length"], sort=False):
        cells = part.set_index("attention")
        rows.append([f"{task} ({length:,})", *(f"{cells.at[a, 'tokens_per_s'] / 1e3:.1f} "
                                                f"({cells.at[a, 'attention_share']:.0%})" for a in names)])
    return markdown_table(["task (length)", *names], rows)


def run_estimate_table(frame: pd.DataFrame) -> str:
    """``benchmarks.run_estimate``: whole-run estimate, wall and CPU time, beside the matmul floor."""
    wall = "total_min" in frame and "threads" in frame  # CSVs written before the wall clock: CPU time only
    rows = [[r.attention, *([str(r.threads)] if wall else []), _num(r.cpu_step_s, 2), _num(r.cpu_val_pass_s),
             _num(r.cpu_test_pass_s), _num(r.cpu_total_min, 0), *([_num(r.total_min)] if wall else []),
             f"{r.cpu_ratio_to_target:.1f}x"] for r in frame.itertuples()]
    table = markdown_table(["attention", *(["threads"] if wall else []), "step, CPU (s)", "validation pass, CPU (s)",
                            "test pass, CPU (s)", "total, CPU (min)", *(["total, wall (min)"] if wall else []),
                            "CPU total / 60 min"], rows)
    if "floor_min" not in frame:  # CSVs written before the floor columns
        return table
    floor = [[r.attention, _num(r.step_gflop), _num(r.val_pass_gflop, 0), _num(r.total_tflop, 0), _num(r.cpu_gflops),
              _num(r.floor_min), *([f"{r.total_min / r.floor_min:.2f}x"] if wall else [])] for r in frame.itertuples()]
    gemm = frame.gemm_gflops.iloc[0]
    title = f"Matmul floor at {gemm:g} GFLOP/s per core on {frame.cores.iloc[0]} cores:"
    return "\n\n".join([table, title, markdown_table(
        ["attention", "GFLOP a step", "GFLOP a validation pass", "run (TFLOP)", "a step achieves (GFLOP/s per core)",
         "floor (min)", *(["wall / floor"] if wall else [])], floor)])


def run_estimate_versions_table(frame: pd.DataFrame) -> str:
    """``benchmarks.run_estimate_versions``: each version's median whole run and the rounds' paired ratios
    (this tree / the revision)."""
    rows = []
    for attention, part in frame.groupby("attention", sort=False):
        totals = part.pivot_table(index="round", columns="version", values="total_min", aggfunc="first")
        versions = sorted(dict.fromkeys(part["version"]), key=lambda v: v != "this tree")
        ratios = (totals[versions[0]] / totals[versions[1]]).dropna() if len(versions) == 2 else pd.Series()
        for version in versions:
            runs = part[part["version"] == version]
            name = f"{version} ({runs['commit'].iloc[0]})" if "commit" in runs else version
            cells = [attention, name, str(len(runs)), _num(runs.total_min.median()), _num(runs.floor_min.median()),
                     f"{(runs.total_min / runs.floor_min).median():.2f}x", _num(runs.gemm_gflops.median())]
            paired = version == versions[0] and len(ratios)
            rows.append([*cells, f"{ratios.median():.3f} ({ratios.min():.3f}-{ratios.max():.3f})" if paired else ""])
    return markdown_table(["attention", "version", "runs", "total, wall (min)", "work-done floor (min)",
                           "wall / work-done floor",
                           "GEMM (GFLOP/s)", "paired ratio (range)"], rows)


def processes_table(frame: pd.DataFrame) -> str:
    """``benchmarks.processes``: each round's training time both ways and their ratio (DDP / threads), then the
    medians."""
    table = frame.pivot_table(index="round", columns="way", values="fit_s", aggfunc="first")
    table["ratio"] = table["ddp"] / table["threads"]
    rows = [[str(i), _num(r.threads), _num(r.ddp), f"{r.ratio:.2f}x"] for i, r in table.iterrows()]
    middle = table.median()
    rows.append(["median", _num(middle["threads"]), _num(middle["ddp"]), f"{middle['ratio']:.2f}x"])
    return markdown_table(["round", "1 process x 2 threads (s)", "2 DDP processes x 1 thread (s)",
                           "DDP / threads"], rows)


def thread_scaling_table(frame: pd.DataFrame) -> str:
    """``benchmarks.thread_scaling``: each group's median time over rounds at one and at N threads, and the median
    of the rounds' paired speed-ups."""
    table = frame.pivot_table(index=["group", "round"], columns="threads", values="seconds", aggfunc="first")
    one, many = table.columns.min(), table.columns.max()
    table["speed_up"] = table[one] / table[many]
    median = table.groupby(level=0, sort=False).median()
    rows = [[group, _num(r[one], 2), _num(r[many], 2), f"{r['speed_up']:.2f}x"] for group, r in median.iterrows()]
    return markdown_table(["work", f"{one} thread (s)", f"{many} threads (s)", "speed-up (median of rounds)"], rows)


def subnormals_table(frame: pd.DataFrame) -> str:
    """``benchmarks.subnormals``: a training step's median over rounds with subnormals kept and flushed, per model,
    and the ratio kept / flushed."""
    medians = frame.groupby(["model", "subnormals"], sort=False)["step_s"].median().unstack()
    step = frame["checkpoint_step"].iloc[0] if "checkpoint_step" in frame else None
    settings = frame["settings"].fillna("").iloc[0] if "settings" in frame else ""
    rows = [[(f"{model} (step {step:,})" if model == "trained" and step is not None else model)
             + (f", {settings}" if settings else ""),
             _num(r["kept"], 3), _num(r["flushed"], 3), f"{r['kept'] / r['flushed']:.2f}x"]
            for model, r in medians.iterrows()]
    return markdown_table(["model", "kept (s)", "flushed (s)", "kept / flushed"], rows)


def allocator_case(frame: pd.DataFrame) -> str:
    """The line naming what every allocator setting ran (task, attention, threads, steps), from the CSV."""
    if not has_column(frame, "attention"):  # CSVs written before the benchmark recorded its case
        return "Task, attention and threads: not recorded in the CSV (written before the benchmark recorded them)."
    r = frame.iloc[0]
    extra = "" if pd.isna(r.overrides) or not str(r.overrides) else f", {r.overrides}"
    return (f"Each setting: {r.task} / {r.attention}, {r.threads} thread(s), {r.steps} steps, the heap released "
            f"every {r.release_every}{extra}.")


def allocator_table(frame: pd.DataFrame) -> str:
    """``benchmarks.allocator``: a training step's CPU time, page faults and peak resident memory per allocator."""
    ratio = frame["ratio_to_default"] if "ratio_to_default" in frame else pd.Series(float("nan"), frame.index)
    rows = [[r.setting, r.thp_mode, _num(r.step_cpu_s, 3), _num(r.mean_step_cpu_s, 3), _num(r.faults_mib_per_step),
             _num(r.peak_mib, 0), "" if pd.isna(x) else f"{x:.2f}x"] for r, x in zip(frame.itertuples(), ratio)]
    table = markdown_table(["setting", "huge pages", "step CPU, median (s)", "step CPU, mean (s)",
                            "page faults a step (count x 4 KiB, MiB)", "peak resident (MiB)", "mean step / default"],
                           rows)
    return f"{allocator_case(frame)}\n\n{table}"


def port_table(frame: pd.DataFrame) -> str:
    """``benchmarks.port_step``: CPU seconds of one training step, ours beside the PyTorch port's."""
    rows = [[r.mechanism, r.ours if pd.isna(r.our_options) else f"{r.ours}: {r.our_options}",
             _num(r.cpu_port_ms / 1e3, 2), _num(r.cpu_ours_ms / 1e3, 2), _num(r.cpu_ours_over_port, 2),
             _num(r.ours_over_port, 2)] for r in frame.itertuples()]
    return markdown_table(["mechanism", "ours at", "port, CPU (s)", "ours, CPU (s)", "ours / port (CPU)",
                           "ours / port (wall)"], rows)


def memory_table(frame: pd.DataFrame) -> str:
    """``benchmarks.step_memory``: resident memory of a training step, and the peak at the judged batch."""
    rows = []
    for r in frame.itertuples():
        if r.status != "ok":
            rows.append([r.task, r.attention, "", "", "", "", f"no ({r.status})"])
            continue
        at = f"{r.peak_at_fit_mb / 1024:.2f}" + (" (scaled)" if r.extrapolated else "")
        rows.append([r.task, r.attention, str(int(r.batch)), _num(r.rss_before_mb, 0), _num(r.step_peak_mb, 0), at,
                     "yes" if r.fits else "no"])
    batch = int(frame["fit_batch"].iloc[0])
    return markdown_table(["task", "attention", "batch", "before step (MiB)", "step (MiB)",
                           f"peak at batch {batch} (GiB)", "fits"], rows)


def threads_table(frame: pd.DataFrame) -> str:
    """``benchmarks.threads``: the quick job's steps idle and beside one busy process, per thread setting."""
    names = {"suite": "none set: run.py's own (lra.run.threads)", "PASSIVE": "OMP_WAIT_POLICY=PASSIVE",
             "ACTIVE": "OMP_WAIT_POLICY=ACTIVE"}
    chose = has_column(frame, "choices")  # CSVs written before the suite's choices were recorded lack it
    rows = [[r.load, str(r.threads), names.get(r.policy, r.policy.replace("spin:", "GOMP_SPINCOUNT=")),
             _num(r.wall_s), _num(r.fit_s), *([] if not chose else ["" if pd.isna(r.choices) else r.choices]),
             "" if r.status == "ok" else r.status] for r in frame.itertuples()]
    return markdown_table(["machine", "threads", "wait policy", "command (s)", "training (s)",
                           *(["switched to (others' busy cores)"] if chose else []), "status"], rows)


SECTIONS: list[tuple[str, str, Callable[[pd.DataFrame], str]]] = [
    ("bench_cpu.csv", "Attention forward+backward (ms), default allocator", kernel_table),
    ("bench_cpu_reuse.csv", "Attention forward+backward (ms), glibc reuses freed memory", kernel_table),
    ("fig2_reuse.csv", "LLoPS paper Fig. 2 setting (ms)", kernel_table),
    ("step_cpu.csv", "Training step: tokens/s, thousands (attention's share)", step_table),
    ("run_estimate.csv", "Full-protocol ListOps, whole-run estimate", run_estimate_table),
    ("run_estimate_versions.csv",
     "Whole-run estimate, two versions taking turns (medians; ratio: this tree / the revision)",
     run_estimate_versions_table),
    ("port_step.csv", "One ListOps training step beside the PyTorch LRA port", port_table),
    ("step_memory.csv", "Resident memory of a training step", memory_table),
    ("threads.csv", "Quick job, idle and beside one busy process", threads_table),
    ("thread_scaling.csv", "A training step's work at one and two threads (profiler self time, medians over rounds)",
     thread_scaling_table),
    ("processes.csv", "Short full-protocol run: two DDP processes against one process of two threads",
     processes_table),
    ("threads_idle.csv", "Quick job on an idle machine, three runs a case (`--loads idle --repeats 3`)", threads_table),
    ("subnormals.csv", "A trained model's training step with subnormal floats kept and flushed", subnormals_table),
    ("allocator.csv", "A training step under each allocator", allocator_table),
]


def measured_on(frame: pd.DataFrame) -> str:
    """The line under a table naming the processor(s) its rows were measured on (``benchmarks.write_csv``'s
    ``processor``): times compare only within one."""
    recorded = frame["processor"].dropna() if has_column(frame, "processor") else pd.Series(dtype=object)
    if recorded.empty:  # CSVs written before the benchmarks recorded it
        return "Measured on: not recorded (the CSV predates the benchmarks' processor column)."
    names = list(dict.fromkeys(recorded))
    unrecorded = "; some rows do not record theirs" if len(recorded) < len(frame) else ""
    if len(names) == 1:
        return f"Measured on: {names[0]}{unrecorded}."
    return f"Measured on: {'; '.join(names)}{unrecorded} (column `processor`): times compare only within one."


def render(bench: Path) -> str:
    """Every section whose CSV exists under ``bench``, in docs/benchmarks.md's order, each with its CPU(s)."""
    parts = ["# Benchmark tables", "", f"Rendered by `python -m results.bench_tables` from `{bench.name}/*.csv`.", ""]
    for name, title, table in SECTIONS:
        path = bench / name
        if path.exists():
            frame = pd.read_csv(path)
            parts += [f"## {title} (`{name}`)", "", table(frame), "", measured_on(frame), ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m results.bench_tables", description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=BENCH_DIR, help="folder of the benchmarks' CSVs")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"markdown file (default: BENCH/tables.md, but {OWN_OUT} for the committed CSVs "
                             "unless --committed)")
    parser.add_argument("--committed", action="store_true",
                        help="rebuild the committed results/tables/bench/tables.md from the committed CSVs")
    args = parser.parse_args(argv)
    if not any((args.bench / name).exists() for name, _, _ in SECTIONS):
        parser.error(f"no benchmark CSV in {args.bench}; run a benchmark first (see the README's Benchmarks)")
    committed = args.bench.resolve() == BENCH_DIR
    out = args.out or (OWN_OUT if committed and not args.committed else args.bench / "tables.md")
    write_atomic(out, render(args.bench))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
