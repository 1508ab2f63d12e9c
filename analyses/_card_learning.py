"""The report card's learning: quick ListOps and quick associative recall (MQAR), the mechanism beside baselines.

Every run is an ordinary ``run.py`` run in the folder ``python run.py <its overrides>`` gives it
(``outputs/<task>/<attention>/seed<N>/<tag>[,<overrides>]``, ``lra.run.run_names.run_name``), reused or trained by
``analyses._runs``: a completed run there is reused, an interrupted one resumed, and one committed under
``results/runs/`` (``python -m results.archive``) reused when the folder is empty. So the full card's ListOps runs
are the quick preset's own (``experiment=quick``, whose committed records cover every mechanism of the zoo at seed
0), the run a user made with ``python run.py task=listops attention=X experiment=quick`` is the card's, and a
baseline trained for one card serves the next.

- ListOps: ``experiment=quick`` (lengths 50-200, 1,500 steps); ``--quick``: its first 500 steps.
- MQAR (``task=ar``, Zoology's multi-query associative recall, arXiv 2312.04927): the task's defaults (64 tokens,
  8 pairs, width 64) with the short convolution of Zoology's and BASED's blocks (``model.short_conv=3``; without
  it no mechanism crossed at this scale, docs/analyses.md), AdamW at 3e-3 with 100 warm-up steps (the AR screen's
  best), 1,500 steps; ``--quick``: 500.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from lra.config import compose_run
from lra.run.run_names import run_name
from lra.settings import Run

from ._runs import reusable_record, train_all

RUNS_ROOT = Path("outputs")  # run.py's hydra.run.dir root
TASKS = {
    "listops": (["experiment=quick"], ["experiment=quick", "task.max_steps=500"]),
    "ar": (["model.short_conv=3", "task.optim.lr=0.003", "task.optim.warmup_steps=100", "task.max_steps=1500"],
           ["model.short_conv=3", "task.optim.lr=0.003", "task.optim.warmup_steps=100", "task.max_steps=500"]),
}
TITLES = {"listops": "ListOps quick", "ar": "MQAR (task=ar)"}


def task_overrides(task: str, quick: bool, extra: list[str]) -> list[str]:
    """The overrides of ``task``'s card runs: the preset, then ``extra`` (the un-prefixed words for every task, then
    ``TASK:key=value`` words for this task, prefix taken off); a key given again keeps its last value only, so the
    run's folder name (``run_name``) lists it once."""
    own = [word.split(":", 1)[1] for word in extra if word.startswith(f"{task}:")]
    shared = [word for word in extra if not any(word.startswith(f"{t}:") for t in TASKS)]
    words = [f"task={task}", *TASKS[task][1 if quick else 0], *shared, *own]
    last = {word.split("=", 1)[0].lstrip("+"): i for i, word in enumerate(words)}
    return [word for i, word in enumerate(words) if last[word.split("=", 1)[0].lstrip("+")] == i]


def run_dir(run: Run, overrides: list[str], root: Path = RUNS_ROOT) -> Path:
    """The folder ``python run.py <overrides>`` writes: ``root/<task>/<attention>/seed<N>/<run_name>``
    (Hydra's own overrides, ``hydra.*``, are not task overrides and name nothing)."""
    named = [word for word in overrides if not word.startswith(("hydra.", "+hydra.", "++hydra."))]
    return root / run.task.name / run.attention.name / f"seed{run.seed}" / run_name(str(run.tag), named)


def plan(mechanisms: dict[str, list[str]], seeds: int, quick: bool, extra: list[str],
         root: Path = RUNS_ROOT) -> dict[str, tuple[Run, Path]]:
    """Every run: ``"<task> <attention> seed<N>": (run, folder)``; ``mechanisms`` maps each attention to its
    own overrides (``attention=NAME`` and its ``attention.*`` words)."""
    jobs = {}
    for task in TASKS:
        for attention, own in mechanisms.items():
            for seed in range(seeds):
                overrides = [*task_overrides(task, quick, extra), *own, f"seed={seed}",
                             "trainer.enable_progress_bar=false"]
                run = compose_run(overrides)
                jobs[f"{task} {attention} seed{seed}"] = (run, run_dir(run, overrides, root))
    return jobs


def train(jobs: dict[str, tuple[Run, Path]], workers: int) -> tuple[dict[str, dict], set[str]]:
    """Every job's record (reused, resumed or trained ``workers`` at a time) and the labels that were reused."""
    reused = {label for label, (run, folder) in jobs.items() if reusable_record(run, folder) is not None}
    return train_all(jobs, workers), reused


def learning_rows(jobs: dict[str, tuple[Run, Path]], records: dict[str, dict],
                  reused: set[str]) -> list[dict[str, Any]]:
    """One row per (task, attention): test accuracy (%) mean over the completed seeds and the majority class; std,
    best validation and where each run came from in the detail; a failed run makes the verdict ``fail``."""
    rows = []
    groups: dict[tuple[str, str], list[str]] = {}
    for label in jobs:
        task, attention, _ = label.split(" ")
        groups.setdefault((task, attention), []).append(label)
    for (task, attention), labels in groups.items():
        done = [records[label] for label in labels if records[label].get("status") == "completed"]
        failed = [f"{label}: {records[label].get('status')} {records[label].get('error', '')}".strip()
                  for label in labels if records[label].get("status") != "completed"]
        tests = [100 * r["metrics"]["test_acc"] for r in done]
        steps = jobs[labels[0]][0].task.max_steps
        parts = [f"{len(done)} of {len(labels)} seed(s)"]
        if len(tests) > 1:
            parts.append(f"std {statistics.stdev(tests):.2f}")
        majority = 100 * done[0]["metrics"]["majority_acc"] if done else None
        if done:
            parts.append("best val " + " / ".join(f"{100 * r['metrics']['val_acc']:.2f}" for r in done))
            parts.append(f"wall {sum(r.get('wall_time_s', 0) for r in done) / 60:.1f} min")
        parts.append(f"reused {sum(label in reused for label in labels)} of {len(labels)}")
        if done:  # the code each number came from: a reused run may predate the mechanism's last change
            parts.append("git " + " / ".join(str(r.get("git_sha") or "unknown")[:7] for r in done))
        where = records[labels[0]].get("run_dir") or jobs[labels[0]][1]  # a reused committed run: its copy's
        parts.append(f"folder {where}")
        parts += failed
        rows.append({"section": "learning", "check": f"{TITLES[task]}, {steps:,} steps", "attention": attention,
                     "n": "", "verdict": "fail" if failed else "", "value": statistics.fmean(tests) if tests else None,
                     "measure": "test accuracy %, mean over seeds", "detail": "; ".join(parts), "majority": majority})
    return rows


def plot(rows: list[dict[str, Any]], path) -> None:
    """Test accuracy per task (a panel each), one bar per attention, the majority class dashed."""
    from .plotting import pyplot, save

    plt = pyplot()
    tasks = list(dict.fromkeys(r["check"] for r in rows))
    fig, axes = plt.subplots(1, max(1, len(tasks)), figsize=(4.5 * max(1, len(tasks)), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        part = [r for r in rows if r["check"] == task]
        ax.bar([r["attention"] for r in part], [r["value"] or 0 for r in part],
               color=["tab:blue" if i == 0 else "tab:gray" for i in range(len(part))])
        majority = next((r["majority"] for r in part if r.get("majority") is not None), None)
        if majority is not None:
            ax.axhline(majority, color="black", linestyle="--", linewidth=1, label="majority class")
            ax.legend(fontsize=8)
        ax.set(title=task, ylabel="test accuracy (%)", ylim=(0, 100))
        ax.tick_params(axis="x", labelsize=8)
    save(fig, path)
