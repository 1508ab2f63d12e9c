"""Path-X: Pathfinder at 128 x 128 pixels (16384 tokens), hard split (LRA, arXiv 2011.04006).

The same generator and importer as ``python -m data_prep pathfinder`` (see data_prep/pathfinder.py) with
LRA's pathfinder128 parameters; ``--count`` sets the size (default 200000 images, 3.3 GB of tokens).
"""

from __future__ import annotations

import argparse

from data_prep import pathfinder

TASK = "pathx"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m data_prep pathx``."""
    pathfinder.add_arguments(parser, TASK)


def main(args: argparse.Namespace) -> int:
    """Run ``python -m data_prep pathx`` with parsed ``args``."""
    return pathfinder.main(args, TASK)
