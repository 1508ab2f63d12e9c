"""Pathfinder-32 and Path-X: is there a path between the two circle markers? (LRA, arXiv 2011.04006)

Images follow the contour-integration procedure of drewlinsley/pathfinder snakes2.py (Linsley et al.,
arXiv 1805.08315; Kim et al., ICLR 2020) with LRA's parameters for the hard split (contour length 14,
lra_benchmarks/data/pathfinder.py): two target snakes of short paddles grown from seeds near the centre,
distractor snakes of contour_length // 3 paddles, a circle marker on the origin tip of one target snake
and one on a terminal tip, of the same snake (label 1) or of the other (label 0). Tokens are the grey
levels 0..255 of the W x W pixels in row-major order (vocab 256; 0 is a real black pixel).

Deliberate differences from the original, so that the label is decided by the pixels alone: every lit
pixel of a snake stays more than ``clearance`` pixels (Chebyshev) from every other snake and from the
markers, and consecutive paddles of a snake lie within ``clearance`` of each other (the original lets
snakes touch and cross). Labels are balanced within each chunk. Randomness: numpy PCG64 seeded per
chunk from (seed, chunk index), so the output does not depend on the number of worker processes.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from data_prep.compact import load_split, write_manifest, write_split
from data_prep.pathfinder_draw import Tables, build_tables
from data_prep.pathfinder_grow import Batch, grow_distractors, grow_targets, render
from data_prep.pathfinder_io import HARD, import_release, write_preview
from data_prep.staging import staged_task_dir

SPLITS = {"train": 0.8, "val": 0.1, "test": 0.1}  # LRA: [:80%], [80%:90%], [90%:]
VOCAB = [str(level) for level in range(256)]
NUM_CLASSES = 2


@dataclass(frozen=True)
class Params:
    """Generator settings (names as snakes2_wrapper.Args; LRA values in PATHFINDER32 / PATHX)."""

    window: int
    padding: int
    margins: tuple[int, ...]  # paddle_margin_list: one drawn per image
    paddle_length: int
    paddle_thickness: float
    marker_radius: float
    contour_length: int
    distractor_length: int
    num_distractors: int
    seed_distance: int
    continuity: float
    antialias: int
    snake_contrast: float  # snake_contrast_list[0]
    paddle_contrast: float  # paddle_contrast_list[0]; target paddles get snake * paddle contrast
    clearance: int  # ours: Chebyshev gap (pixels) that separates snakes and links paddles of one snake
    chunk: int  # images per chunk (one random stream each)
    pool: int  # target-snake attempts run together
    distractor_budget: int  # LRA: num_distractors = budget // distractor_length (20 at 32x32, 35 at 128)
    max_distractor_retrial: int = 4


def at_contour_length(params: Params, contour_length: int) -> Params:
    """``params`` for another difficulty, as snakes2_wrapper derives it: distractor_length = CL // 3 and
    num_distractors = budget // distractor_length (the release's easy / intermediate / hard splits are
    CL 6, 9, 14)."""
    if contour_length < 3:
        raise ValueError(f"--contour-length must be at least 3 (distractors are CL // 3 paddles), got {contour_length}")
    distractor_length = contour_length // 3
    return replace(params, contour_length=contour_length, distractor_length=distractor_length,
                   num_distractors=params.distractor_budget // distractor_length)


def difficulty(contour_length: int) -> str:
    """The release's name for a contour length (its split folders), or "custom"."""
    return {6: "easy (curv_baseline)", 9: "intermediate (curv_contour_length_9)",
            14: f"hard ({HARD})"}.get(contour_length, f"custom (contour length {contour_length})")


# LRA lra_benchmarks/data/pathfinder.py docstrings; the rest are snakes2_wrapper.Args defaults.
PATHFINDER32 = Params(window=32, padding=1, margins=(1,), paddle_length=2, paddle_thickness=0.5,
                      marker_radius=1.5, contour_length=14, distractor_length=14 // 3,
                      num_distractors=20 // (14 // 3), seed_distance=7, continuity=1.0, antialias=2,
                      snake_contrast=2.0, paddle_contrast=0.75, clearance=2, chunk=1000, pool=4096,
                      distractor_budget=20)
# the 128 docstring divides with Python 2 integer division: 14 / 3 = 4 paddles, 35 / 4 = 8 distractors
PATHX = Params(window=128, padding=1, margins=(2, 3), paddle_length=5, paddle_thickness=1.5,
               marker_radius=3.0, contour_length=14, distractor_length=14 // 3,
               num_distractors=35 // (14 // 3), seed_distance=20, continuity=1.8, antialias=2,
               snake_contrast=0.9, paddle_contrast=1.0, clearance=5, chunk=200, pool=512, distractor_budget=35)
TASKS = {"pathfinder": PATHFINDER32, "pathx": PATHX}


@functools.lru_cache(maxsize=8)
def tables_for(params: Params, margin: int) -> Tables:
    return build_tables(window=params.window, padding=params.padding, seed_distance=params.seed_distance,
                        paddle_length=params.paddle_length, paddle_thickness=params.paddle_thickness,
                        margin=margin, continuity=params.continuity, marker_radius=params.marker_radius,
                        antialias=params.antialias, clearance=params.clearance)


def make_images(params: Params, labels: np.ndarray, rng: np.random.Generator, margin: int):
    """Images (n, W, W) uint8 for the given labels with one margin; returns (images, stats)."""
    n, cl, dl = labels.size, params.contour_length, params.distractor_length
    batch = Batch(tables_for(params, margin), n, 2 * cl + params.num_distractors * dl)
    tails, heads, attempts = grow_targets(batch, rng, cl, params.seed_distance, params.pool)
    placed = grow_distractors(batch, rng, 2 * cl, params.num_distractors, dl, params.max_distractor_retrial)
    origin = rng.integers(0, 2, n)  # the snake whose origin tip gets a marker
    terminal = np.where(labels == 1, origin, 1 - origin)
    rows = np.arange(n)
    markers = np.stack([tails[rows, origin], heads[rows, terminal]], axis=1)
    contrasts = np.full(batch.state.shape[1], params.snake_contrast, np.float32)
    contrasts[: 2 * cl] *= params.paddle_contrast
    return render(batch, contrasts, markers), {"target_attempts": attempts, "distractors_placed": placed}


def make_chunk(params: Params, seed: int, index: int, count: int):
    """Chunk ``index`` of a generation with ``seed``: (images (count, W*W) uint8, labels, stats)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, params.window, index]))
    labels = rng.permutation(np.arange(count) % 2)  # balanced within the chunk
    margin = np.asarray(params.margins)[rng.integers(0, len(params.margins), count)]
    images = np.zeros((count, params.window, params.window), np.uint8)
    stats = {"target_attempts": 0, "distractors_placed": 0}
    for m in params.margins:
        rows = np.flatnonzero(margin == m)
        images[rows], part = make_images(params, labels[rows], rng, int(m))
        stats = {k: stats[k] + part[k] for k in stats}
    return images.reshape(count, -1), labels, stats


def _chunk_job(job):
    return make_chunk(*job)


def generate_images(params: Params, count: int, seed: int, workers: int = 1, log=print):
    """All ``count`` images in order: (tokens (count, W*W) uint8, labels (count,), stats)."""
    starts = range(0, count, params.chunk)
    jobs = [(params, seed, i, min(params.chunk, count - s)) for i, s in enumerate(starts)]
    tokens = np.empty((count, params.window**2), np.uint8)
    labels = np.empty(count, np.int64)
    stats = {"target_attempts": 0, "distractors_placed": 0}
    started, last_log = time.perf_counter(), 0.0
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
    try:
        results = pool.imap(_chunk_job, jobs) if pool else map(_chunk_job, jobs)
        for start, (images, chunk_labels, part) in zip(starts, results, strict=True):
            tokens[start : start + len(chunk_labels)], labels[start : start + len(chunk_labels)] = images, chunk_labels
            stats = {k: stats[k] + part[k] for k in stats}
            elapsed = time.perf_counter() - started
            if elapsed - last_log >= 10 or start + len(chunk_labels) == count:
                done = start + len(chunk_labels)
                log(f"{params.window}x{params.window}: {done}/{count} images, {elapsed:.0f} s "
                    f"({done / max(elapsed, 1e-9):.0f} images/s)")
                last_log = elapsed
    finally:
        if pool:
            pool.terminate()
    return tokens, labels, stats


def split_bounds(count: int) -> dict[str, tuple[int, int]]:
    """Contiguous 80/10/10 ranges of the generation order."""
    train = round(count * SPLITS["train"])
    val = round(count * (SPLITS["train"] + SPLITS["val"]))
    return {"train": (0, train), "val": (train, val), "test": (val, count)}


def generate_command(task: str, out: Path, count: int, seed: int, contour_length: int = 14) -> str:
    extra = [] if contour_length == 14 else ["--contour-length", str(contour_length)]
    return shlex.join(["python", "-m", "data_prep", task, "--out", str(out), "--count", str(count),
                       "--seed", str(seed), *extra])


def write_task(out: Path, task: str, tokens: np.ndarray, labels: np.ndarray, source: dict, command: str) -> Path:
    """Write the 80/10/10 compact splits and the manifest of ``task`` under ``out``."""
    task_dir = Path(out) / task
    length = tokens.shape[1]
    with staged_task_dir(task_dir) as stage:
        entries = {}
        for split, (a, b) in split_bounds(labels.size).items():
            offsets = np.arange(b - a + 1, dtype=np.int64) * length
            entries[split] = write_split(stage, split, (tokens[a:b].reshape(-1), offsets), labels[a:b], 256)
        write_manifest(stage, task=task, vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries, source=source,
                       command=command)
    return task_dir


def generate(out: Path, task: str = "pathfinder", *, count: int = 200_000, seed: int = 0,
             workers: int | None = None, contour_length: int = 14, log: Callable[[str], None] = print) -> Path:
    """Generate ``task`` (pathfinder: 32x32, pathx: 128x128) at ``contour_length`` (14: LRA's hard split)
    into ``out/<task>/``; returns that folder."""
    if count < 10:
        raise ValueError(f"--count must be at least 10 (80/10/10 splits), got {count}")
    workers = len(os.sched_getaffinity(0)) if workers is None else workers
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    params = at_contour_length(TASKS[task], contour_length)
    started = time.perf_counter()
    tokens, labels, stats = generate_images(params, count, seed, workers, log)
    seconds = time.perf_counter() - started
    source = {
        "generator": "data_prep.pathfinder (procedure of drewlinsley/pathfinder snakes2.py, LRA parameters)",
        "difficulty": difficulty(contour_length),
        "rng": "numpy PCG64, SeedSequence([seed, window, chunk index]) per chunk",
        "seed": seed, "count": count, **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(params).items()},
        "label_balance": float(labels.mean()), **stats, "seconds": round(seconds, 1),
    }
    task_dir = write_task(out, task, tokens, labels, source, generate_command(task, out, count, seed, contour_length))
    log(f"{task}: wrote {count} images to {task_dir} in {seconds:.0f} s")
    return task_dir


def import_official(source: Path, out: Path, task: str, log: Callable[[str], None] = print) -> Path:
    """Convert the release's ``{imgs,metadata}`` of the hard split into ``out/<task>/`` (80/10/10 in
    metadata order, as LRA splits its tfds dataset)."""
    window = TASKS[task].window
    command = shlex.join(["python", "-m", "data_prep", task, "--out", str(out), "--source", str(source)])
    tokens, labels, info = import_release(source, window, command, log)
    if labels.size < 10:
        raise ValueError(f"{source}: only {labels.size} non-empty images; need at least 10 for 80/10/10 splits")
    task_dir = write_task(out, task, tokens, labels, {**info, "label_balance": float(labels.mean())}, command)
    log(f"{task}: imported {labels.size} images ({info['empty_images_skipped']} empty skipped) into {task_dir}")
    return task_dir


def add_arguments(parser: argparse.ArgumentParser, task: str = "pathfinder") -> None:
    """Options of ``python -m data_prep pathfinder|pathx``."""
    window = TASKS[task].window
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help=f"writes DIR/{task}/")
    parser.add_argument("--count", type=int, metavar="N", help="images to generate, split 80/10/10 (default 200000)")
    parser.add_argument("--seed", type=int, metavar="S", help="base random seed (default 0)")
    parser.add_argument("--contour-length", type=int, metavar="CL",
                        help="paddles per target snake: 6, 9, 14 are the release's easy, intermediate and hard "
                             "splits (default 14, the LRA standard)")
    parser.add_argument("--workers", type=int, metavar="W",
                        help="worker processes; the output does not depend on it (default: all CPUs)")
    parser.add_argument("--source", type=Path, metavar="PATH",
                        help=f"import the official pathfinder{window}/{HARD}/{{imgs,metadata}} instead")
    parser.add_argument("--preview", type=Path, metavar="FILE.png",
                        help="also write a labelled 4x4 grid of the first training images")


def main(args: argparse.Namespace, task: str = "pathfinder") -> int:
    """Run ``python -m data_prep pathfinder|pathx`` with parsed ``args``."""
    names = ("count", "seed", "workers", "contour_length")
    options = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.source is not None:
        if options:
            raise ValueError("--source imports the official hard split; --count, --seed, --workers and "
                             "--contour-length do not apply")
        task_dir = import_official(args.source, args.out, task)
    else:
        task_dir = generate(args.out, task, **options)
    if args.preview is not None:
        train = load_split(task_dir, "train", rebuild_cmd=f"python -m data_prep {task} --out {args.out}")
        window = TASKS[task].window
        shown = min(16, len(train))
        write_preview(args.preview, train.tokens[: shown * window**2].reshape(shown, -1), train.labels[:shown], window)
        print(f"{task}: preview written to {args.preview}")
    return 0
