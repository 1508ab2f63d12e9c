"""Reading `result.json` files: where they are (`find_records`), whether one is readable and well-formed
(`read_record`, `MalformedRecord`, `analysis_problem`) and what marks two copies of one run (`copy_key`).

`results.collect` turns what is read into the long table; `results.analyses` reads analysis records through here.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from lra.run.record import ANALYSIS_KIND, RECORD_NAME, REQUIRED_FIELDS, AnalysisRecord, RunRecord
from lra.settings import MAX_SEED
from results.protocol import SECTIONS
from results.safe_read import UnsafeFile, read_limited

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # an analysis or published-table name: one plain file stem
REFERENCE_DIR = Path(__file__).with_name("reference")


class MalformedRecord(ValueError):
    """Raised for a `result.json` that is not valid JSON or lacks a required field."""


def records_under(root: Path) -> list[Path]:
    """`result.json` paths in `root` and its folders, except hidden ones (a name starting with "."): a writer's
    staging folder (`results.archive` builds a record and its curve there before they replace the old pair)."""
    under = []
    for dirpath, folders, names in os.walk(root):
        folders[:] = [name for name in folders if not name.startswith(".")]
        if RECORD_NAME in names:
            under.append(Path(dirpath) / RECORD_NAME)
    return under


def find_records(roots: list[str | Path]) -> list[Path]:
    """`result.json` paths under `roots` (`records_under`), root by root (sorted within each), each file once; a
    root that is a file counts as itself."""
    found: dict[Path, Path] = {}
    for root in map(Path, roots):
        if root.is_file():
            found.setdefault(Path(os.path.realpath(root)), root)
        elif root.is_dir():
            under = records_under(root)
            for path in sorted(under):
                found.setdefault(Path(os.path.realpath(path)), path)
    return list(found.values())


def copy_key(record: dict) -> tuple:
    """What a copy of a record (results/runs) shares with its original (outputs), and no other record does."""
    return tuple(str(record.get(key)) for key in ("analysis", "task", "attention", "seed", "tag", "started_at",
                                                      "finished_at"))


def load_json(path: Path) -> object:
    """The JSON value in ``path`` (a regular file below ``RECORD_LIMIT``); MalformedRecord otherwise."""
    try:
        return json.loads(read_limited(path))
    except UnsafeFile as err:
        raise MalformedRecord(f"not read: {err}") from None
    except RecursionError:
        raise MalformedRecord("unreadable JSON: nested too deeply") from None
    except ValueError as err:  # JSONDecodeError, or an integer literal over Python's digit limit
        raise MalformedRecord(f"unreadable JSON: {err}") from None


def config_problem(config: object) -> str | None:
    """Why a record's ``config`` cannot be compared with its protocol: not an object, or a section that is not."""
    if config is None:
        return None
    if not isinstance(config, dict):
        return f"config is {type(config).__name__}, expected an object"
    for section in SECTIONS:
        if config.get(section) is not None and not isinstance(config[section], dict):
            return f"config.{section} is {type(config[section]).__name__}, expected an object"
    return None


def finite_number(value: object) -> bool:
    """Whether ``value`` is an int or float that a float column holds finitely (not bool, nan, inf or 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def number_problem(record: dict) -> str | None:
    """Why ``params``, ``wall_time_s`` or ``tokens_per_s`` cannot go in a table column (a number out of range)."""
    for key in ("params", "wall_time_s", "tokens_per_s"):
        value = record.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # null or text: an empty cell
        if not finite_number(value) or (key == "params" and not 0 <= value < 2**63):
            return f"{key}={first_line(value, 40)} is out of range"
    return None


def read_record(path: Path) -> RunRecord | AnalysisRecord:
    """Load one record and check its required fields; raise MalformedRecord otherwise."""
    record = load_json(path)
    if not isinstance(record, dict):
        raise MalformedRecord(f"top level is {type(record).__name__}, expected an object")
    if problem := config_problem(record.get("config")):
        raise MalformedRecord(problem)
    if record.get("kind") == ANALYSIS_KIND:
        return record  # an analysis record (analyses): tabulated by results.analyses, not here
    absent = [key for key in REQUIRED_FIELDS if record.get(key) in (None, "")]
    if absent:
        raise MalformedRecord(f"missing field(s): {', '.join(absent)}")
    try:
        record["seed"] = int(record["seed"])
    except (TypeError, ValueError, OverflowError) as err:
        raise MalformedRecord(f"seed is not an integer: {first_line(record['seed'], 40)}") from err
    if not 0 <= record["seed"] <= MAX_SEED:
        raise MalformedRecord(f"seed={first_line(record['seed'], 40)} is outside [0, {MAX_SEED}]")
    if not isinstance(record.get("metrics") or {}, dict):
        raise MalformedRecord("metrics is not an object")
    if problem := number_problem(record):
        raise MalformedRecord(problem)
    return record


def analysis_problem(record: AnalysisRecord) -> str | None:
    """Why an analysis record cannot be tabulated (its name would leave the output folder, no rows, ...)."""
    name, published, rows = record.get("analysis"), record.get("published"), record.get("rows")
    if not isinstance(name, str) or not NAME.fullmatch(name) or ".." in name:
        return f"analysis name {name!r} is not a plain name (letters, digits, '_', '-', '.')"
    if not isinstance(rows, list) or not rows or not all(isinstance(row, dict) for row in rows):
        return "rows is not a non-empty list of objects"
    if any(isinstance(value, (dict, list)) for row in rows for value in row.values()):
        return "a row holds a nested value; every cell must be a number, a string or null"
    for field in ("keys", "columns", "notes"):
        value = record.get(field)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{field} is not a list of strings"
    if published is not None and not record.get("keys"):
        return "published is set but keys (the columns to join the published table on) is missing or empty"
    if published is not None and (not isinstance(published, str) or not NAME.fullmatch(published)
                                  or not (REFERENCE_DIR / f"{published}.csv").is_file()):
        return f"published table {published!r} is not one of {REFERENCE_DIR}/*.csv"
    return None


def first_line(text: object, limit: int = 200) -> str:
    """First non-empty line of an error message, cut to `limit` characters."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    line = lines[0] if lines else "(no error message)"
    return line if len(line) <= limit else line[: limit - 1] + "…"
