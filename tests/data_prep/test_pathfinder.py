"""Tests of the Pathfinder / Path-X generator, the official-layout importer, the preview and the CLI.

Labels are checked against a flood fill written here: from one marker over the lit (non-zero) pixels,
stepping to any lit pixel within ``radius`` (Chebyshev). The paths are dashed (paddles with one-pixel
gaps at 32x32), so the fill bridges gaps up to the documented clearance: 2 pixels at 32x32, 5 at 128x128.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections import deque

import numpy as np
import pytest
from PIL import Image

from data_prep import pathfinder
from data_prep.__main__ import main as cli
from data_prep.compact import DataError, load_manifest, load_split

SMALL32 = dataclasses.replace(pathfinder.PATHFINDER32, chunk=20, pool=1024)
SMALL128 = dataclasses.replace(pathfinder.PATHX, chunk=3, pool=256)


@pytest.fixture(scope="module")
def images32():
    tokens, labels, _ = pathfinder.generate_images(SMALL32, 40, seed=3, workers=1, log=lambda _: None)
    return tokens.reshape(-1, 32, 32), labels


@pytest.fixture(scope="module")
def images128():
    tokens, labels, _ = pathfinder.generate_images(SMALL128, 6, seed=3, workers=1, log=lambda _: None)
    return tokens.reshape(-1, 128, 128), labels


def marker_centres(image: np.ndarray, window: int) -> list[tuple[int, int]]:
    """Centres of the marker discs: at 32x32 a bright pixel whose 4 neighbours are bright too (a paddle
    is too thin for that); at 128x128 the brightest pixels (paddles stay at contrast 0.9)."""
    if window == 32:
        bright = np.pad(image >= 240, 1)
        plus = bright[1:-1, 1:-1] & bright[:-2, 1:-1] & bright[2:, 1:-1] & bright[1:-1, :-2] & bright[1:-1, 2:]
        return [tuple(p) for p in np.argwhere(plus)]
    found = np.argwhere(image >= 250)
    centres = []
    for p in found:  # one representative per disc
        if all(np.abs(p - c).max() > 6 for c in centres):
            centres.append(p)
    return [tuple(c) for c in centres]


def reaches(image: np.ndarray, start, goal, radius: int) -> bool:
    """Flood fill over pixels > 0 from ``start``; neighbours are lit pixels within ``radius`` (Chebyshev)."""
    lit = image > 0
    seen = np.zeros_like(lit)
    seen[start] = True
    queue = deque([start])
    h, w = lit.shape
    while queue:
        y, x = queue.popleft()
        if (y, x) == goal:
            return True
        y0, y1, x0, x1 = max(0, y - radius), min(h, y + radius + 1), max(0, x - radius), min(w, x + radius + 1)
        window = lit[y0:y1, x0:x1] & ~seen[y0:y1, x0:x1]
        for dy, dx in np.argwhere(window):
            seen[y0 + dy, x0 + dx] = True
            queue.append((y0 + dy, x0 + dx))
    return False


def test_images_have_the_published_size_and_both_labels(images32, images128):
    (img32, lab32), (img128, lab128) = images32, images128
    assert img32.shape == (40, 32, 32) and img32.dtype == np.uint8
    assert img128.shape == (6, 128, 128) and img128.dtype == np.uint8
    assert set(lab32.tolist()) == {0, 1} and lab32.sum() == 20  # balanced within a chunk
    assert set(lab128.tolist()) == {0, 1}
    lit = (img32 > 0).mean()
    assert 0.08 < lit < 0.35, f"lit fraction {lit:.3f}: two 14-paddle snakes should fill much of 32x32"
    assert (img32 == 0).any(axis=(1, 2)).all() and (img32 == 255).any(axis=(1, 2)).all()


@pytest.mark.parametrize("window,radius", [(32, 2), (128, 5)])
def test_markers_are_connected_exactly_when_the_label_is_1(window, radius, images32, images128):
    images, labels = images32 if window == 32 else images128
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        centres = marker_centres(image, window)
        assert len(centres) == 2, f"image {i}: expected 2 markers, found {centres}"
        assert reaches(image, centres[0], centres[1], radius) == bool(label), f"image {i} (label {label})"


def test_same_seed_gives_same_bytes_for_any_worker_count():
    one = pathfinder.generate_images(SMALL32, 50, seed=5, workers=1, log=lambda _: None)
    three = pathfinder.generate_images(SMALL32, 50, seed=5, workers=3, log=lambda _: None)
    other = pathfinder.generate_images(SMALL32, 50, seed=6, workers=1, log=lambda _: None)
    assert one[0].tobytes() == three[0].tobytes() and np.array_equal(one[1], three[1])
    assert one[0].tobytes() != other[0].tobytes()


def test_cli_writes_splits_manifest_and_preview(tmp_path):
    preview = tmp_path / "grid.png"
    assert cli(["pathfinder", "--out", str(tmp_path), "--count", "30", "--seed", "1", "--workers", "1",
                "--preview", str(preview)]) == 0
    manifest = load_manifest(tmp_path / "pathfinder", rebuild_cmd="x")
    assert manifest["vocab_size"] == 256 and manifest["num_classes"] == 2
    assert {k: v["count"] for k, v in manifest["splits"].items()} == {"train": 24, "val": 3, "test": 3}
    source = manifest["source"]
    assert source["contour_length"] == 14 and source["window"] == 32 and source["paddle_length"] == 2
    assert manifest["command"].startswith("python -m data_prep pathfinder --out")
    train = load_split(tmp_path / "pathfinder", "train", rebuild_cmd="x")
    assert (train.lengths == 1024).all() and train.tokens.dtype == np.uint8
    with Image.open(preview) as grid:
        assert grid.size[0] > 4 * 256 and grid.mode == "RGB"


@pytest.mark.parametrize("params,contour_length,distractors", [
    (pathfinder.PATHFINDER32, 6, (2, 10)), (pathfinder.PATHFINDER32, 9, (3, 6)),
    (pathfinder.PATHFINDER32, 14, (4, 5)), (pathfinder.PATHX, 14, (4, 8)), (pathfinder.PATHX, 6, (2, 17))])
def test_contour_length_sets_distractors_as_the_release_wrapper(params, contour_length, distractors):
    easier = pathfinder.at_contour_length(params, contour_length)
    assert (easier.distractor_length, easier.num_distractors) == distractors
    assert easier.contour_length == contour_length and easier.window == params.window


def test_contour_length_below_three_is_refused():
    with pytest.raises(ValueError, match="--contour-length must be at least 3"):
        pathfinder.at_contour_length(pathfinder.PATHFINDER32, 2)


def test_easy_split_images_have_shorter_targets_and_correct_labels(images32):
    easy = pathfinder.at_contour_length(SMALL32, 6)
    tokens, labels, _ = pathfinder.generate_images(easy, 40, seed=3, workers=1, log=lambda _: None)
    images = tokens.reshape(-1, 32, 32)
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        centres = marker_centres(image, 32)
        assert len(centres) == 2, f"image {i}: expected 2 markers, found {centres}"
        assert reaches(image, centres[0], centres[1], 2) == bool(label), f"image {i} (label {label})"
    lit = [(img > 0).mean() for img in (images, images32[0])]  # 2 x 6 + 10 x 2 paddles vs 2 x 14 + 5 x 4
    assert lit[0] < lit[1], f"lit fractions {lit}: the easy split draws fewer paddles"


def test_cli_contour_length_is_recorded_in_manifest_and_command(tmp_path):
    assert cli(["pathfinder", "--out", str(tmp_path), "--count", "10", "--contour-length", "6",
                "--workers", "1"]) == 0
    manifest = load_manifest(tmp_path / "pathfinder", rebuild_cmd="x")
    assert manifest["source"]["contour_length"] == 6 and manifest["source"]["num_distractors"] == 10
    assert manifest["source"]["difficulty"] == "easy (curv_baseline)"
    assert manifest["command"].endswith("--contour-length 6")


def write_release(root, images, labels, extra_lines=()):
    """The official layout: imgs/0/sample_<n>.png and metadata/0.npy as text rows."""
    (root / "imgs" / "0").mkdir(parents=True)
    (root / "metadata").mkdir()
    lines = []
    for n, (image, label) in enumerate(zip(images, labels, strict=True)):
        Image.fromarray(image, "L").save(root / "imgs" / "0" / f"sample_{n}.png")
        lines.append(f"imgs/0 sample_{n}.png {n} {label} 1.0 14 4 2 0.5 1 1")
    (root / "metadata" / "0.npy").write_text("\n".join([*lines, *extra_lines]) + "\n")


def test_importer_reads_the_official_layout_and_skips_empty_images(tmp_path, images32):
    images, labels = images32
    images, labels = images[:12].copy(), labels[:12].copy()
    images[4] = 0  # an empty image, as pathfinder32/curv_baseline/imgs/0/sample_172.png
    source = tmp_path / "lra_release" / "pathfinder32" / "curv_contour_length_14"
    write_release(source, images, labels)
    assert cli(["pathfinder", "--out", str(tmp_path / "out"), "--source", str(tmp_path)]) == 0
    manifest = load_manifest(tmp_path / "out" / "pathfinder", rebuild_cmd="x")
    assert manifest["source"]["empty_images_skipped"] == 1 and manifest["source"]["count"] == 11
    splits = [load_split(tmp_path / "out" / "pathfinder", s, rebuild_cmd="x") for s in ("train", "val", "test")]
    kept = np.delete(np.arange(12), 4)
    assert np.array_equal(np.concatenate([s.tokens for s in splits]), images[kept].reshape(-1))
    assert np.array_equal(np.concatenate([s.labels for s in splits]), labels[kept])


def test_importer_names_file_and_line_of_a_malformed_row(tmp_path, images32):
    images, labels = images32
    write_release(tmp_path, images[:3], labels[:3], extra_lines=["imgs/0 sample_9.png 9 maybe"])
    with pytest.raises(DataError, match=r"metadata[/\\]0\.npy, line 4: expected"):
        pathfinder.import_official(tmp_path, tmp_path / "out", "pathfinder", log=lambda _: None)


@pytest.mark.parametrize("folder", ["../elsewhere", "{abs}"])
def test_importer_refuses_image_paths_leading_outside_the_release(tmp_path, images32, folder):
    images, labels = images32
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Image.fromarray(images[0], "L").save(elsewhere / "sample_0.png")  # a readable image: only the path is wrong
    folder = folder.format(abs=elsewhere)
    root = tmp_path / "release"
    write_release(root, images[:12], labels[:12], extra_lines=[f"{folder} sample_0.png 0 1 1.0 14 4 2 0.5 1 1"])
    with pytest.raises(DataError, match=r"0\.npy: line 13: image path .* leads outside"):
        pathfinder.import_official(root, tmp_path / "out", "pathfinder", log=lambda _: None)


def png_header(width: int, height: int) -> bytes:
    """A tiny PNG that claims ``width`` x ``height`` grey pixels (a decompression bomb to a reader)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.mark.parametrize("side, problem", [(20_000, "decompression bomb"), (9_000, "is 9000x9000, expected 32x32")])
def test_importer_refuses_a_decompression_bomb_by_name(tmp_path, images32, side, problem):
    images, labels = images32
    write_release(tmp_path, images[:12], labels[:12])
    (tmp_path / "imgs" / "0" / "sample_3.png").write_bytes(png_header(side, side))
    with pytest.raises(DataError, match=r"sample_3\.png: .*0\.npy, line 4") as error:
        pathfinder.import_official(tmp_path, tmp_path / "out", "pathfinder", log=lambda _: None)
    assert problem in str(error.value)


def test_source_with_generator_options_is_refused(tmp_path, capsys):
    assert cli(["pathfinder", "--out", str(tmp_path), "--source", str(tmp_path), "--count", "5"]) == 2
    assert "--source imports the official hard split" in capsys.readouterr().err
