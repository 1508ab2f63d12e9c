"""No analysis or benchmark writes under ``results/`` unless told ``--committed`` (issue 32, point 2).

``results/`` holds committed tables; only ``python -m results --committed``, ``python -m results.archive`` and
``python -m results.rules --committed`` write there. Every ``python -m analyses.<name>`` and
``python -m benchmarks.<name>`` writes under ``outputs/`` (git-ignored) by default (``lra.run.outputs``).

The main test copies this working tree into a fresh clone, commits it there and runs each command's smallest mode
with the clone as its working directory, then asks git whether anything changed. The commands run one after
another in one Python process (``runpy``, as ``python -m`` runs them), so torch is imported once, not once per
command. Commands with no cheap mode (``analyses.microscope`` and ``analyses.ar_ablation`` train models,
``benchmarks.threads`` starts ``run.py`` processes) have their destination tested directly below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analyses import ar_ablation, listops_root, microscope, slay_poly_factor
from benchmarks import threads
from lra.run.outputs import BENCH, TABLES, Destination
from tests.benchmarks.test_port_step import CONFIG, MODEL
from tests.lra.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]

# (module, arguments): the smallest mode of each command, as their own tests use it
QUICK_KERNEL = ["--quick", "--depth", "3", "--features", "8"]
QUICK_RUN = ["experiment=quick", *TINY, "task.batch_size=8"]


def commands(port: Path) -> list[tuple[str, list[str]]]:
    """Every command run in the clone; ``port`` is a stand-in for the Skyformer port's ``src/`` folder."""
    return [
        ("analyses.slay_poly_factor", ["--quick"]),
        ("analyses.mhla_learning", ["--quick"]),
        ("analyses.mhla_sweep", ["--quick"]),
        ("analyses.ar_scales", ["--quick", "--width", "16"]),
        ("analyses.kernel_approx", QUICK_KERNEL),
        ("analyses.als_starts", [*QUICK_KERNEL, "--starts", "2", "--sweeps", "3"]),
        ("benchmarks.attention", ["--names", "softmax", "linear", "--lengths", "64", "--batch", "1", "--repeats", "1",
                                  "--warmup", "0"]),
        ("benchmarks.port_step", ["--port-src", str(port), "--attentions", "softmax", "--batch", "2", "--length",
                                  "16", "--steps", "1", "--warmup", "0"]),
        ("benchmarks.step", ["--tasks", "listops", "--attentions", "linear", "--batch", "2", "--steps", "1",
                             "--warmup", "0", "--experiment", "quick"]),
        ("benchmarks.run_estimate", ["--attentions", "linear", "--steps", "1", "--warmup", "1", "--every", "2",
                                     "--target-min", "1", *QUICK_RUN, "task.max_steps=20", "task.eval_every=10"]),
        ("benchmarks.step_memory", ["--tasks", "retrieval", "--attentions", "linear", "--batch", "2",
                                    "experiment=quick"]),
        ("benchmarks.loading", ["--steps", "6", *QUICK_RUN]),
        ("benchmarks.ar_step", ["--steps", "2", "model.dim=16", "model.ffn_dim=32", "task.data.train=64",
                                "task.data.val=16", "task.data.test=16"]),
        ("benchmarks.generator", ["--images", "2", "--count", "10"]),
        ("benchmarks.parity", ["--check", "--names", "performer"]),
    ]


# what the commands above write: all under outputs/, never under results/
WRITTEN = ["outputs/tables/slay_poly_factor.csv", "outputs/tables/slay_poly_factor.png",
           "outputs/tables/mhla_teacher.md", "outputs/tables/mhla_memory.png", "outputs/tables/mhla_sweep.md",
           "outputs/tables/ar_scales.md",
           "outputs/tables/kernel_approx.csv", "outputs/tables/kernel_approx.png",
           "outputs/tables/bench/bench_cpu.csv", "outputs/tables/bench/port_step.csv",
           "outputs/tables/bench/step_cpu.csv", "outputs/tables/bench/run_estimate.csv",
           "outputs/tables/bench/step_memory.csv"]

# one command after another in one process, each as `python -m <module> <arguments>` would run it
DRIVER = r"""
import json, runpy, sys, time, traceback
failed = []
for module, argv in json.loads(sys.argv[1]):
    sys.argv = [module, *argv]
    started = time.perf_counter()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) or stop.code is None else f"{stop.code}"
    except Exception:
        traceback.print_exc()
        code = "exception"
    print(f"== {module}: exit {code or 0} in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    if code:
        failed.append(module)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
"""


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)} in {folder}: {done.stderr}"
    return done.stdout


def clone_of_working_tree(dest: Path) -> Path:
    """A clone of ``ROOT`` whose last commit is this working tree (uncommitted edits and new files included)."""
    git(ROOT.parent, "clone", "--quiet", str(ROOT), str(dest))
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, dest / name
        if source.is_symlink() or source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        elif target.is_file():
            target.unlink()  # deleted in the working tree
    git(dest, "add", "-A")
    git(dest, "-c", "user.name=test", "-c", "user.email=test@localhost", "-c", "commit.gpgsign=false",
        "commit", "--quiet", "--allow-empty", "-m", "the working tree under test")
    return dest


def stand_in_port(folder: Path) -> Path:
    """The files ``benchmarks.port_step`` loads from the port (as in tests/benchmarks/test_port_step.py)."""
    (folder / "models").mkdir(parents=True)
    (folder / "config.py").write_text(CONFIG)
    (folder / "models" / "__init__.py").write_text("")
    (folder / "models" / "model_LRA.py").write_text(MODEL)
    return folder


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None,
                    reason="needs git and the git repository this suite lives in")
def test_every_command_leaves_a_clean_clone_clean(tmp_path):
    clone = clone_of_working_tree(tmp_path / "clone")
    assert git(clone, "status", "--porcelain") == "", "the clone is not clean before any command ran"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": str(clone)}
    planned = commands(stand_in_port(tmp_path / "port"))
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(planned)], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=600)
    print("\n".join(line for line in done.stderr.splitlines() if line.startswith("== ")))  # seconds each (-s)
    assert done.returncode == 0, f"a command failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    changed = git(clone, "status", "--porcelain", "--untracked-files=all")
    assert changed == "", f"commands wrote outside outputs/ (git status in the clone):\n{changed}"
    missing = [name for name in WRITTEN if not (clone / name).is_file()]
    assert not missing, f"expected under outputs/, not written: {missing}"


def test_a_destination_defaults_under_outputs_and_goes_to_results_only_when_committed():
    tables = Destination("--tables", "results/tables", "the tables")
    assert tables.folder(None, committed=False) == Path("outputs/tables")
    assert tables.folder(None, committed=True) == Path("results/tables")
    assert tables.folder("elsewhere", committed=False) == Path("elsewhere")
    with pytest.raises(ValueError, match="give one"):
        tables.folder("elsewhere", committed=True)
    assert (TABLES.own, BENCH.own) == (Path("outputs/tables"), Path("outputs/tables/bench"))
    with pytest.raises(ValueError, match="not under results/"):
        Destination("--out", "outputs/x", "files").own  # noqa: B018  (the property raises)


def test_an_analysis_writes_its_tables_under_outputs_unless_committed():
    assert slay_poly_factor.parse_args(["--quick"]).tables == Path("outputs/tables")
    assert slay_poly_factor.parse_args(["--committed"]).tables == Path("results/tables")
    assert ar_ablation.parse_args([]).tables == Path("outputs/tables")  # it trains: not run in the clone
    assert ar_ablation.parse_args(["--committed"]).tables == Path("results/tables")
    assert listops_root.parse_args(["run"]).tables == Path("outputs/tables")  # it needs a trained run's checkpoint
    assert listops_root.parse_args(["run", "--committed"]).tables == Path("results/tables")
    with pytest.raises(SystemExit):
        slay_poly_factor.parse_args(["--committed", "--tables", "mine"])  # argparse: one line, exit 2


def test_the_microscope_renders_under_outputs_unless_committed():  # it trains models: not run in the clone
    assert microscope.parse([])[0]["tables"] == "outputs/tables"
    assert microscope.parse(["--committed"])[0]["tables"] == "results/tables"
    assert microscope.parse(["tables=mine"])[0]["tables"] == "mine"
    assert microscope.parse(["tables="])[0]["tables"] == ""  # not rendered
    with pytest.raises(SystemExit, match="give one"):
        microscope.parse(["tables=mine", "--committed"])


@pytest.mark.parametrize(("argv", "written"), [([], "outputs/tables/bench/threads.csv"),
                                               (["--committed"], "results/tables/bench/threads.csv")])
def test_the_threads_benchmark_writes_under_outputs_unless_committed(tmp_path, monkeypatch, argv, written):
    """Its cases are ``run.py`` processes (seconds each): a stand-in case keeps this to the destination."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(threads, "run_case", lambda attention, steps, n, policy, kind, overrides: {
        "attention": attention, "threads": n, "policy": policy, "load": kind, "choices": "", "wall_s": 0.0,
        "fit_s": 0.0, "status": "ok"})
    assert threads.main(["--loads", "idle", "--threads", "1", "--policies", "PASSIVE", *argv]) == 0
    assert [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()] == [written]
