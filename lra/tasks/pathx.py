"""Path-X (LRA, arXiv 2011.04006): Pathfinder at 128 x 128, i.e. 16384 tokens (vocab 256), 2 classes, hard
split. Data is generated locally (``python -m data_prep pathx``) when missing; the default 200k images
take a while (see ``python -m benchmarks.generator``)."""

from __future__ import annotations

from . import pathfinder

LRA_COLUMN = 6  # its column in LRA's tables (lra.task_facts)
AVERAGED = False  # left out of the LRA average: no model of the paper solved it
LENGTH_VARYING = False  # every sequence has one length
GENERATED_BEFORE = {"contour_length": 14}  # data and runs from before the option: the hard split (lra.task_facts)


class DataModule(pathfinder.DataModule):
    """Generated Path-X images; options as Pathfinder's."""

    generator_task = "pathx"


class LitModule(pathfinder.LitModule):
    """Path-X uses the shared single-sequence classifier unchanged."""
