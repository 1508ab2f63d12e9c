"""Image (LRA, arXiv 2011.04006): CIFAR-10 (Krizhevsky 2009) as 1024 grey levels, 10 classes.
Data is converted from files the user supplies (``python -m data_prep image``)."""

from __future__ import annotations

from data_prep import image as converter

from ..data import CompactDataModule, missing_source_message
from ..module import ClassificationModule

LRA_COLUMN = 4  # its column in LRA's tables (lra.task_facts)
AVERAGED = True  # in the LRA average
LENGTH_VARYING = False  # every sequence has one length


class DataModule(CompactDataModule):
    """CIFAR-10 grey levels; every sequence has 1024 real tokens (a black pixel is id 0, not padding)."""

    def rebuild_command(self) -> str:
        return converter.prepare_command(self.root)

    def missing_data_message(self) -> str:
        return missing_source_message(self.task_dir, converter.SOURCE_HELP, self.rebuild_command())


class LitModule(ClassificationModule):
    """Image uses the shared single-sequence classifier unchanged."""
