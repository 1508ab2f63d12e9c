"""The analysis record ``outputs/analyses/<name>/result.json`` (one row per measured cell), and its table.

An analysis writes its record and then asks ``results`` for the table through its public command,
``python -m results <record> --out <tables>``, so ``results`` stays the one package that tabulates and nothing
here imports it (``results`` imports ``lra``, not the other way round); a rebuild of every table from the
records gives the same files.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lra.run.record import ANALYSIS_KIND, RECORD_NAME, AnalysisRecord, git_sha, package_versions, write_json_atomic

ANALYSIS_ROOT = Path("outputs/analyses")
REPO = Path(__file__).resolve().parents[1]


def write_analysis_record(name: str, rows: list[dict[str, Any]], *, keys: list[str], config: dict[str, Any],
                          started: float, published: str | None = None, out_root: str | Path = ANALYSIS_ROOT,
                          notes: list[str] | None = None) -> Path:
    """Write the record atomically and return its path.

    ``keys`` name the columns that identify a row (they join ours with ``results/reference/<published>.csv``);
    ``started`` is the ``time.time()`` at the start of the analysis; ``notes`` are shown under the table.
    """
    record: AnalysisRecord = {
        "kind": ANALYSIS_KIND, "analysis": name, "status": "completed", "keys": list(keys), "rows": rows,
        "columns": list(dict.fromkeys(column for row in rows for column in row)),  # JSON keys get sorted
        "config": config, "published": published, "notes": list(notes or []),
        "git_sha": git_sha(REPO), "versions": package_versions(),
        "wall_time_s": round(time.time() - started, 2),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    path = Path(out_root) / name / RECORD_NAME
    write_json_atomic(path, record)
    return path


def tabulate(name: str, record_path: str | Path, tables: str | Path) -> list[Path]:
    """``python -m results <record_path> --out <tables>``: writes ``<tables>/<name>.{csv,md}``, returns their paths.

    Raises ``RuntimeError`` with the command and its output when it fails or writes no table for ``name``.
    """
    record, out = Path(record_path).resolve(), Path(tables).resolve()
    command = [sys.executable, "-m", "results", str(record), "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    written = [out / f"{name}.csv", out / f"{name}.md"]
    fresh = all(path.is_file() and path.stat().st_mtime_ns >= record.stat().st_mtime_ns for path in written)
    if done.returncode != 0 or not fresh:
        raise RuntimeError(f"`{' '.join(command)}` (in {REPO}) wrote no {name} table:\n{done.stdout}{done.stderr}")
    return [Path(tables) / path.name for path in written]
