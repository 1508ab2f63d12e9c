"""Where a run's files are: its curve in its own folder, and its committed copy under ``results/runs/``.

``lra.run.train`` writes a run folder (``result.json``, ``csv/metrics.csv`` from Lightning's CSVLogger, checkpoints);
``python -m results.archive`` commits its record and curve to ``results/runs/<path of the folder below
outputs/>/`` (``metrics.csv`` there). Both the tables (``results``) and the analyses that reuse committed runs
(``analyses._runs``) find files by these rules, so they live here, below both.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ..checks import NAME_MAX, folder_name_problem

COMMITTED_RUNS_NAME = "results/runs"  # the committed records, below the repository (as the tables name their paths)
COMMITTED_RUNS = Path(__file__).resolve().parents[2] / COMMITTED_RUNS_NAME
METRICS_NAMES = ("csv/metrics.csv", "metrics.csv")  # a run folder (Lightning's CSVLogger), an archived run
SET_ASIDE = "replaced"  # rerun=true moves a finished run's outputs to <run folder>/replaced/<time>/ (lra.run.train)


def metrics_path(record_path: str | Path) -> Path | None:
    """The ``metrics.csv`` beside a ``result.json`` (in a run folder or an archived copy), or None."""
    folder = Path(record_path).parent
    return next((folder / name for name in METRICS_NAMES if (folder / name).is_file()), None)


def is_set_aside(record_path: str | Path) -> bool:
    """Whether a ``result.json`` is a set-aside one, ``<run folder>/replaced/<time>/result.json``: the record of a
    run that ``rerun=true`` replaced, never its folder's result (the tables neither average nor archive it)."""
    return Path(os.path.abspath(record_path)).parent.parent.name == SET_ASIDE  # `./result.json` read from inside too


DIGEST_CHARS = 12  # hex digits of the SHA-256 that end a name cut to fit (as lra.identity.digest)


def bounded_name(name: str, limit: int = NAME_MAX) -> str:
    """``name`` as one file or folder name of at most ``limit`` bytes: unchanged when it is one already; else a
    readable prefix (a ``/`` or an unprintable character made ``_``) and ``~`` plus the first ``DIGEST_CHARS`` hex
    digits of the whole name's SHA-256, so two long names never share a folder."""
    if folder_name_problem(name) is None and len(name.encode("utf-8", "surrogatepass")) <= limit:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]
    readable = re.sub(r"/", "_", "".join(c if c.isprintable() else "_" for c in name))
    room = limit - len(digest) - 1
    prefix = readable.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
    return f"{prefix}~{digest}"


def name_part(value: object, field: str) -> str:
    """`value` as one folder name; ValueError naming `field` for `..`, `.`, an empty or absolute name or a `/`."""
    text = str(value)
    if text in ("", ".", "..") or "/" in text or "\0" in text or (os.sep != "/" and os.sep in text):
        raise ValueError(f"{field} {text!r} is not a plain folder name, so the archive path would leave the "
                         f"destination; fix the record's {field} (or archive the run from below an outputs/ folder)")
    return text


def archive_path(run_dir: Path, record: dict, dest_root: Path) -> Path:
    """Where a run folder goes: its path below an `outputs` folder, else task/attention/seed/tag; always a folder
    under `dest_root` (ValueError otherwise)."""
    parts = run_dir.resolve().parts
    if "outputs" in parts:
        below = [name_part(part, "folder name") for part in parts[len(parts) - parts[::-1].index("outputs"):]]
    else:
        seed = record["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed {seed!r} is not an integer; fix the record's seed")
        below = [name_part(record["task"], "task"), name_part(record["attention"], "attention"), f"seed{seed}",
                 name_part(record.get("tag"), "tag")]
    if not below:
        raise ValueError(f"{run_dir} is an outputs folder itself, not a run folder below it")
    dest = dest_root.joinpath(*below)
    root = dest_root.resolve()
    if not dest.resolve().is_relative_to(root):
        raise ValueError(f"{dest} leads outside {root} (through a link); archive into a folder without links")
    return dest
