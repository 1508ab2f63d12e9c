"""ListOps (Nangia & Bowman, arXiv 1804.06028; LRA, arXiv 2011.04006): 10-way classification of
nested MIN/MAX/MED/SM expressions, up to 2000 tokens. Data is generated locally when missing."""

from __future__ import annotations

import logging

from data_prep import listops as generator

from ..generated_data import GeneratedDataModule
from ..module import ClassificationModule
from ..task_facts import generated_before

LRA_COLUMN = 1  # its column in LRA's tables (lra.task_facts)
AVERAGED = True  # in the LRA average
LENGTH_VARYING = True  # sequences of many lengths: task.batching=length_grouped saves padding
GENERATED_BEFORE = {"close_brackets": True}  # data and runs from before the option kept every "]" (lra.task_facts)

log = logging.getLogger(__name__)


class DataModule(GeneratedDataModule):
    """ListOps splits; generated with ``task.data.generate`` (sizes, lengths, seed) when the folder is missing."""

    def rebuild_command(self) -> str:
        return generator.generate_command(self.root, **self.generate_options())

    def generate(self) -> None:
        generator.generate(self.root, **self.generate_options(), log=log.info)

    def stale_data_message(self, manifest: dict) -> str | None:
        made = {**generated_before(self.task.name), **manifest["source"],
                **{k: v["count"] for k, v in manifest["splits"].items()}}
        differ = [f"task.data.generate.{k}={v} (the data has {made.get(k, 'none')})"
                  for k, v in self.generate_options().items() if made.get(k) != v]
        if not differ:
            return None
        return (f"{self.task_dir / 'manifest.json'} records other ListOps than this config asks for: "
                f"{', '.join(differ)}. Point task.data.root elsewhere, or delete that folder to "
                f"regenerate it with: {self.rebuild_command()}")


    def imported_option(self, manifest: dict) -> tuple[str, bool | None]:
        return "close_brackets", manifest["source"].get("close_brackets")  # recorded by imports since 2026-12-06


class LitModule(ClassificationModule):
    """ListOps uses the shared single-sequence classifier unchanged."""
