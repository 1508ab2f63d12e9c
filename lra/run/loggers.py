"""A CSV logger that writes ``metrics.csv`` atomically and keeps an interrupted run's rows when it resumes.

Lightning's ``CSVLogger`` deletes an existing ``metrics.csv`` when it starts, so a resumed run lost every
metric logged before the interruption, and it appends to the file in place, so a kill mid-write left half a
row. Here every save rewrites the whole file through ``lra_base.atomic`` (the same bytes Lightning's appends give):
after a resume it holds the earlier rows logged before the checkpoint's step (a row's step is the number of
finished steps minus one), then the new ones; the steps redone after the checkpoint are not duplicated, and
rows logged at the checkpoint (its validation) are kept even when the resumed run only tests.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.loggers.logger import rank_zero_experiment

from lra_base.atomic import atomic_output, read_regular


def step_of(row: dict) -> float:
    return float(row.get("step") or "nan")


class KeepingExperimentWriter(ExperimentWriter):
    """``ExperimentWriter`` that keeps the previous ``metrics.csv``'s rows before ``keep_before`` and rewrites
    the whole file atomically at every save."""

    def __init__(self, log_dir: str, keep_before: int = 0):
        self.keep_before = keep_before
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        self.rows: list[dict] = []  # every row the file holds
        path = Path(self.metrics_file_path)
        if path.is_file():
            text = read_regular(path).decode("utf-8")
            self.rows = [row for row in csv.DictReader(io.StringIO(text, newline=""))
                         if step_of(row) < self.keep_before]

    def save(self) -> None:
        if not self.metrics:
            return
        self.rows += self.metrics
        self.metrics_keys = sorted(set(self.metrics_keys).union(*self.rows))
        with atomic_output(self.metrics_file_path, "w") as file:
            writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(self.rows)
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
