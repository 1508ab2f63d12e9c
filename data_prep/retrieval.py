"""AAN citation pairs as bytes for LRA Retrieval (Radev et al. 2013; LRA, arXiv 2011.04006): 2 classes.

Source: the LRA release ``tsv_data/new_aan_pairs.{train,eval,test}.tsv`` (train/val/test). Each line has
exactly 5 tab-separated fields ``label id1 id2 text1 text2`` with a float label 0/1, no header and no
quoting (LRA lra_benchmarks/matching/input_pipeline.py reads them with quoting off). Texts become bytes
(data_prep.byte_tokens: byte b -> id b + 1), each document kept up to ``--max-length`` bytes (4000).

Output per split: ``tokens``/``offsets`` for document 1, ``tokens2``/``offsets2`` for document 2 and
``labels``, in file order; the manifest entry's max_length/min_length describe document 1 and
max_length2/min_length2 document 2.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path

import numpy as np

from data_prep.byte_tokens import VOCAB, BytePacker
from data_prep.compact import DataError, fail, pack_sequences, require_examples, write_arrays, write_manifest
from data_prep.source_files import open_source
from data_prep.staging import staged_task_dir

TASK = "retrieval"
NUM_CLASSES = 2
MAX_LENGTH = 4000
TSV_LIMIT = 16 << 30  # bytes per TSV file: a sanity bound (a file is streamed line by line, never held whole)
SPLIT_FILES = {
    "train": "new_aan_pairs.train.tsv",
    "val": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}
SOURCE_HELP = (
    "the AAN pairs of the LRA release: tsv_data/new_aan_pairs.train.tsv, new_aan_pairs.eval.tsv and "
    "new_aan_pairs.test.tsv, inside lra_release.gz (https://storage.googleapis.com/long-range-arena/"
    "lra_release.gz, about 7.7 GB; unpacks to lra_release/lra_release/)"
)


def prepare_command(out: Path | str, source: Path | str = "PATH", max_length: int = MAX_LENGTH) -> str:
    """The ``python -m data_prep retrieval`` command that converts ``source`` into ``out/retrieval/``."""
    words = ["python", "-m", "data_prep", TASK, "--source", str(source), "--out", str(out)]
    return shlex.join(words + (["--max-length", str(max_length)] if max_length != MAX_LENGTH else []))


def find_tsv_dir(source: Path) -> Path:
    """The folder holding the three TSV files: ``source``, its ``tsv_data/`` or the release's."""
    source = Path(source)
    candidates = [source, source / "tsv_data", source / "lra_release" / "tsv_data",
                  source / "lra_release" / "lra_release" / "tsv_data"]
    for folder in candidates:
        if (folder / SPLIT_FILES["train"]).exists():
            missing = [name for name in SPLIT_FILES.values() if not (folder / name).exists()]
            if missing:
                raise DataError(f"{folder}: missing {', '.join(missing)}; expected {SOURCE_HELP}")
            return folder
    raise DataError(f"{source}: no {SPLIT_FILES['train']} found there or in tsv_data/ below it; "
                    f"expected {SOURCE_HELP}")


def read_pairs(path: Path, max_length: int, command: str) -> tuple[BytePacker, BytePacker, np.ndarray]:
    """Both documents (as packers) and the labels of one AAN TSV; a malformed line or an empty document raises
    DataError."""
    first, second, labels = BytePacker(max_length), BytePacker(max_length), []
    with open_source(path, TSV_LIMIT, "an AAN TSV file") as f:
        for line_no, line in enumerate(f, start=1):
            line = line.removesuffix(b"\n").removesuffix(b"\r")
            if not line:
                continue
            fields = line.split(b"\t")
            if len(fields) != 5:
                raise fail(path, f"line {line_no}: expected 5 tab-separated fields "
                                 f"(label, id1, id2, text1, text2), found {len(fields)}", command)
            try:
                label = float(fields[0])
            except ValueError:
                label = None
            if label not in (0.0, 1.0):
                shown = fields[0][:20].decode("utf-8", "replace")
                raise fail(path, f"line {line_no}: label {shown!r} is not 0 or 1", command)
            for number in (1, 2):
                if not fields[2 + number]:
                    raise fail(path, f"line {line_no}: text{number} is empty; every document needs at least one "
                                     f"token (remove that line)", command)
            labels.append(int(label))
            first.add(fields[3])
            second.add(fields[4])
    return first, second, np.array(labels, dtype=np.int64)


def write_pair_split(task_dir: Path, split: str, first: BytePacker, second: BytePacker,
                     labels: np.ndarray) -> dict:
    """Write one split's two documents and labels; returns its manifest entry."""
    if labels.size == 0:
        raise ValueError(f"split {split!r} has no pairs; every split needs at least one")
    tokens, offsets = pack_sequences(first.packed(), len(VOCAB))
    tokens2, offsets2 = pack_sequences(second.packed(), len(VOCAB))
    arrays = {"tokens": tokens, "offsets": offsets, "tokens2": tokens2, "offsets2": offsets2, "labels": labels}
    entry = write_arrays(task_dir, split, arrays)
    lengths, lengths2 = np.diff(offsets), np.diff(offsets2)
    empty = lengths.size == 0
    return {
        "file": entry["file"],
        "count": int(labels.size),
        "max_length": 0 if empty else int(lengths.max()),
        "min_length": 0 if empty else int(lengths.min()),
        "max_length2": 0 if empty else int(lengths2.max()),
        "min_length2": 0 if empty else int(lengths2.min()),
        "sha256": entry["sha256"],
    }


def convert(source: Path, out: Path, *, max_length: int = MAX_LENGTH,
            log: Callable[[str], None] = print) -> Path:
    """Convert the AAN TSV files under ``source`` into ``out/retrieval/``; returns that folder."""
    if max_length < 1:
        raise ValueError(f"--max-length must be positive, got {max_length}")
    folder = find_tsv_dir(source)
    command = prepare_command(out, source, max_length)
    read = {split: read_pairs(folder / name, max_length, command) for split, name in SPLIT_FILES.items()}
    for split, (_, _, labels) in read.items():
        require_examples(split, labels.size, folder / SPLIT_FILES[split], command)
    source_info = {"import": "LRA release AAN TSV", "path": str(folder.resolve()), "max_length": max_length,
                   "tokens": "UTF-8 bytes, id = byte + 1 (tfds ByteTextEncoder)"}
    task_dir = Path(out) / TASK
    with staged_task_dir(task_dir) as stage:
        entries = {}
        for split, (first, second, labels) in read.items():
            entries[split] = write_pair_split(stage, split, first, second, labels)
            log(f"retrieval: {split} {labels.size} pairs from {folder / SPLIT_FILES[split]}")
        write_manifest(stage, task=TASK, vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries,
                       source=source_info, command=command)
    log(f"retrieval: wrote {task_dir}")
    return task_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m data_prep retrieval``."""
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="root of prepared data; writes OUT/retrieval/")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help="tsv_data/ of the LRA release (or the release root holding it)")
    parser.add_argument("--max-length", type=int, default=MAX_LENGTH, metavar="N",
                        help=f"bytes kept per document (default {MAX_LENGTH})")


def main(args: argparse.Namespace) -> int:
    """Run ``python -m data_prep retrieval`` with parsed ``args``."""
    if args.source is None:
        raise DataError(f"--source PATH is required: Retrieval is converted from {SOURCE_HELP}. Then run: "
                        f"{prepare_command(args.out)}")
    convert(args.source, args.out, max_length=args.max_length)
    return 0
