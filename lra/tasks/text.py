"""Text (LRA, arXiv 2011.04006): IMDB sentiment (Maas et al. 2011) from UTF-8 bytes, up to 4096 bytes,
2 classes. Data is converted from files the user supplies (``python -m data_prep text``)."""

from __future__ import annotations

from data_prep import text as converter

from ..data import CompactDataModule, missing_source_message
from ..module import ClassificationModule

LRA_COLUMN = 2  # its column in LRA's tables (lra.task_facts)
AVERAGED = True  # in the LRA average
LENGTH_VARYING = True  # sequences of many lengths: task.batching=length_grouped saves padding


class DataModule(CompactDataModule):
    """IMDB bytes; refuses data stored shorter than ``task.max_len`` (it would be truncated silently)."""

    def rebuild_command(self) -> str:
        return converter.prepare_command(self.root, max_length=max(converter.MAX_LENGTH, self.task.max_len))

    def missing_data_message(self) -> str:
        return missing_source_message(self.task_dir, converter.SOURCE_HELP, self.rebuild_command())

    def prepare_data(self) -> None:
        super().prepare_data()
        self.refuse_cut_examples("reviews")


class LitModule(ClassificationModule):
    """Text uses the shared single-sequence classifier unchanged."""
