"""Finished cells of an analysis kept on disk, so an interrupted analysis resumes without redoing them.

A cell is one unit of measurement (say one layer and degree of ``kernel_approx``) whose result is a JSON
value. ``CellCache`` stores them in ``<folder>/cells.partial.json`` together with a digest of the settings
they were measured with (``lra.identity.digest``): a cache of other settings is ignored (and replaced), never
mixed in. Each ``put`` rewrites the file atomically, so a kill loses at most the cell in progress.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lra.identity import digest
from lra.run.record import write_json_atomic

FILE = "cells.partial.json"


class CellCache:
    """Finished cells measured with ``settings``: ``measured(key, measure)`` reuses or measures and stores one."""

    def __init__(self, folder: str | Path, settings: dict[str, Any]):
        self.path = Path(folder) / FILE
        self.digest = digest(settings)
        self.cells: dict[str, Any] = {}
        if self.path.is_file():
            stored = json.loads(self.path.read_text(encoding="utf-8"))
            if stored.get("settings_digest") == self.digest:
                self.cells = stored["cells"]

    def __contains__(self, key: str) -> bool:
        return key in self.cells

    def measured(self, key: str, measure: Callable[[], Any]) -> tuple[Any, str]:
        """The cell ``key``, measured by ``measure()`` and stored unless finished earlier; with "reused" or its
        seconds, for the progress line."""
        if key in self.cells:
            return self.cells[key], "reused"
        started = time.perf_counter()
        self.put(key, measure())
        return self.cells[key], f"{time.perf_counter() - started:.0f} s"

    def put(self, key: str, value: Any) -> None:
        self.cells[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"settings_digest": self.digest, "cells": self.cells})

    def clear(self) -> None:
        """Forget the cells once the analysis has written its record."""
        self.path.unlink(missing_ok=True)
        self.cells = {}


def print_plan(name: str, todo: int, done: int, minutes: float, detail: str = "") -> None:
    """One line before an analysis starts: cells to measure, cells reused, expected minutes."""
    reused = f", {done} finished earlier and reused" if done else ""
    print(f"{name}: {todo} cells to measure{reused}; expected ~{minutes:.0f} min on one idle core"
          + (f" ({detail})" if detail else ""), file=sys.stderr, flush=True)
