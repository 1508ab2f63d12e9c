"""``result.json``: its schema (``RunRecord``, ``AnalysisRecord``), first fields, provenance and JSON writer.

The schema is the one contract between the writers (``lra.run.train``, ``analyses.record``) and the reader
(``results.collect``, ``results.analyses``): a field a writer adds is declared here first. No torch here.
"""

from __future__ import annotations

import json
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from lra_base.atomic import atomic_output, read_regular

if TYPE_CHECKING:
    from ..settings import Run

PACKAGES = ("torch", "pytorch-lightning", "hydra-core", "omegaconf", "torchmetrics", "numpy", "pandas")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
RECORD_NAME = "result.json"
ANALYSIS_KIND = "analysis"  # ``kind`` of an analysis record; a training run's record has no ``kind``
DEFAULT_TAG = "default"  # ``tag`` of a run of no experiment (conf/config.yaml)
INTERRUPTED = "interrupted"  # ``status`` of a run stopped with its last.ckpt saved: rerunning it resumes it


class RequiredFields(TypedDict):
    """The fields without which a run record is refused (``results.collect`` lists it as malformed)."""

    task: str
    attention: str
    seed: int
    status: str  # completed, failed, diverged or interrupted


class RunRecord(RequiredFields, total=False):
    """A training run's ``result.json`` (``lra.run.train``); ``metrics`` are fractions of the best-validation
    checkpoint: ``val_acc``, ``test_acc``, ``test_loss`` and the test set's ``majority_acc``."""

    tag: str | None
    experiment: str | None  # None: no experiment, the repo defaults
    error: str | None
    metrics: dict[str, float | None]
    config: dict[str, Any]  # resolved Hydra config; ``config.analysis`` marks a run made by an analysis
    git_sha: str | None
    versions: dict[str, str]
    run_dir: str
    started_at: str
    finished_at: str
    wall_time_s: float
    fit_time_s: float
    earlier_segments_s: float
    params: int
    tokens_per_s: float | None
    best_checkpoint: str | None
    steps: int
    segments: list[dict[str, Any]]  # each training segment (the first, each resume): from_step and its machine
    data: dict[str, Any]  # the data it trained on: its folder and split files' SHA-256 (lra.data_identity)
    retagged_from: str  # the tag it was made under, where a later commit moved it to the tag of its protocol


class AnalysisRecord(TypedDict, total=False):
    """An analysis's ``result.json`` (``analyses.record``): one row per measured cell; ``keys`` name the columns
    that identify a row and join it with ``results/reference/<published>.csv``."""

    kind: str  # ANALYSIS_KIND
    analysis: str
    status: str
    keys: list[str]
    rows: list[dict[str, Any]]
    columns: list[str]
    config: dict[str, Any]
    published: str | None
    notes: list[str]
    git_sha: str | None
    versions: dict[str, str]
    wall_time_s: float
    finished_at: str


REQUIRED_FIELDS = tuple(RequiredFields.__annotations__)  # in declaration order, for messages


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_record(run: Run, run_dir: Path) -> RunRecord:
    """The fields a run's record has from its start; ``status`` is ``failed`` until the run says otherwise."""
    return {
        "task": run.task.name, "attention": run.attention.name, "seed": run.seed,
        "tag": run.tag, "experiment": run.experiment,  # null: no experiment, the repo defaults
        "status": "failed", "error": None, "metrics": {}, "config": run.config(),
        "git_sha": git_sha(PROJECT_ROOT), "versions": package_versions(), "run_dir": str(run_dir),
        "started_at": now(),
    }


def completed_record(run_dir: Path) -> RunRecord | None:
    """The run folder's record when it says the run completed, else None (also for a link or a FIFO there)."""
    try:
        record = json.loads(read_regular(Path(run_dir) / RECORD_NAME))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("status") == "completed" else None


def git_sha(repo: Path) -> str | None:
    """``HEAD`` of the checkout holding ``repo`` (``+dirty`` when tracked files changed), or None."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages that decide a run's numbers."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON with sorted keys, atomically (``lra_base.atomic``); a link at ``path`` is
    refused (``LinkRefused``), never written through."""
    with atomic_output(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True, default=str)
