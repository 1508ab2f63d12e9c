"""The microscope's models: find or train a run config's checkpoint, load it, read validation batches.

A model is trained only when no finished run of the same config exists: first the run folders ``run.py`` makes
(``outputs/<task>/<attention>/...``, read only), then the microscope's own (``<models>/<task>/<attention>/``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from lra.identity import differences, identity_digest

NAME = "microscope"
MODELS = Path("outputs/analyses") / NAME / "models"


def finished_run(cfg: dict[str, Any], roots: list[Path]) -> Path | None:
    """The best checkpoint of a completed run under ``roots`` that computed what ``cfg`` computes (its identity,
    ``lra.identity``; newest first)."""
    records = [p for root in roots if root.is_dir() for p in root.rglob("result.json")]
    for path in sorted(records, key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("status") != "completed":
            continue
        best = record.get("best_checkpoint")
        if best and not differences(record.get("config") or {}, cfg):
            best = Path(best)
            local = path.parent / "checkpoints" / best.name  # a moved run folder
            for candidate in (best, local):
                if candidate.is_file():
                    return candidate
    return None


def checkpoint_for(cfg: dict[str, Any], models: Path = MODELS, outputs: Path = Path("outputs")) -> Path:
    """A finished run's best checkpoint for ``cfg``, training one in the microscope's folder when there is none."""
    task, attention = cfg["task"]["name"], cfg["attention"]["name"]
    own = models / task / attention / identity_digest(cfg)
    found = finished_run(cfg, [outputs / task / attention, own.parent])
    if found is not None:
        print(f"microscope: {attention}: reusing {found}", file=sys.stderr)
        return found
    from lra.train import run

    print(f"microscope: {attention}: no finished run of this config; training one in {own}", file=sys.stderr)
    record = run({**cfg, "analysis": NAME}, own)  # marked: results.collect leaves it to the analysis
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


def load_model(checkpoint: Path):
    """The LitModule of a Lightning checkpoint (its saved config and sizes), in eval mode, and its config."""
    from lra.build import build_model

    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    hparams = state.get("hyper_parameters") or {}
    if "cfg" not in hparams:
        raise ValueError(f"{checkpoint}: no saved config (hyper_parameters.cfg); is it an LRA run's checkpoint?")
    cfg = hparams["cfg"]
    model = build_model(cfg, hparams["vocab_size"], hparams["num_classes"])
    model.load_state_dict(state["state_dict"])
    return model.eval(), cfg


def validation_batches(cfg: dict[str, Any], count: int, batch_size: int) -> list[dict[str, torch.Tensor]]:
    """The first ``count`` batches of the validation split, in file order (real inputs, deterministic)."""
    from lra.build import build_data

    datamodule = build_data(cfg)
    dataset = datamodule.make_dataset(datamodule.data["val"])
    items = [dataset[i] for i in range(min(count * batch_size, len(dataset)))]
    return [datamodule.collate(items[i:i + batch_size]) for i in range(0, len(items), batch_size)]
