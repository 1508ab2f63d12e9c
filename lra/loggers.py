"""A CSV logger that keeps an interrupted run's rows when the run resumes in the same folder.

Lightning's ``CSVLogger`` deletes an existing ``metrics.csv`` when it starts, so a resumed run lost every
metric logged before the interruption. Here the first save after a resume rewrites the file (atomically)
with the earlier rows up to the resumed step, then the new ones; the steps redone after the last
checkpoint are not duplicated.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment


def step_of(row: dict) -> float:
    return float(row.get("step") or "nan")


class KeepingExperimentWriter(ExperimentWriter):
    """``ExperimentWriter`` that reads the previous ``metrics.csv`` instead of deleting it."""

    def _check_log_dir_exists(self) -> None:
        self.previous: list[dict] | None = None
        path = Path(self.metrics_file_path)
        if path.is_file():
            with path.open(newline="") as file:
                self.previous = list(csv.DictReader(file))

    def save(self) -> None:
        if self.previous is None or not self.metrics:
            return super().save()
        first = min(step_of(row) for row in self.metrics)
        rows = [row for row in self.previous if step_of(row) < first] + self.metrics
        self.previous, self.metrics = None, rows
        self._record_new_keys()
        folder = Path(self.metrics_file_path).parent
        with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", newline="", delete=False) as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(file.name, self.metrics_file_path)
        self.metrics = []


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` whose ``metrics.csv`` survives a resume (see module docstring)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> KeepingExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = KeepingExperimentWriter(log_dir=self.log_dir)
        return self._experiment
