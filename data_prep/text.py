"""IMDB reviews as bytes for LRA Text (Maas et al. 2011; LRA, arXiv 2011.04006): 2 classes.

Source, either layout:
- the Stanford ``aclImdb/`` folder: ``{train,test}/{pos,neg}/<id>_<rating>.txt``, one review per file;
- the Hugging Face ``stanfordnlp/imdb`` parquet files ``plain_text/{train,test}-00000-of-00001.parquet``
  (columns ``text``, ``label``); reading them needs pyarrow (``pip install pyarrow``).
Label 1 = pos, 0 = neg. Texts become UTF-8 bytes (data_prep.byte_tokens: byte b -> id b + 1), without their
surrounding ASCII whitespace, as LRA's input (tfds ``imdb_reviews``: ``imdb_f.read().strip()``) has them.

Choices: each review is stored up to ``--max-length`` bytes (default 4096, the paper's 4K; 0 keeps whole
reviews); the loader may truncate further. Examples are sorted by (label, bytes), so both layouts give
identical files. IMDB has no validation split: a seeded ``--val-fraction`` (default 0.1) of train is held
out as val for model selection; test is the 25k test reviews. The manifest records all of this.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import shlex
from collections.abc import Callable
from pathlib import Path

import numpy as np

from data_prep.byte_tokens import VOCAB, BytePacker
from data_prep.compact import DataError, inside, require_examples, write_manifest, write_split
from data_prep.source_files import read_source
from data_prep.staging import staged_task_dir

TASK = "text"
NUM_CLASSES = 2
MAX_LENGTH = 4096
VAL_FRACTION = 0.1
SEED = 0
LABELS = {"neg": 0, "pos": 1}
PARQUET_FILES = {"train": "train-00000-of-00001.parquet", "test": "test-00000-of-00001.parquet"}
REVIEW_LIMIT = 1 << 20  # bytes per review file; IMDB's longest review is about 14 KB
PARQUET_LIMIT = 1 << 30  # bytes per parquet file; each of stanfordnlp/imdb's is about 20 MB
SOURCE_HELP = (
    "the IMDB reviews, either the Stanford aclImdb/ folder (train/ and test/, each with pos/ and neg/ "
    "holding one review per .txt; aclImdb_v1.tar.gz from https://ai.stanford.edu/~amaas/data/sentiment/) "
    "or the Hugging Face stanfordnlp/imdb parquet files (plain_text/train-00000-of-00001.parquet and "
    "plain_text/test-00000-of-00001.parquet; reading them needs pyarrow)"
)

Example = tuple[int, bytes]  # (label, review bytes)


def prepare_command(out: Path | str, source: Path | str = "PATH", **options) -> str:
    """The ``python -m data_prep text`` command; ``options`` (max_length, val_fraction, seed) if not default."""
    defaults = {"max_length": MAX_LENGTH, "val_fraction": VAL_FRACTION, "seed": SEED}
    words = ["python", "-m", "data_prep", TASK, "--source", str(source), "--out", str(out)]
    for name, value in options.items():
        if value != defaults[name]:
            words += [f"--{name.replace('_', '-')}", str(value)]
    return shlex.join(words)


def find_source(source: Path) -> tuple[str, Path]:
    """``("aclimdb", folder)`` or ``("parquet", folder)`` for the IMDB data at or below ``source``."""
    source = Path(source)
    for folder in (source, source / "aclImdb"):
        if (folder / "train").is_dir() and (folder / "test").is_dir():
            missing = [f"{s}/{c}" for s in ("train", "test") for c in LABELS if not (folder / s / c).is_dir()]
            if missing:
                raise DataError(f"{folder}: missing folder(s) {', '.join(missing)}; expected {SOURCE_HELP}")
            return "aclimdb", folder
    for folder in (source, source / "plain_text"):
        if (folder / PARQUET_FILES["train"]).exists():
            if not (folder / PARQUET_FILES["test"]).exists():
                raise DataError(f"{folder}: missing {PARQUET_FILES['test']}; expected {SOURCE_HELP}")
            return "parquet", folder
    raise DataError(f"{source}: no IMDB data found (looked for aclImdb train/ and test/ folders and for "
                    f"{PARQUET_FILES['train']}); expected {SOURCE_HELP}")


def read_aclimdb(folder: Path, split: str) -> list[Example]:
    """All reviews of ``folder/split/{neg,pos}/*.txt`` as (label, bytes); none may lead outside ``folder``, and each
    must be a regular file of 1 byte to ``REVIEW_LIMIT`` bytes."""
    examples = []
    for name, label in LABELS.items():
        for path in sorted((folder / split / name).glob("*.txt")):
            if inside(folder, path.relative_to(folder)) is None:
                raise DataError(f"{path}: a link that leads outside {folder}; an IMDB review is a plain file. "
                                f"Replace it with the review, or remove it")
            examples.append((label, read_review(path)))
    return examples


def read_review(path: Path) -> bytes:
    """The bytes of one review file, stripped (``stripped``); ``DataError`` naming it when it is no regular file, too
    large or empty."""
    raw = read_source(path, REVIEW_LIMIT, "an IMDB review")
    review = stripped(raw)
    if not review:
        raise DataError(f"{path}: an empty review ({'0 bytes' if not raw else 'whitespace only'}); every example "
                        f"needs at least one token. Put the review in it, or remove the file; then run again")
    return review


def stripped(review: bytes) -> bytes:
    """``review`` without its leading and trailing ASCII whitespace, as tfds ``imdb_reviews`` reads it."""
    return review.strip()


def read_parquet(path: Path) -> list[Example]:
    """The (label, UTF-8 bytes) rows of one ``stanfordnlp/imdb`` parquet file."""
    if not any(importlib.util.find_spec(engine) for engine in ("pyarrow", "fastparquet")):
        raise DataError(f"{path}: reading parquet needs pyarrow, which is not installed. Install it with "
                        f"`pip install pyarrow`, or pass the aclImdb/ folder instead.")
    import pandas as pd  # only this layout needs pandas (and a parquet engine)

    blob = read_source(path, PARQUET_LIMIT, "an IMDB parquet file")
    try:
        frame = pd.read_parquet(io.BytesIO(blob), columns=["text", "label"])
    except Exception as e:  # the engines raise their own kinds for corrupt files and missing columns
        raise DataError(f"{path}: cannot read the columns text, label ({type(e).__name__}: {e})") from None
    labels = frame["label"].to_numpy()
    bad = ~np.isin(labels, (0, 1))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(f"{path}: row {row}: label {labels[row]!r} is not 0 or 1")
    texts = frame["text"].tolist()
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise DataError(f"{path}: row {row}: text is {type(text).__name__}, not a string")
        if not stripped(text.encode("utf-8")):
            raise DataError(f"{path}: row {row}: an empty review{' (whitespace only)' if text else ''}; every example "
                            f"needs at least one token. Remove that row, then run again")
    return [(int(y), stripped(t.encode("utf-8"))) for y, t in zip(labels.tolist(), texts)]


def hold_out(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted indices ``(train, val)``: a seeded random ``round(fraction * count)`` of ``range(count)`` is val."""
    order = np.random.default_rng(seed).permutation(count)
    n_val = round(fraction * count)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _write(task_dir: Path, split: str, examples: list[Example], max_length: int) -> dict:
    packer = BytePacker(max_length)
    for _, review in examples:
        packer.add(review)
    labels = np.array([label for label, _ in examples], dtype=np.int64)
    return write_split(task_dir, split, packer.packed(), labels, len(VOCAB))


def convert(source: Path, out: Path, *, max_length: int = MAX_LENGTH, val_fraction: float = VAL_FRACTION,
            seed: int = SEED, log: Callable[[str], None] = print) -> Path:
    """Convert the IMDB data under ``source`` into ``out/text/``; returns that folder."""
    if max_length < 0:
        raise ValueError(f"--max-length must be >= 0 (0 keeps whole reviews), got {max_length}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"--val-fraction must lie in (0, 1), got {val_fraction}")
    layout, folder = find_source(source)
    command = prepare_command(out, source, max_length=max_length, val_fraction=val_fraction, seed=seed)
    if layout == "aclimdb":
        read = {split: read_aclimdb(folder, split) for split in ("train", "test")}
    else:
        read = {split: read_parquet(folder / name) for split, name in PARQUET_FILES.items()}
    for split, examples in read.items():
        if not examples:
            raise DataError(f"{folder}: no {split} reviews found; expected {SOURCE_HELP}")
        examples.sort()  # (label, bytes): the same order whichever layout they came from
    train_idx, val_idx = hold_out(len(read["train"]), val_fraction, seed)
    parts = {
        "train": [read["train"][i] for i in train_idx],
        "val": [read["train"][i] for i in val_idx],
        "test": read["test"],
    }
    for split, examples in parts.items():  # val: --val-fraction of train, rounded
        require_examples(split, len(examples), f"{folder} (--val-fraction {val_fraction} of {len(read['train'])} "
                                               f"train reviews)", command)
    source_info = {
        "import": f"IMDB ({'aclImdb folders' if layout == 'aclimdb' else 'stanfordnlp/imdb parquet'})",
        "path": str(folder.resolve()),
        "max_length": max_length,
        "val_fraction": val_fraction,
        "seed": seed,
        "val": "seeded random hold-out of train (IMDB has no validation split)",
        "order": "sorted by (label, review bytes)",
        "tokens": "UTF-8 bytes, id = byte + 1 (tfds ByteTextEncoder)",
        "strip": "surrounding ASCII whitespace removed, as tfds imdb_reviews reads a review",
    }
    task_dir = Path(out) / TASK
    with staged_task_dir(task_dir) as stage:
        entries = {}
        for split, examples in parts.items():
            entries[split] = _write(stage, split, examples, max_length)
            log(f"text: {split} {len(examples)} reviews")
        write_manifest(stage, task=TASK, vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries,
                       source=source_info, command=command)
    log(f"text: wrote {task_dir}")
    return task_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m data_prep text``."""
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="root of prepared data; writes OUT/text/")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help="aclImdb/ (or its parent), or the folder with the stanfordnlp/imdb parquet files")
    parser.add_argument("--max-length", type=int, default=MAX_LENGTH, metavar="N",
                        help=f"bytes kept per review (default {MAX_LENGTH}; 0 keeps whole reviews)")
    parser.add_argument("--val-fraction", type=float, default=VAL_FRACTION, metavar="F",
                        help=f"share of train held out as val (default {VAL_FRACTION})")
    parser.add_argument("--seed", type=int, default=SEED, metavar="S",
                        help=f"seed of the val hold-out (default {SEED})")


def main(args: argparse.Namespace) -> int:
    """Run ``python -m data_prep text`` with parsed ``args``."""
    if args.source is None:
        raise DataError(f"--source PATH is required: Text is converted from {SOURCE_HELP}. Then run: "
                        f"{prepare_command(args.out)}")
    convert(args.source, args.out, max_length=args.max_length, val_fraction=args.val_fraction, seed=args.seed)
    return 0
