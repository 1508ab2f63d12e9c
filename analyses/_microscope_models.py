"""The microscope's models: find or train a run's checkpoint, load it, read validation batches.

A model is trained only when no finished run of the same settings exists: first the run folders ``run.py`` makes
(``outputs/<task>/<attention>/...``, read only), then the microscope's own (``<models>/<task>/<attention>/``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from lra.run.record_compat import upgrade
from lra.run.run_files import is_set_aside
from lra.run.same_run import HeldRun, changes_from
from lra.settings import Run

NAME = "microscope"
MODELS = Path("outputs/analyses") / NAME / "models"


def finished_run(run: Run, roots: list[Path]) -> Path | None:
    """The best checkpoint of a completed run under ``roots`` that computed what ``run`` computes (its identity and
    its data, ``lra.run.same_run.changes_from``; newest first). A run that ``rerun=true`` set aside
    (``replaced/<time>/``) is not one."""
    records = [p for root in roots if root.is_dir() for p in root.rglob("result.json") if not is_set_aside(p)]
    for path in sorted(records, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("status") != "completed":
            continue
        best = record.get("best_checkpoint")
        config = record.get("config")
        held = HeldRun(True, path, config, record=record, data=record.get("data"))  # the record just read
        if best and isinstance(config, dict) and not changes_from(held, run):
            best = Path(best)
            local = path.parent / "checkpoints" / best.name  # a moved run folder
            for candidate in (best, local):
                if candidate.is_file():
                    return candidate
    return None


def checkpoint_for(run: Run, models: Path = MODELS, outputs: Path = Path("outputs")) -> Path:
    """A finished run's best checkpoint for ``run``, training one in the microscope's folder when there is none."""
    task, attention = run.task.name, run.attention.name
    own = models / task / attention / run.digest()
    found = finished_run(run, [outputs / task / attention, own.parent])
    if found is not None:
        print(f"microscope: {attention}: reusing {found}", file=sys.stderr)
        return found
    from lra.run.train import run as train

    print(f"microscope: {attention}: no finished run of these settings; training one in {own}", file=sys.stderr)
    record = train(run.asked_by(NAME), own)  # marked: results.collect leaves it to the analysis
    if record.get("status") != "completed" or not record.get("best_checkpoint"):
        raise RuntimeError(f"training {attention} in {own} did not complete: {record.get('error')}")
    return Path(record["best_checkpoint"])


def run_accuracy(checkpoint: Path) -> dict[str, float]:
    """``val_acc`` and ``test_acc`` from the record of the run that wrote ``checkpoint`` (empty when none)."""
    record = Path(checkpoint).parent.parent / "result.json"
    try:
        metrics = json.loads(record.read_text(encoding="utf-8")).get("metrics") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: metrics[k] for k in ("val_acc", "test_acc") if isinstance(metrics.get(k), (int, float))}


def load_model(checkpoint: Path) -> tuple[Any, Run]:
    """The LitModule of a Lightning checkpoint (its saved settings and sizes), in eval mode, and its ``Run``."""
    from lra.build import build_model

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    hparams = state.get("hyper_parameters") or {}
    if "cfg" not in hparams:
        raise ValueError(f"{checkpoint}: no saved config (hyper_parameters.cfg); is it an LRA run's checkpoint?")
    run = upgrade(hparams["cfg"])
    model = build_model(run, hparams["vocab_size"], hparams["num_classes"])
    model.load_state_dict(state["state_dict"])
    return model.eval(), run


def validation_batches(run: Run, count: int, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The first ``count`` batches of the validation split, in file order (real inputs, deterministic)."""
    from lra.build import build_data

    datamodule = build_data(run)
    dataset = datamodule.make_dataset(datamodule.data["val"])
    items = [dataset[i] for i in range(min(count * batch_size, len(dataset)))]
    return [datamodule.collate(items[i:i + batch_size]) for i in range(0, len(items), batch_size)]
