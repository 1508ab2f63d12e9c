"""A CSV logger that keeps an interrupted run's rows when the run resumes in the same folder.

Lightning's ``CSVLogger`` deletes an existing ``metrics.csv`` when it starts, so a resumed run lost every
metric logged before the interruption. Here the first save after a resume rewrites the file (atomically,
with the umask's mode) with the earlier rows logged before the checkpoint's step (a row's step is the
number of finished steps minus one), then the new ones: the steps redone after the checkpoint are not
duplicated, and rows logged at the checkpoint (its validation) are kept even when the resumed run only tests.
"""

from __future__ import annotations

import csv
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment

from data_prep.atomic import atomic_output


def step_of(row: dict) -> float:
    return float(row.get("step") or "nan")


class KeepingExperimentWriter(ExperimentWriter):
    """``ExperimentWriter`` that reads the previous ``metrics.csv`` instead of deleting it."""

    def __init__(self, log_dir: str, keep_before: int = 0):
        self.keep_before = keep_before
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        self.previous: list[dict] | None = None
        path = Path(self.metrics_file_path)
        if path.is_file():
            with path.open(newline="") as file:
                self.previous = list(csv.DictReader(file))

    def save(self) -> None:
        if self.previous is None or not self.metrics:
            return super().save()
        rows = [row for row in self.previous if step_of(row) < self.keep_before] + self.metrics
        self.previous, self.metrics = None, rows
        self._record_new_keys()
        with atomic_output(self.metrics_file_path, "w") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(rows)
        self.metrics = []


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` whose ``metrics.csv`` survives a resume from ``resume_step`` (see module docstring)."""

    def __init__(self, *args, resume_step: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> KeepingExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = KeepingExperimentWriter(log_dir=self.log_dir, keep_before=self.resume_step)
        return self._experiment
