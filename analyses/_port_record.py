"""``result.json`` and ``metrics.csv`` of a Nystromformer-port run (``analyses.nystromformer_code --record``).

The port logs one JSON line per validation (``component`` train or dev, ``train_step_idx``, ``loss``, ``accu``,
``t`` the seconds of that part) and one for its test. The record holds the port's own numbers: ``test_acc`` is its
test accuracy (the best-validation checkpoint on its test loader, ``drop_last``: 1,984 of our 2,000 test trees),
``val_acc`` its best validation (62 random batches of the dev split); and ours beside them: ``test_acc_all``, the
same checkpoint on all 2,000 test trees, and ``majority_acc``. A run whose log lacks its test line, or whose last
validation is before the last step, is ``interrupted`` (rerunning ``--train`` resumes it): ``python -m
results.archive --unfinished`` then keeps its curve so far.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from lra.run.record import INTERRUPTED, RECORD_NAME, now, package_versions, write_json_atomic
from lra_base.atomic import write_atomic

LOG_NAME = "listops_softmax_output.log"
MODEL_NAME = "listops_softmax_output.model"


def read_log(path: Path) -> list[dict[str, Any]]:
    """The port's JSON lines; a line cut mid-write (a killed run) ends the list."""
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            break
    return entries


def metrics_frame(entries: list[dict[str, Any]]) -> pd.DataFrame:
    """Our ``metrics.csv`` columns: one row per validation step with the train and dev means of that interval."""
    rows: dict[int, dict[str, Any]] = {}
    for entry in entries:
        prefix = {"train": "train", "dev": "val"}.get(entry.get("component"))
        if prefix is not None:
            row = rows.setdefault(int(entry["train_step_idx"]), {"step": int(entry["train_step_idx"])})
            row.update({f"{prefix}/acc": entry["accu"], f"{prefix}/loss": entry["loss"]})
    return pd.DataFrame(list(rows.values()), columns=["step", "train/acc", "train/loss", "val/acc", "val/loss"])


def full_split_accuracy(modules: dict[str, Any], config: dict, model_file: Path, examples: list[dict],
                        batch_size: int = 32) -> float:
    """The saved checkpoint's accuracy on every example (the last batch partial, not dropped)."""
    from .nystromformer_code import OurSoftmax, batch_of

    modules["attention"].SoftmaxAttention = OurSoftmax  # equal to the port's (port.json's parity); faster
    model = modules["model_wrapper"].ModelForSC(config).eval()
    model.load_state_dict(torch.load(model_file, map_location="cpu", weights_only=True)["model_state_dict"])
    right = 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            right += int(model(**batch_of(examples[start:start + batch_size]))["accu"].sum())
    return right / len(examples)


def write_record(out: Path, args) -> int:
    """Write ``out/result.json`` and ``out/metrics.csv`` from the run in ``out``; 0, or 1 when it is unfinished."""
    from .nystromformer_code import ATTENTION, TAG, TASK, data_digest, import_port, model_config, port_examples

    facts = json.loads((out / "port.json").read_text())
    if (trained := facts.get("data_manifest_sha256")) != (given := data_digest(args.data_dir)):
        raise SystemExit(f"error: {out} trained on other data than --data-dir {args.data_dir} holds (manifest "
                         f"sha256 {str(trained)[:12]}, there {given[:12]}): give the data it trained on")
    entries = read_log(out / "logs" / LOG_NAME)
    modules = import_port(args.port.resolve())
    training = modules["lra_config"].config[TASK]["training"]
    dev = [e for e in entries if e.get("component") == "dev"]
    tests = [e for e in entries if e.get("component") == "test"]
    last = max((int(e["train_step_idx"]) for e in dev), default=-1)
    done = bool(tests) and last == training["num_train_steps"] - 1
    examples = port_examples(args.data_dir, "test")
    test_labels = np.array([int(e["label"]) for e in examples])
    metrics: dict[str, float] = {
        "majority_acc": float(np.bincount(test_labels).max() / test_labels.size),
    }
    if dev:
        metrics["val_acc"] = max(float(e["accu"]) for e in dev)
    if done:  # an unfinished run has no test number (and a table lists it as unfinished)
        metrics["test_acc"] = float(tests[-1]["accu"])
    config = model_config(modules)
    params = sum(p.numel() for p in modules["model_wrapper"].ModelForSC(config).parameters())
    if done:
        metrics["test_acc_all"] = full_split_accuracy(modules, config, out / "logs" / MODEL_NAME, examples)
    segment = {"from_step": 0, "device": "cpu", "cpu": facts.get("device", "unknown"), "threads": facts.get("threads"),
               "malloc": facts.get("allocator"), "precision": "32-true", "torch": facts.get("torch"), "processes": 1}
    record = {
        "task": TASK, "attention": ATTENTION, "seed": int(facts["seed"]), "tag": TAG, "experiment": None,
        "status": "completed" if done else INTERRUPTED, "error": None, "metrics": metrics,
        "config": {"made_by": "python -m analyses.nystromformer_code", "port_commit": facts.get("port_commit"),
                   "port_files": facts.get("port_files"), "data_manifest_sha256": facts.get("data_manifest_sha256"),
                   "training": training, "parity": facts.get("parity"), "patch": facts.get("patch"),
                   "seed": int(facts["seed"]), "tag": TAG},
        "git_sha": facts.get("git_sha"), "versions": package_versions(), "run_dir": str(out),
        "started_at": facts.get("started_at"), "finished_at": now(), "steps": last + 1,
        "wall_time_s": float(sum(float(e.get("t", 0.0)) for e in entries)), "segments": [segment],
        "params": params,
    }
    if not done:
        record["resumes_with"] = (f"python -m analyses.nystromformer_code --port PORT --seed {int(facts['seed'])} "
                                  f"--train (from logs/resume.pt)")
    write_atomic(out / "metrics.csv", metrics_frame(entries).to_csv(index=False))
    write_json_atomic(out / RECORD_NAME, record)
    print(f"{'completed' if done else 'unfinished (validated to step ' + str(last + 1) + ')'}: {metrics}; "
          f"wrote {out / RECORD_NAME}, {out / 'metrics.csv'}")
    return 0 if done else 1
