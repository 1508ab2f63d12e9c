"""Training steps with subnormal floats flushed or kept: ``python -m benchmarks.subnormals --checkpoint CKPT``.

A trained softmax model's attention weights and their gradients fall below float32's smallest normal number,
where x86 cores compute through a slow microcode assist (``lra.run.subnormals``). This times forward and backward of a
run's checkpoint (its saved config and weights, loaded with ``weights_only=True``) and of the same model at
initialisation, in training mode (dropout on), on the first ``--batches`` validation batches (real trees, file
order), in a fresh process for each measurement: the mode must be set before torch's threads start. ``KEY=VALUE``
arguments change the checkpoint's config with its weights kept. The two modes take turns for ``--rounds`` rounds
(ABBA); prints each round's median step and the ratio kept / flushed. Writes ``subnormals.csv``. Needs the task's
data and idle cores. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks import taking_turns, this_processor, write_csv
from lra.run.outputs import BENCH
from results.bench_tables import subnormals_table

ROOT = Path(__file__).resolve().parents[1]
MODES = ("kept", "flushed")


def with_settings(cfg: dict, settings: list[str]) -> dict:
    """``cfg`` (a copy) with each ``dotted.key=value`` of ``settings`` set; the value read as YAML."""
    import copy

    import yaml

    cfg = copy.deepcopy(cfg)
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise ValueError(f"{setting!r}: expected dotted.key=value, e.g. model.attention_dropout=0.0")
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node[part]
        if last not in node:
            raise ValueError(f"{key}: not a setting of the checkpoint's config")
        node[last] = yaml.safe_load(value)
    return cfg


def measure(checkpoint: Path, batches: int, data_dir: str | None, settings: list[str] = ()) -> dict[str, float]:
    """Median seconds of forward and backward for the trained and the freshly initialised model (this process's
    mode as it is); ``settings`` change the checkpoint's config, its weights kept (``model.attention_dropout=0.0``:
    softmax through torch's SDPA kernel instead of the dropout path)."""
    import torch

    from analyses._microscope_models import validation_batches
    from lra.build import build_model
    from lra.run.record_compat import upgrade

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    hparams = state["hyper_parameters"]
    cfg = with_settings(hparams["cfg"], list(settings))
    if data_dir is not None:
        cfg = with_settings(cfg, [f"data_dir={data_dir}", f"task.data.root={data_dir}"])
    run = upgrade(cfg)
    trained = build_model(run, hparams["vocab_size"], hparams["num_classes"])
    trained.load_state_dict(state["state_dict"])
    fresh = build_model(run, hparams["vocab_size"], hparams["num_classes"])
    data = validation_batches(run, batches + 1, run.task.batch_size)
    times = {}
    for name, model in (("trained", trained.train()), ("initialised", fresh.train())):
        steps = []
        for i, batch in enumerate(data):
            start = time.perf_counter()
            loss, _, _ = model.model_step(batch)
            loss.backward()
            if i > 0:  # the first one warms up
                steps.append(time.perf_counter() - start)
        times[name] = statistics.median(steps)
    return times


def checkpoint_step(checkpoint: Path) -> int:
    """The optimizer step a Lightning checkpoint was saved at."""
    import torch

    return int(torch.load(checkpoint, map_location="cpu", weights_only=True)["global_step"])


def one_process(mode: str, args: argparse.Namespace) -> dict[str, float]:
    """``measure`` in a new process whose threads start in ``mode``."""
    command = [sys.executable, "-m", "benchmarks.subnormals", "--worker", mode, "--checkpoint", str(args.checkpoint),
               "--batches", str(args.batches), *(["--data-dir", args.data_dir] if args.data_dir else []),
               *args.settings]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} measurement failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker(args: argparse.Namespace) -> int:
    if args.worker == "flushed":
        from lra.run.subnormals import flush_subnormals

        flush_subnormals()  # before any tensor work: every intra-op thread starts flushed
    print(json.dumps(measure(args.checkpoint, args.batches, args.data_dir, args.settings)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.subnormals", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a run's checkpoint (last.ckpt or best-*)")
    parser.add_argument("--batches", type=int, default=3, help="timed batches after one warm-up (default 3)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", help="as run.py's data_dir (default: the one the checkpoint's config names)")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                        help="changes to the checkpoint's config, weights kept, e.g. model.attention_dropout=0.0")
    BENCH.add_to(parser)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    args.out = BENCH.choose(parser, args)
    if min(args.batches, args.rounds, args.threads) < 1:
        parser.error("--batches, --rounds and --threads must be at least 1")
    if not args.checkpoint.is_file():
        parser.error(f"--checkpoint {args.checkpoint}: no such file (a run folder's checkpoints/last.ckpt)")
    print(f"CPU: {this_processor()}; {args.threads} threads; {args.checkpoint}")
    rows = []
    for i, mode in taking_turns(MODES, args.rounds):
        try:
            times = one_process(mode, args)
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        rows += [{"round": i, "subnormals": mode, "model": model, "step_s": s} for model, s in times.items()]
        print(f"round {i}: {mode:>7}  trained {times['trained']:.3f} s  initialised {times['initialised']:.3f} s")
    frame = pd.DataFrame(rows).assign(checkpoint_step=checkpoint_step(args.checkpoint),
                                      settings=" ".join(args.settings))
    print(subnormals_table(frame))
    write_csv(frame, args.out, "subnormals.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
