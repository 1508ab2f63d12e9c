"""The training runs an analysis needs: the one way to reuse a completed run or train it.

A run's folder is ``<root>/<label>-<digest>``, the digest of the run's identity (``Run.digest``: every setting
that changes what it computes), so any changed setting (steps, learning rate, an extra override) gets a folder
of its own and can never resume another setting's checkpoint, while the same setting asked for again finds its
run: ``lra.run.train.run`` returns a completed record as it is and resumes an interrupted one from its ``last.ckpt``.
A completed run archived with ``python -m results.archive`` (its record and curve committed under ``results/runs/``,
no checkpoint) is reused too when its folder here is empty: a fresh clone, or another machine, goes on where the
committed runs stop instead of training them again.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from lra.run.record import RunRecord
from lra.run.run_files import COMMITTED_RUNS, archive_path
from lra.run.same_run import changes_from, held_run, refuse_other_run
from lra.settings import Run


def run_folder(root: str | Path, label: str, run: Run) -> Path:
    """``<root>/<label>-<identity digest of run>``."""
    return Path(root) / f"{label}-{run.digest()}"


def archived_record(run: Run, run_dir: Path) -> RunRecord | None:
    """The committed copy of ``run_dir``'s run (``lra.run.run_files``: ``results/runs/<path below outputs/>``) when it
    completed under ``run``'s settings, its ``run_dir`` pointing at the copy (whose ``metrics.csv`` is the curve);
    else None."""
    try:
        folder = archive_path(Path(run_dir), {}, COMMITTED_RUNS)
    except (KeyError, ValueError):  # not below an outputs/ folder: nothing was archived from it
        return None
    held = held_run(folder)
    if held is None or not held.completed or changes_from(held, run):
        return None
    return {**held.record, "run_dir": str(folder)}


def reusable_record(run: Run, run_dir: Path) -> RunRecord | None:
    """The completed record ``train_or_reuse`` would return without training: ``run_dir``'s own, else (its folder
    empty) the committed copy's; None when it would train."""
    if run.rerun:
        return None
    held = refuse_other_run(run, run_dir)
    if held is not None:  # run_dir: where it is now (a record written in another clone names a folder there)
        return {**held.record, "run_dir": str(run_dir)} if held.completed else None
    return archived_record(run, run_dir)


def train_or_reuse(run: Run, run_dir: Path, threads: int | None = None) -> RunRecord:
    """The completed record in ``run_dir`` when its settings are ``run``'s, or its committed copy's when the folder
    is empty (``archived_record``), else the record of training it there.

    Raises what the training raises, and ``lra_base.errors.UserError`` when ``run_dir`` holds a run of other settings
    (a folder copied or renamed by hand; ``lra.run.same_run``).
    """
    if (record := reusable_record(run, run_dir)) is not None:
        return record
    import torch

    from lra.run.train import run as train

    if threads is not None:
        torch.set_num_threads(threads)
    return train(run, Path(run_dir))


def probe_step_seconds(run: Run, steps: int = 8) -> float:
    """Seconds one training step of ``run`` takes on this thread: ``steps`` plain steps (``lra.build.plain_training``)
    on one training batch after two warm-up steps. Builds the task's data (in memory for ``task=ar``)."""
    import time

    from lra.build import plain_training

    data, _, step = plain_training(run)
    batch = next(iter(data.train_dataloader()))
    for i in range(steps + 2):
        if i == 2:
            start = time.perf_counter()
        step(batch)
    return (time.perf_counter() - start) / steps


def expected_minutes(jobs: dict[str, tuple[Run, Path]], workers: int) -> tuple[float, int]:
    """Expected wall minutes of the runs not completed yet, ``workers`` at a time, and how many there are.

    Each distinct model (its config without the seed) is probed once on one thread (``probe_step_seconds``);
    validation and test add their forward passes (a third of a training step per batch).
    """
    from lra.run.threads import torch_threads

    with torch_threads(1):
        probed: dict[str, float] = {}
        total, todo = 0.0, 0
        for run, run_dir in jobs.values():
            if reusable_record(run, run_dir) is not None:
                continue
            todo += 1
            key = replace(run, seed=None).digest()  # the model, whatever its seed
            if key not in probed:
                probed[key] = probe_step_seconds(run)
            task = run.task
            steps = task.max_steps
            sizes = task.data.own  # data made in memory (ar) names its split sizes; files: unknown here
            eval_batches = sum(-(-int(sizes.get(s, 0)) // task.batch_size) for s in ("val", "test"))
            validations = max(1, steps // task.eval_every)
            total += probed[key] * (steps + eval_batches * validations / 3)
        return total / max(1, min(workers, todo)) / 60, todo


def _train_or_fail(run: Run, run_dir: str) -> RunRecord | dict[str, Any]:
    """One run in a worker process; a failure becomes a ``failed`` record so that the other runs go on."""
    try:
        return train_or_reuse(run, Path(run_dir), threads=1)
    except Exception as err:
        return {"status": "failed", "error": f"{type(err).__name__}: {err}", "metrics": {}}


def train_all(jobs: dict[str, tuple[Run, Path]], workers: int) -> dict[str, RunRecord | dict[str, Any]]:
    """Every ``label: (config, run folder)`` reused or trained, ``workers`` at a time with one thread each."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    done: dict[str, RunRecord | dict[str, Any]] = {}
    waiting, running = iter(jobs.items()), {}
    with ProcessPoolExecutor(max_workers=workers) as pool:  # a run is handed to the pool only when a worker is free,
        while True:  # so that after Ctrl-C no queued run starts (the running ones save their checkpoints and stop)
            for label, (run, run_dir) in itertools.islice(waiting, workers - len(running)):
                running[pool.submit(_train_or_fail, run, str(run_dir))] = label
            if not running:
                return {label: done[label] for label in jobs}
            for future in wait(running, return_when=FIRST_COMPLETED).done:
                done[running.pop(future)] = future.result()
