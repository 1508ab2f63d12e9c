"""The layer summary a run prints as training starts: Lightning's, without a FLOPs count it did not make."""

from __future__ import annotations

import logging
from typing import Any

from pytorch_lightning.callbacks import ModelSummary
from pytorch_lightning.utilities.model_summary.model_summary import _format_summary_table

log = logging.getLogger(__name__)


class CountedModelSummary(ModelSummary):
    """Lightning's ``ModelSummary``, whose FLOPs column and total read 0 unless the module sets
    ``example_input_array`` (Lightning counts FLOPs by running it through the model). A run sets none: that forward
    pass would draw dropout masks from torch's RNG and change the run. So the column and the total line are left
    out where nothing was counted, rather than printed as 0 (``benchmarks.flops`` counts a step's FLOPs)."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        counted = total_flops > 0
        columns = summary_data if counted else [column for column in summary_data if column[0] != "FLOPs"]
        table = _format_summary_table(total_parameters, trainable_parameters, model_size, total_training_modes,
                                      total_flops, *columns)
        if not counted:
            table = "\n".join(line for line in table.splitlines() if not line.endswith("Total Flops"))
        log.info("\n" + table)


def summary_callbacks(trainer_arguments: dict[str, Any]) -> tuple[dict[str, Any], list[ModelSummary]]:
    """The Trainer's arguments with Lightning's own summary off, and this one in its place where the run wants a
    summary (``trainer.enable_model_summary``: on unless false, as Lightning reads it; none under ``barebones``)."""
    wanted = trainer_arguments.get("enable_model_summary") is not False and not trainer_arguments.get("barebones")
    return {**trainer_arguments, "enable_model_summary": False}, [CountedModelSummary()] if wanted else []
