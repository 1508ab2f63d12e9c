"""Pathfinder files: importer of the official release layout and a labelled preview grid (pillow).

Official layout (LRA release, lra_benchmarks/data/pathfinder.py): ``<root>/imgs/<batch>/sample_<n>.png``
and ``<root>/metadata/<batch>.npy``. Despite the suffix the metadata files are TEXT, one image per line,
space-separated: ``imgs/<batch> sample_<n>.png <index> <label> <continuity> <contour length> ...``.
Empty (all-zero) images are skipped, as LRA does (pathfinder32/curv_baseline/imgs/0/sample_172.png is
one); the manifest counts them.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from data_prep.compact import DataError, fail, inside
from data_prep.source_files import read_source
from lra_base.atomic import atomic_output

RELEASE_FOLDERS = {32: "pathfinder32", 128: "pathfinder128"}
HARD = "curv_contour_length_14"
RELEASE_CONTOURS = {"curv_baseline": 6, "curv_contour_length_9": 9, HARD: 14}  # the release's folders: contour length
IMAGE_LIMIT = 1 << 20  # bytes per PNG; the release's 128x128 images are a few KB each
METADATA_LIMIT = 64 << 20  # bytes per metadata file: about a million 60-byte lines, far more than a release file


def find_root(source: Path, window: int) -> Path:
    """The folder holding ``imgs/`` and ``metadata/``: ``source`` itself or the hard split below it."""
    source = Path(source)
    folder = RELEASE_FOLDERS[window]
    for root in (source, source / HARD, source / folder / HARD, source / "lra_release" / folder / HARD,
                 source / "lra_release" / "lra_release" / folder / HARD):
        if (root / "metadata").is_dir():
            return root
    return source


def read_metadata(path: Path, command: str) -> list[tuple[str, int, int]]:
    """(relative image path, line number, label) per line of one metadata text file."""
    try:
        text = read_source(path, METADATA_LIMIT, "a Pathfinder metadata file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:  # missing or unreadable; read_source's own DataError passes
        raise fail(path, f"cannot read metadata as text ({e})", command) from e
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < 4 or fields[3] not in ("0", "1"):
            raise DataError(f"{path}, line {number}: expected 'imgs/<batch> sample_<n>.png <index> <label 0|1> "
                            f"...', got {line.strip()[:80]!r}. Fix or remove that line, or re-download the "
                            f"release; then run: {command}")
        rows.append((f"{fields[0]}/{fields[1]}", number, int(fields[3])))
    return rows


def read_image(path: Path, window: int, where: str, command: str) -> np.ndarray:
    """One PNG as (window * window,) uint8 grey levels; a regular file of at most ``IMAGE_LIMIT`` bytes."""
    what = f"a Pathfinder image (listed at {where})"
    try:
        with Image.open(io.BytesIO(read_source(path, IMAGE_LIMIT, what))) as image:
            if image.size != (window, window):  # checked before decoding: a huge image is never expanded
                raise fail(path, f"image listed at {where} is {image.size[0]}x{image.size[1]}, expected "
                                 f"{window}x{window}", command)
            pixels = np.asarray(image.convert("L"), dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise fail(path, f"cannot read image listed at {where} ({e})", command) from e
    return pixels.reshape(-1)


def import_release(source: Path, window: int, command: str, log: Callable[[str], None] = print):
    """Read every image listed in ``<root>/metadata/*.npy`` (sorted by batch number, then line).

    Returns (tokens (N, window**2) uint8, labels (N,), info) where info names the root and counts.
    """
    root = find_root(source, window)
    metadata = root / "metadata"
    if not metadata.is_dir():
        raise fail(source, f"no metadata/ folder here or under {HARD}/ (expected the release layout "
                           f"{RELEASE_FOLDERS[window]}/{HARD}/{{imgs,metadata}})", command)
    files = sorted(metadata.glob("*.npy"), key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit()
                                                           else 0, p.stem))
    if not files:
        raise fail(metadata, "no *.npy metadata files", command)
    images, labels, empty = [], [], 0
    for meta in files:
        for relative, number, label in read_metadata(meta, command):
            path = inside(root, relative)
            if path is None:
                raise fail(meta, f"line {number}: image path {relative!r} leads outside {root}", command)
            pixels = read_image(path, window, f"{meta}, line {number}", command)
            if not pixels.any():
                empty += 1
                continue
            images.append(pixels)
            labels.append(label)
        log(f"pathfinder{window}: read {meta.name}, {len(labels)} images so far")
    if not labels:
        raise fail(root, "no non-empty images listed in the metadata", command)
    info = {"import": "LRA release layout", "path": str(root.resolve()), "metadata_files": len(files),
            "empty_images_skipped": empty, "count": len(labels)}
    return np.stack(images), np.asarray(labels, np.int64), info


def write_preview(path: Path, tokens: np.ndarray, labels: np.ndarray, window: int, *, columns: int = 4,
                  scale: int | None = None) -> Path:
    """A grid of the first ``columns**2`` images, each framed green (label 1) or red (label 0) and titled."""
    count = min(columns * columns, len(labels))
    scale = scale or max(1, 256 // window)
    side, border, title = window * scale, 4, 14
    rows = -(-count // columns)
    sheet = Image.new("RGB", (columns * (side + 2 * border), rows * (side + 2 * border + title)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i in range(count):
        x = (i % columns) * (side + 2 * border)
        y = (i // columns) * (side + 2 * border + title)
        colour = (0, 170, 0) if labels[i] == 1 else (200, 0, 0)
        draw.rectangle([x, y + title, x + side + 2 * border - 1, y + title + side + 2 * border - 1], fill=colour)
        tile = Image.fromarray(np.asarray(tokens[i], np.uint8).reshape(window, window), "L")
        sheet.paste(tile.resize((side, side), Image.NEAREST).convert("RGB"), (x + border, y + title + border))
        draw.text((x + border, y + 1), f"#{i} label {int(labels[i])}", fill=colour)
    path = Path(path)
    with atomic_output(path) as f:
        sheet.save(f, format=Image.registered_extensions().get(path.suffix.lower(), "PNG"))
    return path
