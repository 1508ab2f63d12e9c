"""Data a ``data_prep`` generator makes locally (ListOps, Pathfinder, Path-X): generated when missing, and checked
against the options ``task.data.generate`` asks for when present (imported release files too, in what they tell)."""

from __future__ import annotations

import logging
from typing import Any

from data_prep.compact import manifest_path
from data_prep.fetch_sources import OFFICIAL_DIR, fetch_command, official_root
from lra_base.errors import UserError

from .data import CompactDataModule

log = logging.getLogger(__name__)


class GeneratedDataModule(CompactDataModule):
    """Data a ``data_prep`` generator makes locally from ``task.data.generate``: when the folder has a manifest
    it must record data made with these options (imported files: in the option they tell, ``imported_option``);
    when it has none, the data is generated now.

    Subclasses say how to generate (``generate``) and how stored data differs from what the config asks for
    (``stale_data_message``, None when it does not).
    """

    def generate_options(self) -> dict:
        return self.task.data.generate

    def generate(self) -> None:
        raise NotImplementedError

    def stale_data_message(self, manifest: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def imported_option(self, manifest: dict[str, Any]) -> tuple[str, Any] | None:
        """``(option, its value in the imported data)`` for the generator option that shapes the examples and that an
        import can tell (None: the import does not say)."""
        return None

    def imported_data_message(self, manifest: dict[str, Any]) -> str | None:
        """How imported data (the release's files) differs from what ``task.data.generate`` asks for; None when it
        does not, or cannot tell."""
        option, made = self.imported_option(manifest) or (None, None)
        asked = self.generate_options().get(option)
        if made is None or made == asked:
            return None
        return (f"{self.task_dir} holds data imported from {manifest['source'].get('path')} with "
                f"task.data.generate.{option}={made}, but this config asks for {option}={asked}: point "
                f"task.data.root at data made so, or set {option}={made}")

    def prepare_data(self) -> None:
        if manifest_path(self.task_dir).is_file():
            manifest = self.manifest()
            check = self.imported_data_message if "import" in manifest["source"] else self.stale_data_message
            if message := check(manifest):
                raise UserError(message)
            return
        task = self.task.name
        official = official_root(self.root) or (self.root if self.root.name == OFFICIAL_DIR else None)
        if official is not None:  # generated data never lands among official splits, fetched yet or not
            inside = "" if official == self.root else f", inside {official}"
            raise UserError(f"no {task} data under {self.task_dir}{inside}: a folder of the LRA release's official "
                            f"splits (python -m data_prep fetch), where no data is generated. Fetch this task's with: "
                            f"{fetch_command(task, official.parent)} and run with data_dir={official} (no "
                            f"experiment=quick, whose data_dir/quick holds generated data), or set data_dir to "
                            f"generated data")
        log.info("%s data not found under %s; generating it now (%s; the release's official split instead: %s, "
                 "then data_dir=%s)", task, self.task_dir, self.rebuild_command(),
                 fetch_command(task, self.root), self.root / OFFICIAL_DIR)
        self.generate()
        if message := self.stale_data_message(self.manifest()):  # another process published other data meanwhile
            raise UserError(message)
