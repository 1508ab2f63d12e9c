"""Tiny archives in the official layouts for the fetch tests: cifar-10-python.tar.gz, aclImdb_v1.tar.gz and an
lra_release.gz with the ListOps, AAN and Pathfinder/Path-X members, and a sources table pinned to them."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from data_prep import listops
from data_prep.fetch_sources import SOURCES
from tests.data_prep.official_fixtures import aan_rows, cifar_batches, imdb_reviews, python2_batch_pickle

NESTED = "lra_release/lra_release/"  # the release's documented layout (docs/protocol.md section 2)


def tar_gz(entries: dict[str, bytes], extra: tuple[tarfile.TarInfo, ...] = ()) -> bytes:
    """A gzip'd tar of ``entries`` (name -> bytes, folders added for each parent) and ``extra`` entries."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        folders = sorted({"/".join(name.split("/")[:i]) for name in entries for i in range(1, name.count("/") + 1)})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, blob in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(blob), 0o644
            tar.addfile(info, io.BytesIO(blob))
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return buffer.getvalue()


def cifar_entries(seed: int = 0) -> dict[str, bytes]:
    entries = {f"cifar-10-batches-py/{name}": python2_batch_pickle(data, labels)
               for name, (data, labels) in cifar_batches(seed=seed).items()}
    entries["cifar-10-batches-py/batches.meta"] = pickle.dumps({b"label_names": [b"airplane"]}, protocol=2)
    entries["cifar-10-batches-py/readme.html"] = b"<html></html>"
    return entries


def imdb_entries(seed: int = 0) -> dict[str, bytes]:
    entries = {}
    for split, classes in imdb_reviews(seed=seed).items():
        for label, texts in classes.items():
            for i, review in enumerate(texts):
                entries[f"aclImdb/{split}/{label}/{i}_{8 if label == 'pos' else 3}.txt"] = review.encode("utf-8")
        entries[f"aclImdb/{split}/urls_pos.txt"] = b"http://www.imdb.com/title/tt0000000/usercomments\n"
    entries["aclImdb/train/unsup/0_0.txt"] = b"an unlabelled review, not read"
    entries["aclImdb/imdb.vocab"] = b"the\nand\n"
    return entries


def listops_entries(tmp: Path) -> dict[str, bytes]:
    """``listops-1000/basic_*.tsv`` as the generator writes the published format (tiny trees)."""
    folder = listops.generate(tmp, train=40, val=8, test=8, min_length=20, max_length=60, seed=3, fmt="tsv",
                              log=lambda _m: None)
    return {f"listops-1000/basic_{split}.tsv": (folder / f"basic_{split}.tsv").read_bytes()
            for split in ("train", "val", "test")}


def aan_entries(seed: int = 0) -> dict[str, bytes]:
    return {f"tsv_data/new_aan_pairs.{split}.tsv": "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")
            for split, rows in aan_rows(seed=seed).items()}


def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels, "L").save(buffer, format="PNG")
    return buffer.getvalue()


def pathfinder_entries(window: int, count: int = 12, seed: int = 0) -> dict[str, bytes]:
    """``pathfinder<window>/curv_contour_length_14/{imgs/0/sample_<n>.png, metadata/0.npy}`` (text rows)."""
    rng = np.random.default_rng(seed)
    root = f"pathfinder{window}/curv_contour_length_14"
    entries, rows = {}, []
    for n in range(count):
        pixels = rng.integers(1, 256, size=(window, window), dtype=np.uint8)
        entries[f"{root}/imgs/0/sample_{n}.png"] = png(pixels)
        rows.append(f"imgs/0 sample_{n}.png {n} {n % 2} 1.0 14 4 2 0.5 1 1")
    entries[f"{root}/metadata/0.npy"] = ("\n".join(rows) + "\n").encode()
    return entries


def release_entries(tmp: Path, root: str = NESTED) -> dict[str, bytes]:
    members = {**listops_entries(tmp), **aan_entries(), **pathfinder_entries(32), **pathfinder_entries(128, 10)}
    members["pathfinder32/curv_baseline/metadata/0.npy"] = b"imgs/0 sample_0.png 0 1\n"  # an easy split: not taken
    return {root + name: blob for name, blob in members.items()}


def pinned(files: dict[str, bytes]) -> dict:
    """The sources table with cifar10 and imdb pinned to the served test archives (size and their checksums)."""
    table = dict(SOURCES)
    for source in SOURCES.values():
        blob = files.get(source.filename)
        if blob is not None and source.checksum is not None:
            algorithm = source.checksum[0]
            table[source.name] = dataclasses.replace(source, size=len(blob),
                                                     checksum=(algorithm, hashlib.new(algorithm, blob).hexdigest()))
    return table


def pin(patch, files: dict[str, bytes]) -> None:
    """Pin the sources table to ``files`` for the duration of ``patch`` (a ``pytest.MonkeyPatch``)."""
    for name, source in pinned(files).items():
        patch.setitem(SOURCES, name, source)


def official_files(tmp: Path) -> dict[str, bytes]:
    """The three archives by file name."""
    return {"cifar-10-python.tar.gz": tar_gz(cifar_entries()), "aclImdb_v1.tar.gz": tar_gz(imdb_entries()),
            "lra_release.gz": tar_gz(release_entries(tmp))}


def damaged(blob: bytes) -> bytes:
    """``blob`` with one byte in its middle changed (same length)."""
    middle = len(blob) // 2
    return blob[:middle] + bytes([blob[middle] ^ 0xFF]) + blob[middle + 1:]

