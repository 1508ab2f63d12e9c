"""Tiny inputs in the official formats of IMDB (aclImdb folders), AAN (LRA release TSV) and CIFAR-10
(python batches), written here so that no test needs the network."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np

WORDS = ["great", "awful", "plot", "film", "actor", "<br />", "boring", "loved", "café", "naïve", "🙂", '"quoted"']


def random_text(rng: np.random.Generator, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS, size=int(rng.integers(low, high))).tolist())


def imdb_reviews(seed: int = 0, train_per_class: int = 12, test_per_class: int = 6) -> dict:
    """``{split: {"neg"|"pos": [review, ...]}}`` with a few multi-byte characters and long reviews."""
    rng = np.random.default_rng(seed)
    counts = {"train": train_per_class, "test": test_per_class}
    return {split: {c: [random_text(rng, 3, 60) for _ in range(n)] for c in ("neg", "pos")}
            for split, n in counts.items()}


def write_aclimdb(root: Path, reviews: dict) -> Path:
    """The Stanford layout ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``; returns ``aclImdb/``."""
    folder = Path(root) / "aclImdb"
    for split, classes in reviews.items():
        for name, texts in classes.items():
            (folder / split / name).mkdir(parents=True, exist_ok=True)
            for i, text in enumerate(texts):
                rating = 8 if name == "pos" else 3
                (folder / split / name / f"{i}_{rating}.txt").write_bytes(text.encode("utf-8"))
        (folder / split / "urls_pos.txt").write_text("http://www.imdb.com/title/tt0000000/usercomments\n")
    (folder / "imdb.vocab").write_text("the\nand\n")
    return folder


def aan_rows(seed: int = 0, counts: dict | None = None) -> dict:
    """``{split: [(label, id1, id2, text1, text2), ...]}`` as strings, labels written as floats."""
    rng = np.random.default_rng(seed)
    counts = counts or {"train": 12, "eval": 6, "test": 6}
    rows = {}
    for split, n in counts.items():
        labels = rng.permutation(np.arange(n) % 2)  # both classes in every split
        rows[split] = [(f"{float(y):.1f}", f"P{rng.integers(10, 99)}-{rng.integers(1000, 9999)}",
                        f"W{rng.integers(10, 99)}-{rng.integers(1000, 9999)}",
                        random_text(rng, 2, 80), random_text(rng, 2, 80)) for y in labels]
    return rows


def write_aan(folder: Path, rows: dict) -> Path:
    """``new_aan_pairs.{train,eval,test}.tsv``: no header, 5 tab-separated fields, no quoting."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for split, lines in rows.items():
        text = "".join("\t".join(row) + "\n" for row in lines)
        (folder / f"new_aan_pairs.{split}.tsv").write_bytes(text.encode("utf-8"))
    return folder


def _short_string(blob: bytes) -> bytes:
    """Python 2 ``str`` as cPickle protocol 2 writes it (SHORT_BINSTRING or BINSTRING)."""
    return b"U" + bytes([len(blob)]) + blob if len(blob) < 256 else b"T" + struct.pack("<I", len(blob)) + blob


def _int(value: int) -> bytes:
    if value < 256:
        return b"K" + bytes([value])
    return b"M" + struct.pack("<H", value) if value < 65536 else b"J" + struct.pack("<i", value)


def python2_batch_pickle(data: np.ndarray, labels: list[int], batch_label: str = "training batch 1 of 5") -> bytes:
    """A CIFAR-10 python batch exactly as Python 2 cPickle (protocol 2) and numpy 1.x wrote it."""
    rows, cols = data.shape
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\nq\x01cnumpy\nndarray\nq\x02" + _int(0) + b"\x85" + _short_string(b"b")
        + b"\x87Rq\x03(" + _int(1) + _int(rows) + _int(cols) + b"\x86cnumpy\ndtype\nq\x04" + _short_string(b"u1")
        + _int(0) + _int(1) + b"\x87Rq\x05(" + _int(3) + _short_string(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xff"
        + _int(0) + b"tb\x89" + _short_string(np.ascontiguousarray(data, np.uint8).tobytes()) + b"tb"
    )
    label_list = b"](" + b"".join(_int(int(y)) for y in labels) + b"e"
    names = b"](" + b"".join(_short_string(f"img_{i}.png".encode()) for i in range(rows)) + b"e"
    return (b"\x80\x02}q\x00(" + _short_string(b"batch_label") + _short_string(batch_label.encode())
            + _short_string(b"labels") + label_list + _short_string(b"data") + array
            + _short_string(b"filenames") + names + b"u.")


def numpy_batch_pickle(data: np.ndarray, labels: list[int]) -> bytes:
    """The same batch re-saved by Python 3 and today's numpy with protocol 2 (bytes keys)."""
    return pickle.dumps({b"batch_label": b"training batch", b"labels": list(labels), b"data": data}, protocol=2)


def cifar_batches(seed: int = 0, per_batch: int = 4, test: int = 6) -> dict:
    """``{file name: (data (N, 3072) uint8, labels)}`` for data_batch_1..5 and test_batch."""
    rng = np.random.default_rng(seed)
    sizes = {**{f"data_batch_{i}": per_batch for i in range(1, 6)}, "test_batch": test}
    return {name: (rng.integers(0, 256, size=(n, 3072), dtype=np.uint8), rng.permutation(np.arange(n) % 10).tolist())
            for name, n in sizes.items()}


def write_cifar(root: Path, batches: dict, style: str = "python2") -> Path:
    """``cifar-10-batches-py/`` with the given batches; ``style`` "python2" (as released) or "numpy"."""
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in batches.items():
        blob = python2_batch_pickle(data, labels) if style == "python2" else numpy_batch_pickle(data, labels)
        (folder / name).write_bytes(blob)
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"airplane"]}, protocol=2))
    return folder


def convert_all(sources: Path, root: Path, seed: int = 1) -> Path:
    """Text, Retrieval and Image converted into ``root`` from fixtures written under ``sources``."""
    from data_prep import image, retrieval, text

    def quiet(_message):
        pass

    text.convert(write_aclimdb(sources, imdb_reviews(seed=seed)), root, log=quiet)
    retrieval.convert(write_aan(Path(sources) / "tsv_data", aan_rows(seed=seed)), root, log=quiet)
    image.convert(write_cifar(sources, cifar_batches(seed=seed)), root, log=quiet)
    return root
