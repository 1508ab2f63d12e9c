"""Checkpoint-and-resume for a port's module-level training loop (``analyses.nystromformer_code``).

The Nystromformer port's ``run_tasks.py`` trains in a loop at module level and keeps its state in globals
(``model``, ``optimizer``, ``lr_scheduler``, ``summary``) and in its endless datasets (the example order, shuffled
in place with Python's ``random``, and a cursor). :class:`LoopState` saves all of it after each validation and
restores it before the loop, so a run killed between two validations continues as if it had not stopped: the
same batches, dropout masks and numbers. Two one-line edits of the port's loop call it (``EDITS`` in
``analyses.nystromformer_code``); its datasets are found by wrapping their class, not by editing them.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import torch

from lra_base.atomic import atomic_output

STATE_NAME = "resume.pt"


def tracked_dataset_class(base: type, registry: dict[str, Any]) -> type:
    """A subclass of the port's dataset class that records each instance by the file it loaded."""

    class Tracked(base):
        def __init__(self, file_path, *args, **kwargs):
            super().__init__(file_path, *args, **kwargs)
            registry[Path(file_path).name] = self

    Tracked.__name__ = base.__name__
    return Tracked


def kept_log_bytes(text: str, last_step: int) -> int:
    """Length of the log's prefix whose JSON lines come from validations up to ``last_step`` (later lines, and a
    line cut mid-write, are the steps a resume trains again)."""
    kept = 0
    for line in text.splitlines(keepends=True):
        try:
            entry = json.loads(line)
        except ValueError:
            break
        if not isinstance(entry, dict) or entry.get("train_step_idx", last_step + 1) > last_step:
            break
        kept += len(line.encode())
    return kept


class LoopState:
    """Saves and restores the port loop's state in ``folder / STATE_NAME``; ``namespace`` is the loop's globals."""

    def __init__(self, namespace: dict[str, Any], folder: Path, datasets: dict[str, Any]):
        self.namespace = namespace
        self.path = Path(folder) / STATE_NAME
        self.datasets = datasets  # file name -> the port's dataset object (only the endless ones move)
        self.initial: dict[str, list] = {}
        self.last_saved: int | None = None

    def _endless(self) -> dict[str, Any]:
        return {name: ds for name, ds in sorted(self.datasets.items()) if ds.endless}

    def start(self) -> int:
        """The first training step to run: 0, or the step after the last saved validation (state restored)."""
        self.initial = {name: list(ds.examples) for name, ds in self._endless().items()}
        if not self.path.exists():
            return 0
        state = torch.load(self.path, map_location="cpu", weights_only=True)
        ns = self.namespace
        ns["model"].module.load_state_dict(state["model"])
        ns["optimizer"].load_state_dict(state["optimizer"])
        ns["lr_scheduler"].load_state_dict(state["lr_scheduler"])
        for component, best in state["best_accu"].items():
            ns["summary"][component]["best_accu"] = best
        for name, ds in self._endless().items():
            ds.examples = [self.initial[name][i] for i in state["order"][name].tolist()]
            ds.curr_idx = state["cursor"][name]
        torch.set_rng_state(state["torch_rng"])
        version, words, gauss = state["python_rng"]
        random.setstate((version, tuple(words), gauss))
        log = Path(ns["log_f_path"])
        if log.exists():
            os.truncate(log, kept_log_bytes(log.read_text(errors="replace"), state["step"]))
        self.last_saved = state["step"]
        print(f"resumed from {self.path} after step {state['step']}", flush=True)
        return state["step"] + 1

    def save(self, step: int) -> None:
        """Write the state after the validation at ``step`` (atomically: a kill mid-write keeps the last one)."""
        ns = self.namespace
        positions = {name: {id(example): i for i, example in enumerate(examples)}
                     for name, examples in self.initial.items()}
        order = {name: torch.tensor([positions[name][id(e)] for e in ds.examples])
                 for name, ds in self._endless().items()}
        version, words, gauss = random.getstate()
        state = {
            "step": step,
            "model": ns["model"].module.state_dict(),
            "optimizer": ns["optimizer"].state_dict(),
            "lr_scheduler": ns["lr_scheduler"].state_dict(),
            "best_accu": {c: float(s["best_accu"]) for c, s in ns["summary"].items()},
            "order": order,
            "cursor": {name: int(ds.curr_idx) for name, ds in self._endless().items()},
            "torch_rng": torch.get_rng_state(),
            "python_rng": (version, list(words), gauss),
        }
        ns["log_f"].flush()
        with atomic_output(self.path) as f:
            torch.save(state, f)
        self.last_saved = step

