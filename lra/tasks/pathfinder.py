"""Pathfinder-32 (Linsley et al., arXiv 1805.08315; LRA, arXiv 2011.04006): do the two circle markers lie
on one dashed path? 32 x 32 grey levels as 1024 tokens (vocab 256), 2 classes, hard split (contour length
14). Data is generated locally (``python -m data_prep pathfinder``) when missing."""

from __future__ import annotations

import logging

from data_prep import pathfinder as generator

from ..data import CompactDataModule
from ..errors import UserError
from ..module import ClassificationModule

log = logging.getLogger(__name__)


class DataModule(CompactDataModule):
    """Generated Pathfinder images (``task.data.generate``: count, seed, workers); every sequence has all
    W*W real tokens, so masks come from lengths (a black pixel is token 0, not padding)."""

    generator_task = "pathfinder"

    def generate_options(self) -> dict:
        return dict(self.task["data"]["generate"])

    def rebuild_command(self) -> str:
        options = self.generate_options()
        return generator.generate_command(self.generator_task, self.root, options["count"], options["seed"])

    def prepare_data(self) -> None:
        options = self.generate_options()
        if (self.task_dir / "manifest.json").exists():
            source = self.manifest()["source"]
            if "import" not in source and any(source.get(k) != options[k] for k in ("count", "seed")):
                raise UserError(f"{self.task_dir} holds images made by `{self.manifest().get('command')}`, but "
                                f"this config asks for `{self.rebuild_command()}`. Point task.data.root "
                                f"elsewhere or delete that folder.")
            return
        log.info("%s data not found under %s; generating it now (%s)", self.generator_task, self.task_dir,
                 self.rebuild_command())
        generator.generate(self.root, self.generator_task, count=options["count"], seed=options["seed"],
                           workers=max(1, int(options.get("workers") or 1)), log=log.info)


class LitModule(ClassificationModule):
    """Pathfinder uses the shared single-sequence classifier unchanged."""
