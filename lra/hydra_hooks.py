"""Hydra hooks of ``run.py``: the run-folder name resolver and the callback that files a sweep's multirun.yaml.

Importing this module registers the resolver, which ``conf/config.yaml`` uses in ``hydra.run.dir``.
"""

from __future__ import annotations

import contextlib
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf


def run_name(tag: str, overrides: str) -> str:
    """``<tag>``, or ``<tag>,<overrides>`` for a run with other settings: a sibling of the plain run's folder,
    never a folder inside it."""
    return f"{tag},{overrides}" if overrides else str(tag)


if not OmegaConf.has_resolver("run_name"):
    OmegaConf.register_new_resolver("run_name", run_name)


def file_sweep_config(sweep_dir: Path) -> None:
    """Move ``<sweep_dir>/multirun.yaml`` to ``<sweep_dir>/multirun/<time>.yaml`` (one file per sweep)."""
    source = sweep_dir / "multirun.yaml"
    target = sweep_dir / "multirun" / f"{datetime.now():%Y-%m-%d_%H-%M-%S}.yaml"
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # parallel jobs: the first one moves it
            os.replace(source, target)


class FileSweepConfig(Callback):
    """Hydra writes a sweep's config to ``<sweep.dir>/multirun.yaml``, at the top of ``outputs/``, where the
    next sweep overwrites it; this files it under ``multirun/`` once the first job starts."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:
            file_sweep_config(Path(config.hydra.sweep.dir))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        file_sweep_config(Path(config.hydra.sweep.dir))
