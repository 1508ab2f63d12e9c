"""Pathfinder-32 (Linsley et al., arXiv 1805.08315; LRA, arXiv 2011.04006): do the two circle markers lie
on one dashed path? 32 x 32 grey levels as 1024 tokens (vocab 256), 2 classes, hard split (contour length
14; ``task.data.generate.contour_length`` picks the release's easier splits, 6 or 9). Data is generated
locally (``python -m data_prep pathfinder``) when missing."""

from __future__ import annotations

import logging
from pathlib import Path

from data_prep import pathfinder as generator
from data_prep.pathfinder_io import RELEASE_CONTOURS

from ..generated_data import GeneratedDataModule
from ..module import ClassificationModule
from ..task_facts import generated_before

LRA_COLUMN = 5  # its column in LRA's tables (lra.task_facts)
AVERAGED = True  # in the LRA average
LENGTH_VARYING = False  # every sequence has one length
GENERATED_BEFORE = {"contour_length": 14}  # data and runs from before the option: the hard split (lra.task_facts)

log = logging.getLogger(__name__)


class DataModule(GeneratedDataModule):
    """Generated Pathfinder images (``task.data.generate``: count, seed, contour_length, workers); every
    sequence has all W*W real tokens, so masks come from lengths (a black pixel is token 0, not padding)."""

    generator_task = "pathfinder"

    def generate_options(self) -> dict:
        return {**generated_before(self.task.name), **super().generate_options()}  # without one: made before it

    def rebuild_command(self) -> str:
        options = self.generate_options()
        return generator.generate_command(self.generator_task, self.root, options["count"], options["seed"],
                                          options["contour_length"])

    def generate(self) -> None:
        options = self.generate_options()
        generator.generate(self.root, self.generator_task, count=options["count"], seed=options["seed"],
                           contour_length=int(options["contour_length"]),
                           workers=max(1, int(options.get("workers") or 1)), log=log.info)

    def stale_data_message(self, manifest: dict) -> str | None:
        options, made = self.generate_options(), {**generated_before(self.task.name), **manifest["source"]}
        if all(made.get(k) == options[k] for k in ("count", "seed", "contour_length")):
            return None
        return (f"{self.task_dir} holds images made by `{manifest.get('command')}`, but this config asks for "
                f"`{self.rebuild_command()}`. Point task.data.root elsewhere or delete that folder.")


    def imported_option(self, manifest: dict) -> tuple[str, int | None]:
        return "contour_length", RELEASE_CONTOURS.get(Path(str(manifest["source"].get("path", ""))).name)


class LitModule(ClassificationModule):
    """Pathfinder uses the shared single-sequence classifier unchanged."""
