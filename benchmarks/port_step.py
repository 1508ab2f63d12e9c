"""Our ListOps training step beside the PyTorch LRA port's: ``python -m benchmarks.port_step --port-src DIR``.

The port is the Skyformer repository's LRA code (pkuzengqi/Skyformer ``src/``, the Nystromformer LRA code
with more attentions). It is imported from ``DIR``, never copied here: export it with
``git -C <mirror> archive HEAD | tar -x -C /tmp/skyformer_port`` and pass ``--port-src /tmp/skyformer_port/src``.

For each mechanism both models take the same training step on the same batch (``--batch`` x ``--length``
real tokens, fp32): forward, cross-entropy, backward, AdamW step. The port's model is its ListOps config
(``config.py``: 2 layers, width 64, 2 heads of 32, FFN 128, dropout 0.1, its attention options, no AMP);
ours is ``python run.py task=listops attention=<a>``'s, in variants:

* ``config``: our ``conf/attention/<a>.yaml`` as it is;
* ``port options``: our mechanism with the port's hyperparameters where they differ (``PORT_OPTIONS``);
* ``checkpoint``: our attention under ``torch.utils.checkpoint``, as the port runs its softmax (here only).

The port's softmax materialises the (B, H, N, N) matrix (with attention dropout): ``--port-accumulate``
splits its batch into micro-batches whose gradients add up to the same step (the port's own ``bz_rate``),
so it stays within a few GiB. Steps alternate between the models; the median of ``--steps`` (after
``--warmup``) is reported with ours / port, in wall time and in this process's CPU time (all threads: on a
machine shared with other jobs, the wall time grows with their load, the CPU time of a one-thread
measurement much less). Writes ``port_step.csv``. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attention_zoo import extra_inputs
from benchmarks import this_processor, with_processor, write_csv
from lra.config import compose_run
from lra.model import AttentionBlock
from lra.run.allocator import reuse_freed_memory
from lra.run.outputs import BENCH
from lra.tasks.listops import LitModule

MECHANISMS = ["softmax", "nystrom", "performer", "linformer", "skyformer"]
# our options that give the port's ListOps hyperparameters (its config.py extra_attn_config), where ours differ
PORT_OPTIONS = {
    "nystrom": ["attention.num_landmarks=128", "attention.conv_kernel_size=0"],  # no conv in its listops config
    "performer": ["attention.features=128"],  # rp_dim 128, FAVOR+ (kernel_type exp)
    "linformer": ["attention.proj_dim=128", "attention.share_kv=true"],  # k 128, one E for keys and values
}
VOCAB, CLASSES = 16, 10  # ListOps' vocabulary (data/listops manifest) and classes


class Checkpointed(nn.Module):
    """An attention recomputed in backward (``torch.utils.checkpoint``), as the port's softmax."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.extra_inputs = extra_inputs(inner)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, **extras) -> Tensor:
        return checkpoint(self.inner, q, k, v, key_padding_mask, use_reentrant=False, **extras)


def load_port(src: str | Path):
    """The port's ``Config`` and ``ModelForSC``, imported from its ``src/`` folder ``src``."""
    src = Path(src).resolve()
    if not (src / "config.py").is_file() or not (src / "models" / "model_LRA.py").is_file():
        raise SystemExit(f"error: {src} is not the port's src/ folder (config.py, models/model_LRA.py)")
    for name in ("config", "models"):
        module = sys.modules.get(name)
        if module is not None and not Path(module.__file__).resolve().is_relative_to(src):
            raise SystemExit(f"error: a module {name!r} from {module.__file__} is already imported")
    sys.path.insert(0, str(src))
    try:  # its attention modules import later from the same packages (already in sys.modules)
        config = importlib.import_module("config")
        model_lra = importlib.import_module("models.model_LRA")
    finally:
        sys.path.remove(str(src))
    return config.Config, model_lra.ModelForSC


def port_config(config: dict, attention: str, length: int) -> dict:
    """The port's ListOps model config for ``attention``, as its main.py builds it (fp32, on the CPU)."""
    cfg = dict(config["lra-listops"]["model"])
    cfg.update(config["lra-listops"]["extra_attn_config"].get(attention, {}))
    cfg.update(mixed_precision=False, attn_type=attention, random_seed=0, device="cpu",
               max_seq_len=2 ** math.ceil(math.log2(length)))  # main.py rounds to a power of two
    return cfg


def our_model(attention: str, length: int, overrides: list[str], checkpointed: bool) -> nn.Module:
    run = compose_run(["task=listops", f"attention={attention}", f"task.max_len={length}", *overrides])
    model = LitModule(run, VOCAB, CLASSES)
    if checkpointed:
        for block in model.encoder.blocks:
            if isinstance(block, AttentionBlock):
                block.attention = Checkpointed(block.attention)
    return model


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0)


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def since(start: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU (this process, all threads) seconds since ``start``."""
    now = clock()
    return now[0] - start[0], now[1] - start[1]


def our_step(model: nn.Module, optimizer, batch: dict[str, Tensor]) -> tuple[float, float]:
    start = clock()
    F.cross_entropy(model(batch), batch["labels"]).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return since(start)


def port_step(model: nn.Module, optimizer, batch: dict[str, Tensor], accumulate: int) -> tuple[float, float]:
    """One step of the port's model; ``accumulate`` micro-batches whose losses sum to the batch mean."""
    start = clock()
    mask = torch.ones_like(batch["tokens"], dtype=torch.float)  # every token real, as ours
    parts = zip(*(t.chunk(accumulate) for t in (batch["tokens"], mask, batch["labels"])))
    for tokens, part_mask, labels in parts:
        (model(tokens, part_mask, labels)["loss"].sum() / len(batch["labels"])).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return since(start)


def compare(attention: str, port: tuple, batch: dict[str, Tensor], args) -> list[dict]:
    """Time the port's step and each variant of ours on ``batch``, alternately; one row per variant."""
    config, model_for_sc = port
    length = batch["tokens"].shape[1]
    torch.manual_seed(0)
    port_model = model_for_sc(port_config(config, attention, length)).train()
    variants = [("config", [], False)]
    if attention in PORT_OPTIONS:
        variants.append(("port options", PORT_OPTIONS[attention], False))
    if attention in args.checkpoint_ours:
        variants.append(("checkpoint", [], True))
    ours = []
    for name, overrides, checkpointed in variants:
        torch.manual_seed(0)
        model = our_model(attention, length, [*overrides, *args.overrides], checkpointed).train()
        ours.append((name, overrides, model, adamw(model)))
    port_opt = adamw(port_model)
    accumulate = args.port_accumulate if attention == "softmax" else 1
    port_times, our_times = [], {name: [] for name, *_ in ours}
    for repeat in range(args.warmup + args.steps):  # alternate, so a change in load hits both
        seconds = port_step(port_model, port_opt, batch, accumulate)
        if repeat >= args.warmup:
            port_times.append(seconds)
        for name, _, model, optimizer in ours:
            seconds = our_step(model, optimizer, batch)
            if repeat >= args.warmup:
                our_times[name].append(seconds)
    rows = []
    for name, overrides, *_ in ours:
        row = {"mechanism": attention, "ours": name, "our_options": " ".join([*overrides, *args.overrides])}
        for i, kind in enumerate(("", "cpu_")):  # medians of wall, then CPU seconds
            port_s = statistics.median(t[i] for t in port_times)
            ours_s = statistics.median(t[i] for t in our_times[name])
            row.update({f"{kind}port_ms": 1e3 * port_s, f"{kind}ours_ms": 1e3 * ours_s,
                        f"{kind}ours_over_port": ours_s / port_s})
        rows.append({**row, "port_accumulate": accumulate, "batch": len(batch["labels"]), "length": length,
                     "threads": torch.get_num_threads(), "steps": args.steps})
    return rows


MEASURED_WITH = ("batch", "length", "steps", "threads", "processor")  # what rows --merge puts side by side share


def unmergeable(path: Path, args: argparse.Namespace) -> str | None:
    """Why the kept rows of ``path`` cannot stand beside this run's (measured with another batch, length, number of
    steps or threads, or on another CPU or one they do not record: one table would read as one measurement); None
    when they can."""
    import pandas as pd

    if not path.exists():
        return None
    kept = pd.read_csv(path, keep_default_na=False)
    kept = kept[~kept.mechanism.isin(args.attentions)]
    now = {"batch": args.batch, "length": args.length, "steps": args.steps, "threads": torch.get_num_threads(),
           "processor": this_processor()}
    differ = [f"{key} {sorted(set(kept[key]))} -> {now[key]}" for key in MEASURED_WITH
              if key in kept and (kept[key] != now[key]).any()]
    if len(kept) and "processor" not in kept:
        differ.append(f"processor not recorded -> {now['processor']}")
    if differ:
        return (f"--merge would put rows measured with other settings beside this run's ({'; '.join(differ)}): "
                f"measure every mechanism again without --merge, or with the kept rows' settings")
    return None


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    parser = argparse.ArgumentParser(prog="python -m benchmarks.port_step", description=__doc__.splitlines()[0])
    parser.add_argument("--port-src", required=True, help="the port's src/ folder (holds config.py, models/)")
    parser.add_argument("--attentions", nargs="+", default=MECHANISMS, choices=MECHANISMS)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=2048, help="a power of two, as the port pads to")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model (median)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--port-accumulate", type=int, default=4,
                        help="micro-batches of the port's softmax step (bounds its n x n memory; 1: none)")
    parser.add_argument("--checkpoint-ours", nargs="*", default=["softmax"],
                        help="mechanisms also timed with our attention under torch.utils.checkpoint")
    parser.add_argument("--default-allocator", action="store_true", help="leave glibc's allocator as it is")
    BENCH.add_to(parser)
    parser.add_argument("--merge", action="store_true",
                        help="keep the other mechanisms' rows of an existing port_step.csv (re-measure some only)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for our models, e.g. model.dropout=0.1")
    args = parser.parse_args(argv)
    args.out = BENCH.choose(parser, args)
    if args.length & (args.length - 1):
        parser.error("--length must be a power of two (the port pads ListOps to 2048)")
    if args.merge and (problem := unmergeable(Path(args.out) / "port_step.csv", args)):
        parser.error(problem)
    port = load_port(args.port_src)
    if not args.default_allocator:
        reuse_freed_memory()  # one process: the port's step gets the same allocator as ours
    generator = torch.Generator().manual_seed(0)
    batch = {"tokens": torch.randint(1, VOCAB, (args.batch, args.length), generator=generator),
             "lengths": torch.full((args.batch,), args.length),
             "labels": torch.randint(0, CLASSES, (args.batch,), generator=generator)}
    rows = []
    for attention in args.attentions:
        for row in compare(attention, port, batch, args):
            rows.append(row)
            print(f"{attention:>9} ours ({row['ours']}): {row['ours_ms']:9.1f} ms, port {row['port_ms']:9.1f} ms, "
                  f"ours / port {row['ours_over_port']:.2f} (CPU time {row['cpu_ours_over_port']:.2f})", flush=True)
    frame = with_processor(pd.DataFrame(rows))
    out = Path(args.out)
    written = frame
    if args.merge and (out / "port_step.csv").exists():
        kept = pd.read_csv(out / "port_step.csv")
        written = pd.concat([kept[~kept.mechanism.isin(args.attentions)], frame], ignore_index=True)
        order = {name: i for i, name in enumerate(MECHANISMS)}
        written = written.sort_values("mechanism", key=lambda c: c.map(order), kind="stable")
    write_csv(written, out, "port_step.csv", say=False)
    shown = frame.drop(columns=["our_options", "batch", "length", "steps", "threads", "processor"])
    print(shown.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(f"wrote {out / 'port_step.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
