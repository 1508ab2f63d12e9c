"""The Nystromformer port's own LRA code trained on our ListOps: ``python -m analyses.nystromformer_code --port DIR``.

The port (mlpen/Nystromformer, ``LRA/code``; docs/protocol.md section 7) reports ListOps 37.10: the test accuracy
of its best-validation checkpoint, one run. This runs that code, as it is, on our generated ListOps, so that its
number and ours come from one split. ``DIR`` is the port's ``LRA/code`` folder (never copied here: export it with
``git -C <mirror> archive HEAD LRA/code | tar -x -C /tmp/nystromformer``). Its listops config is used unchanged
(``lra_config.py``: 2 layers, width 64, lr 1e-4, 1,000 warm-up steps of OneCycleLR, 5,000 steps of batch 32,
validation every 50 steps on 62 batches, the best-validation model tested on the test loader to its end).

Only the edits a CPU needs, listed in the run's ``port.json`` as a patch (``EDITS``):

- device placement: ``.cuda()`` becomes ``.cpu()``, and its device count is at least 1 (its AMP,
  ``torch.cuda.amp``, disables itself without CUDA: the run is fp32);
- its softmax's arithmetic by ours (:class:`OurSoftmax`, ``attention_zoo.softmax`` with the same attention dropout),
  installed by replacing the class its ``attention.py`` builds; ``--parity`` first shows, on one batch with
  dropout off, that the two give the same outputs and gradients to float precision;
- checkpoint-and-resume of its loop (``analyses._port_resume``: model, optimizer, schedule, RNG, the datasets'
  order), so a run survives sessions. Seeds (torch, Python ``random``, numpy) are set before it starts: the port
  sets none.

Our data becomes its input format (``LRA/datasets/listops.py``): pickled lists of ``{"input_ids_0": int32 ids
padded with zeros to 2,048, "label": int}`` per split (train, dev = our val, test), written by this script.
Modes: ``--estimate`` times a few steps and prints the hours a run will take; ``--parity``; ``--train`` (the run;
rerun the same command to resume); ``--record`` writes ``result.json`` from a finished run's log
(``analyses._port_record``).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib
import json
import os
import pickle
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attention_zoo.softmax import SoftmaxAttention
from data_prep.compact import load_split, manifest_path
from lra_base.atomic import atomic_output, write_atomic

from ._port_resume import LoopState, tracked_dataset_class

PORT_FILES = ("run_tasks.py", "model_wrapper.py", "model.py", "attention.py", "dataset.py", "lra_config.py")
TASK, ATTENTION, TAG = "listops", "softmax", "nystromformer_code"
PAD_TO = 2048  # LRA/datasets/listops.py: 2,000 ids + 48 zeros
SPLITS = {"train": "train", "dev": "val", "test": "test"}  # the port's split name -> ours
# (why, the line of run_tasks.py, what replaces it); each line occurs exactly once
EDITS = [
    ("device placement: one device when no GPU (its batch split divides by their count)",
     "device_ids = list(range(torch.cuda.device_count()))",
     "device_ids = list(range(max(torch.cuda.device_count(), 1)))"),
    ("device placement: the CPU", "model = model.cuda()", "model = model.cpu()"),
    ("device placement: the CPU", "batch[key] = batch[key].cuda()", "batch[key] = batch[key].cpu()"),
    ("resume: start after the last saved validation",
     'for train_step_idx in range(training_config["num_train_steps"]):',
     'for train_step_idx in range(PORT_RESUME.start(), training_config["num_train_steps"]):'),
    ("resume: save after each validation",
     'print_summary(summary["dev"], True, train_step_idx)',
     'print_summary(summary["dev"], True, train_step_idx)\n{indent}PORT_RESUME.save(train_step_idx)'),
]


class OurSoftmax(nn.Module):
    """The port's ``SoftmaxAttention(config)`` interface (``Q, K, V`` of (B, H, N, D), a float mask (B, N) with 1
    for real tokens) computed by our softmax, with the port's attention dropout."""

    def __init__(self, config: dict):
        super().__init__()
        self.inner = SoftmaxAttention(dropout=config["attention_dropout"])

    def forward(self, Q: Tensor, K: Tensor, V: Tensor, mask: Tensor) -> Tensor:
        return self.inner(Q, K, V, key_padding_mask=mask > 0.5)


def check_port(port: Path) -> dict[str, str]:
    """SHA-256 of each port file the run uses; SystemExit naming what is missing."""
    missing = [name for name in PORT_FILES if not (port / name).is_file()]
    if missing:
        raise SystemExit(f"error: {port} is not the port's LRA/code folder (missing {', '.join(missing)}); export "
                         "it with: git -C <Nystromformer clone> archive HEAD LRA/code | tar -x -C /tmp/nystromformer")
    return {name: hashlib.sha256((port / name).read_bytes()).hexdigest() for name in PORT_FILES}


def patched_source(port: Path) -> tuple[str, str]:
    """``run_tasks.py`` with ``EDITS`` applied, and the unified diff that lists them."""
    source = (port / "run_tasks.py").read_text()
    lines = source.splitlines(keepends=True)
    for _, old, new in EDITS:
        hits = [i for i, line in enumerate(lines) if line.strip() == old]
        if len(hits) != 1:
            raise SystemExit(f"error: {port / 'run_tasks.py'}: expected one line {old!r}, found {len(hits)}; "
                             "this script knows mlpen/Nystromformer's LRA/code at 5689313")
        line = lines[hits[0]]
        indent = line[: len(line) - len(line.lstrip())]
        lines[hits[0]] = indent + new.format(indent=indent).replace("\n", "\n") + "\n"
    patched = "".join(lines)
    diff = "".join(difflib.unified_diff(source.splitlines(keepends=True), patched.splitlines(keepends=True),
                                        "a/LRA/code/run_tasks.py", "b/LRA/code/run_tasks.py", n=1))
    return patched, diff


def import_port(port: Path) -> dict[str, Any]:
    """The port's modules, imported from ``port`` (their generic names must not be taken already)."""
    names = ("lra_config", "attention", "model", "model_wrapper", "dataset")
    for name in names:
        module = sys.modules.get(name)
        if module is not None and Path(module.__file__).resolve().parent != port.resolve():
            raise SystemExit(f"error: a module {name!r} from {module.__file__} is already imported")
    if str(port) not in sys.path:
        sys.path.insert(0, str(port))
    return {name: importlib.import_module(name) for name in names}


def model_config(modules: dict[str, Any]) -> dict:
    """The port's ListOps softmax config as run_tasks.py builds it (lines 29-34)."""
    config = dict(modules["lra_config"].config[TASK]["model"])
    config.update(modules["lra_config"].config[TASK]["extra_attn_config"][ATTENTION])
    config.update(mixed_precision=True, attn_type=ATTENTION)
    config["max_seq_len"] = int(2 ** np.ceil(np.log2(config["max_seq_len"])))
    return config


def port_examples(data_dir: Path, split: str) -> list[dict]:
    """Our split in the port's format: ``input_ids_0`` int32 padded with zeros to ``PAD_TO``, and ``label``."""
    loaded = load_split(data_dir / TASK, split, rebuild_cmd=f"python -m data_prep listops --out {data_dir}")
    examples = []
    for i in range(len(loaded)):
        ids = np.zeros(PAD_TO, np.int32)
        sequence = loaded.sequence(i)
        if sequence.size > PAD_TO:
            raise SystemExit(f"error: {split} tree {i} has {sequence.size} tokens, more than the port's {PAD_TO}")
        ids[: sequence.size] = sequence
        examples.append({"input_ids_0": ids, "label": np.int64(loaded.labels[i])})
    return examples


def convert(data_dir: Path, folder: Path) -> None:
    """Write the port's ``listops.{train,dev,test}.pickle`` from our data (skipped where already written)."""
    for port_split, ours in SPLITS.items():
        path = folder / f"{TASK}.{port_split}.pickle"
        if not path.exists():
            with atomic_output(path) as f:
                pickle.dump(port_examples(data_dir, ours), f, protocol=4)
            print(f"wrote {path}", flush=True)


def batch_of(examples: list[dict]) -> dict[str, Tensor]:
    """A batch as the port's ``LRADataset.create_inst`` and the default collate make it."""
    ids = torch.tensor(np.stack([e["input_ids_0"] for e in examples]), dtype=torch.long)
    labels = torch.tensor([int(e["label"]) for e in examples])
    return {"input_ids_0": ids, "mask_0": (ids != 0).float(), "label": labels}


def parity(modules: dict[str, Any], data_dir: Path, count: int = 4) -> dict[str, float]:
    """Largest differences between the port's softmax and ours in one model, dropout off, on ``count`` val trees:
    token outputs, class scores, and the parameters' gradients of the summed loss."""
    config = model_config(modules)
    port_class = modules["attention"].SoftmaxAttention
    torch.manual_seed(0)
    theirs = modules["model_wrapper"].ModelForSC(config).eval()
    modules["attention"].SoftmaxAttention = OurSoftmax
    try:
        ours = modules["model_wrapper"].ModelForSC(config).eval()
    finally:
        modules["attention"].SoftmaxAttention = port_class
    ours.load_state_dict(theirs.state_dict())
    batch = batch_of(port_examples(data_dir, "val")[:count])
    found = {}
    outputs = []
    for model in (theirs, ours):
        tokens = model.model(batch["input_ids_0"], batch["mask_0"])
        scores = model.seq_classifer(tokens)
        model.zero_grad()
        nn.functional.cross_entropy(scores, batch["label"], reduction="sum").backward()
        outputs.append((tokens.detach(), scores.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                           if p.grad is not None}))
    (t0, s0, g0), (t1, s1, g1) = outputs
    found["tokens_max_abs"] = float((t0 - t1).abs().max())
    found["scores_max_abs"] = float((s0 - s1).abs().max())
    found["grads_max_abs"] = max(float((g0[n] - g1[n]).abs().max()) for n in g0)
    # relative to the largest gradient: the key biases' gradients are zero up to rounding (softmax ignores them)
    found["grads_max_rel"] = found["grads_max_abs"] / max(float(g.abs().max()) for g in g0.values())
    found["dtype"] = str(s1.dtype)
    return found


def estimate(modules: dict[str, Any], data_dir: Path, steps: int) -> dict[str, float]:
    """Seconds of one training step and one validation batch (batch 32, our softmax, the port's model and
    optimizer), medians of ``steps`` after one warm-up, and the hours of the whole run at that pace."""
    config = model_config(modules)
    training = modules["lra_config"].config[TASK]["training"]
    modules["attention"].SoftmaxAttention = OurSoftmax
    torch.manual_seed(0)
    model = modules["model_wrapper"].ModelForSC(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6)
    batch = batch_of(port_examples(data_dir, "val")[: training["batch_size"]])
    train_s, eval_s = [], []
    for _ in range(steps + 1):
        model.train()
        start = time.perf_counter()
        model(**batch)["loss"].mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        train_s.append(time.perf_counter() - start)
        model.eval()
        start = time.perf_counter()
        with torch.no_grad():
            model(**batch)
        eval_s.append(time.perf_counter() - start)
    train, evaluation = float(np.median(train_s[1:])), float(np.median(eval_s[1:]))
    evals = training["num_train_steps"] // training["eval_frequency"]
    total = training["num_train_steps"] * train + (evals + 1) * training["num_eval_steps"] * evaluation
    return {"train_step_s": train, "eval_batch_s": evaluation, "run_h": total / 3600}


def data_digest(data_dir: Path) -> str:
    """SHA-256 of our ListOps manifest (which names every split's SHA-256)."""
    return hashlib.sha256(manifest_path(data_dir / TASK).read_bytes()).hexdigest()


def start_record(args, port: Path, out: Path, diff: str) -> dict:
    """``port.json``: what the run is; a resume on other data or other port files is refused."""
    facts = {"port_files": check_port(port), "port_commit": args.port_commit, "seed": args.seed,
             "data_manifest_sha256": data_digest(args.data_dir), "patch": diff}
    path = out / "port.json"
    if path.exists():
        old = json.loads(path.read_text())
        for key in ("port_files", "data_manifest_sha256", "seed", "patch"):
            if old.get(key) != facts[key]:
                raise SystemExit(f"error: {out} was started with another {key} ({old.get(key)!r:.80}, now "
                                 f"{facts[key]!r:.80}); resume it with the same port and data, or use another --out")
        return old
    from lra.run.machine import cpu_model, read_cpuinfo
    from lra.run.record import PROJECT_ROOT, git_sha

    facts.update(git_sha=git_sha(PROJECT_ROOT), started_at=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                 threads=args.threads,
                 device=cpu_model(read_cpuinfo()), precision="fp32", torch=torch.__version__,
                 allocator=_allocator())
    write_atomic(path, json.dumps(facts, indent=1) + "\n")
    return facts


def _allocator() -> str:
    from lra.run.allocator import malloc_name

    return malloc_name()


def train(args, port: Path, out: Path) -> int:
    """Run the port's run_tasks.py (patched by ``EDITS``) in ``out``; rerunning resumes. 0 when all steps ran."""
    patched, diff = patched_source(port)
    facts = start_record(args, port, out, diff)
    if "parity" not in facts:
        facts["parity"] = parity(import_port(port), args.data_dir)
        write_atomic(out / "port.json", json.dumps(facts, indent=1) + "\n")
    print(f"parity (dropout off): {facts['parity']}", flush=True)
    for folder in ("code", "datasets", "logs"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    convert(args.data_dir, out / "datasets")
    modules = import_port(port)
    modules["attention"].SoftmaxAttention = OurSoftmax
    datasets: dict[str, Any] = {}
    modules["dataset"].LRADataset = tracked_dataset_class(modules["dataset"].LRADataset, datasets)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": str(port / "run_tasks.py")}
    state = LoopState(namespace, out / "logs", datasets)
    namespace["PORT_RESUME"] = state
    os.chdir(out / "code")  # the port reads ../datasets and writes ../logs
    sys.argv = ["run_tasks.py", "--model", ATTENTION, "--task", TASK]
    exec(compile(patched, str(port / "run_tasks.py"), "exec"), namespace)  # noqa: S102 - the port's loop, as a script
    last = modules["lra_config"].config[TASK]["training"]["num_train_steps"] - 1
    done = state.last_saved == last
    print(f"{'completed' if done else 'stopped'} after step {state.last_saved}", flush=True)
    return 0 if done else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analyses.nystromformer_code", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=Path, required=True, help="the port's LRA/code folder")
    parser.add_argument("--port-commit", default="5689313", help="the port's commit the folder was exported at")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, help="run folder (default outputs/listops/softmax/seed<N>/"
                        "nystromformer_code)")
    parser.add_argument("--threads", type=int, default=1)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--estimate", type=int, metavar="STEPS", help="time STEPS steps and print the run's hours")
    mode.add_argument("--parity", action="store_true", help="the port's softmax against ours, one batch")
    mode.add_argument("--train", action="store_true", help="train (rerun to resume), then test as the port does")
    mode.add_argument("--record", action="store_true", help="write result.json from a finished run")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    port = args.port.resolve()
    check_port(port)
    args.data_dir = args.data_dir.resolve()
    out = (args.out or Path("outputs") / TASK / ATTENTION / f"seed{args.seed}" / TAG).resolve()
    if args.estimate:
        found = estimate(import_port(port), args.data_dir, args.estimate)
        print(json.dumps({**found, "threads": args.threads}))
        return 0
    if args.parity:
        print(json.dumps(parity(import_port(port), args.data_dir)))
        return 0
    if args.train:
        return train(args, port, out)
    from ._port_record import write_record

    return write_record(out, args)


if __name__ == "__main__":
    sys.exit(main())
