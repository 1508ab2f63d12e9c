"""CIFAR-10 as grey-level pixel sequences for LRA Image (Krizhevsky 2009; LRA, arXiv 2011.04006).

Source: the CIFAR-10 python version, ``cifar-10-batches-py/`` (``data_batch_1`` .. ``data_batch_5``,
``test_batch``), read with a restricted unpickler (data_prep.safe_pickle). Each batch holds ``data``
(N x 3072 uint8: 1024 red, 1024 green, 1024 blue, each 32 x 32 row-major) and ``labels`` (0-9).

Grey levels as LRA (lra_benchmarks/image/input_pipeline.py: ``tf.image.rgb_to_grayscale`` on the uint8
image, then int32): TF converts to float32 ``x / 255``, takes ``0.2989 R + 0.5870 G + 0.1140 B`` and
converts back with ``convert_image_dtype``, i.e. multiplies by 255.5 and casts with truncation. We do
the same in float32 numpy; it is not ``round(0.2989 R + ...)`` (pure green gives 149, not 150).
Tokens are the grey levels 0-255 themselves (vocabulary 256; 0 is a black pixel, not padding).

Splits as LRA (tfds ``train[:90%]``, ``train[90%:]``, ``test``), in file order: the first 90% of
data_batch_1..5 (45,000) train, the last 10% (5,000) val, test_batch (10,000) test. tfds stores records
in its own (key-hashed) order, so LRA's 5,000 val images are likely a different 10% of train.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path

import numpy as np

from data_prep import safe_pickle
from data_prep.compact import DataError, fail, require_examples, write_manifest, write_split
from data_prep.source_files import read_source
from data_prep.staging import staged_task_dir

TASK = "image"
NUM_CLASSES = 10
SIDE = 32
PIXELS = SIDE * SIDE
VOCAB = tuple(str(level) for level in range(256))
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
TRAIN_FRACTION = 0.9
BATCH_LIMIT = 256 << 20  # bytes per batch file; each of CIFAR-10's is about 31 MB
GREY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)  # tf.image.rgb_to_grayscale
SOURCE_HELP = (
    "the CIFAR-10 python version: cifar-10-batches-py/ with data_batch_1 .. data_batch_5 and test_batch "
    "(cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html)"
)


def prepare_command(out: Path | str, source: Path | str = "PATH") -> str:
    """The ``python -m data_prep image`` command that converts ``source`` into ``out/image/``."""
    return shlex.join(["python", "-m", "data_prep", TASK, "--source", str(source), "--out", str(out)])


def find_batches(source: Path) -> Path:
    """The folder holding the batch files: ``source`` itself or ``source/cifar-10-batches-py``."""
    source = Path(source)
    for folder in (source, source / "cifar-10-batches-py"):
        if (folder / TEST_FILE).exists():
            missing = [name for name in TRAIN_FILES if not (folder / name).exists()]
            if missing:
                raise DataError(f"{folder}: missing {', '.join(missing)}; expected {SOURCE_HELP}")
            return folder
    raise DataError(f"{source}: no CIFAR-10 batches found (looked for {TEST_FILE} there and in "
                    f"cifar-10-batches-py/); expected {SOURCE_HELP}")


def read_batch(path: Path, command: str) -> tuple[np.ndarray, np.ndarray]:
    """``(data, labels)`` of one python batch: uint8 (N, 3072) and int64 (N,); bad files raise DataError."""
    blob = read_source(path, BATCH_LIMIT, "a CIFAR-10 batch")
    try:
        batch = safe_pickle.loads(blob)
    except Exception as e:  # the unpickler, numpy and a truncated stream each raise their own kinds
        raise fail(path, f"not a CIFAR-10 python batch ({type(e).__name__}: {e})", command) from None
    if not isinstance(batch, dict):
        raise fail(path, f"expected a dict, found {type(batch).__name__}", command)
    batch = {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * PIXELS:
        raise fail(path, f"'data' is not a uint8 array of N x {3 * PIXELS}", command)
    if not isinstance(labels, (list, np.ndarray)) or len(labels) != len(data):
        raise fail(path, f"'labels' is not a list of {len(data)} labels", command)
    labels = np.asarray(labels)
    if labels.size and (not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= 10):
        raise fail(path, "'labels' holds values outside 0-9", command)
    return data, labels.astype(np.int64)


def to_grey(data: np.ndarray) -> np.ndarray:
    """Grey levels (N, 1024) uint8 of CIFAR rows (N, 3072), as ``tf.image.rgb_to_grayscale`` on uint8."""
    rgb = data.reshape(-1, 3, PIXELS).astype(np.float32) * np.float32(1 / 255)  # (N, 3, 1024)
    grey = rgb[:, 0] * GREY_WEIGHTS[0] + rgb[:, 1] * GREY_WEIGHTS[1] + rgb[:, 2] * GREY_WEIGHTS[2]
    return (grey * np.float32(255.5)).astype(np.uint8)  # at most 0.9999 * 255.5 < 256


def convert(source: Path, out: Path, *, log: Callable[[str], None] = print) -> Path:
    """Convert the CIFAR-10 python batches under ``source`` into ``out/image/``; returns that folder."""
    folder = find_batches(source)
    command = prepare_command(out, source)
    batches = [read_batch(folder / name, command) for name in TRAIN_FILES]
    train_x = np.concatenate([x for x, _ in batches])
    train_y = np.concatenate([y for _, y in batches])
    test_x, test_y = read_batch(folder / TEST_FILE, command)
    cut = round(TRAIN_FRACTION * len(train_y))
    parts = {
        "train": (train_x[:cut], train_y[:cut]),
        "val": (train_x[cut:], train_y[cut:]),
        "test": (test_x, test_y),
    }
    for split, (_, y) in parts.items():
        require_examples(split, len(y), folder, command)
    source_info = {
        "import": "CIFAR-10 python batches",
        "path": str(folder.resolve()),
        "grey": "tf.image.rgb_to_grayscale on uint8: float32 x/255, weights 0.2989/0.5870/0.1140, x255.5, truncate",
        "split": f"data_batch_1..5 [:{cut}] train, [{cut}:] val, test_batch test (file order)",
    }
    task_dir = Path(out) / TASK
    with staged_task_dir(task_dir) as stage:
        entries = {}
        for split, (x, y) in parts.items():
            grey = to_grey(x)
            offsets = np.arange(len(y) + 1, dtype=np.int64) * PIXELS
            entries[split] = write_split(stage, split, (grey.reshape(-1), offsets), y, len(VOCAB))
            log(f"image: {split} {len(y)} images")
        write_manifest(stage, task=TASK, vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries,
                       source=source_info, command=command)
    log(f"image: wrote {task_dir}")
    return task_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m data_prep image``."""
    parser.add_argument("--out", type=Path, required=True, metavar="DIR",
                        help="root of prepared data; writes OUT/image/")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help="cifar-10-batches-py/ (or the folder holding it)")


def main(args: argparse.Namespace) -> int:
    """Run ``python -m data_prep image`` with parsed ``args``."""
    if args.source is None:
        raise DataError(f"--source PATH is required: Image is converted from {SOURCE_HELP}. Then run: "
                        f"{prepare_command(args.out)}")
    convert(args.source, args.out)
    return 0
