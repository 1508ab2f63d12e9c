"""ListOps as generated for LRA (google-research/long-range-arena, lra_benchmarks/data/listops.py).

Published rules: a node at depth < max_depth (root depth 1) is an operator with probability VALUE_P,
else a digit 0-9; an operator (MIN, MAX, MED, SM) takes randint(2, max_args) arguments; at max_depth
every node is a digit. Length counts operators, digits and closing brackets. A tree is kept iff
min_length < length < max_length; duplicates are dropped; the first `train` unique trees in generation
order are train, the next `val` are val, the last `test` are test.

Randomness: numpy Generator (PCG64) seeded with `seed`. Trees are drawn BATCH_TREES at a time, level by
level; a tree stops growing as soon as it can no longer stay below max_length, and digits and operators
are drawn only for accepted trees. Every draw is independent, so the trees follow the published
distribution, while the random stream differs from the recursive original.

Tokens: ids index VOCAB (parentheses dropped). ``close_brackets=False`` also drops every ``]`` after the trees
are drawn (same trees, lengths and labels; the vocabulary keeps its ``]`` id): LRA's input pipeline did so before
March 2021 (google-research/long-range-arena issue 14), so the PyTorch ports very likely trained without them.
The TSV form is the published `to_string` output, e.g.
`( ( ( [MAX 2 ) 9 ) ] )` for MAX(2, 9), in `basic_{train,val,test}.tsv` with header `Source<TAB>Target`.
"""

from __future__ import annotations

import argparse
import inspect
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from data_prep.compact import SPLITS, fail, made_by, require_examples, write_manifest, write_split
from data_prep.listops_tsv import DIGIT_ID, END_ID, OP_ID, OPERATORS, VOCAB, read_tsv, write_tsv
from data_prep.staging import staged_task_dir

TASK = "listops"
NUM_CLASSES = 10
VALUE_P = 0.25
BATCH_TREES = 8192
FORMATS = ("compact", "tsv")


def _draw_shapes(rng: np.random.Generator, max_depth: int, max_args: int, max_length: int):
    """Shapes of BATCH_TREES trees, breadth first: per level (tree id, arity) arrays (arity 0 = digit).

    Returns (levels, lengths, complete); a tree that could not stay below max_length stops growing
    (complete False) and its length is then only a lower bound.
    """
    tree_of_node = np.arange(BATCH_TREES)
    lengths = np.zeros(BATCH_TREES, np.int64)
    complete = np.ones(BATCH_TREES, bool)
    levels = []
    for depth in range(1, max_depth + 1):
        arity = np.zeros(tree_of_node.size, np.int64)
        if depth < max_depth:
            is_op = rng.random(tree_of_node.size) <= VALUE_P
            arity[is_op] = rng.integers(2, max_args, size=int(is_op.sum()), endpoint=True)
        levels.append((tree_of_node, arity))
        is_op = arity > 0
        lengths += np.bincount(tree_of_node, minlength=BATCH_TREES)
        lengths += np.bincount(tree_of_node[is_op], minlength=BATCH_TREES)  # the closing bracket
        pending = np.bincount(tree_of_node, weights=arity, minlength=BATCH_TREES).astype(np.int64)
        complete &= lengths + pending < max_length  # each pending child adds at least 1
        grow = is_op & complete[tree_of_node]
        if not grow.any():
            break
        tree_of_node = np.repeat(tree_of_node[grow], arity[grow])
    return levels, lengths, complete


def _apply_operators(ops: np.ndarray, arity: np.ndarray, child_values: np.ndarray) -> np.ndarray:
    """Values of operator nodes; node j's arguments are the next arity[j] entries of child_values."""
    starts = np.cumsum(arity) - arity
    group = np.repeat(np.arange(arity.size), arity)
    ordered = child_values[np.lexsort((child_values, group))]
    median = (ordered[starts + (arity - 1) // 2] + ordered[starts + arity // 2]) // 2  # int(np.median)
    results = (
        np.minimum.reduceat(child_values, starts),
        np.maximum.reduceat(child_values, starts),
        median,
        np.add.reduceat(child_values, starts) % 10,
    )
    return np.choose(ops, results)


def _build_trees(rng: np.random.Generator, levels: list, accepted: np.ndarray):
    """Preorder token ids (flat), sizes and labels of the accepted trees of a batch, in batch order."""
    arities = [arity[accepted[tree]] for tree, arity in levels]
    arities = [a for a in arities if a.size]
    symbols = []
    for arity in arities:
        is_op = arity > 0
        symbol = np.empty(arity.size, np.int64)  # digit value for digits, operator index for operators
        symbol[~is_op] = rng.integers(0, 10, size=int((~is_op).sum()))
        symbol[is_op] = rng.integers(0, len(OPERATORS), size=int(is_op.sum()))
        symbols.append(symbol)
    # parents[d][c]: index in level d-1 of the parent of node c of level d (children keep parent order)
    parents = [None] + [np.repeat(np.flatnonzero(a > 0), a[a > 0]) for a in arities[:-1]]
    sizes, values = [None] * len(arities), [None] * len(arities)
    for d in reversed(range(len(arities))):
        is_op = arities[d] > 0
        sizes[d] = 1 + is_op.astype(np.int64)
        values[d] = symbols[d].copy()
        if d + 1 < len(arities):
            child_sizes = np.bincount(parents[d + 1], weights=sizes[d + 1], minlength=is_op.size)
            sizes[d] += child_sizes.astype(np.int64)
            values[d][is_op] = _apply_operators(symbols[d][is_op], arities[d][is_op], values[d + 1])
    tokens = np.empty(int(sizes[0].sum()), np.uint8)
    starts = np.cumsum(sizes[0]) - sizes[0]
    for d in range(len(arities)):
        if d:
            before = np.cumsum(sizes[d]) - sizes[d]
            first_sibling = np.repeat(np.cumsum(arities[d - 1]) - arities[d - 1], arities[d - 1])
            starts = starts[parents[d]] + 1 + before - before[first_sibling]
        is_op = arities[d] > 0
        tokens[starts] = np.where(is_op, OP_ID + symbols[d], DIGIT_ID + symbols[d])
        tokens[starts[is_op] + sizes[d][is_op] - 1] = END_ID
    return tokens, sizes[0], values[0]


def _max_reachable_length(max_depth: int, max_args: int) -> int:
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def _keep_unseen(tokens: np.ndarray, sizes: np.ndarray, seen: set[bytes], count: int) -> np.ndarray:
    """Mask of the trees not in ``seen`` (adding them), until ``seen`` holds ``count`` trees."""
    ends = np.cumsum(sizes)
    keep = np.zeros(sizes.size, bool)
    for i, (a, b) in enumerate(zip((ends - sizes).tolist(), ends.tolist(), strict=True)):
        key = tokens[a:b].tobytes()
        if len(seen) < count and key not in seen:
            seen.add(key)
            keep[i] = True
    return keep


def sample_trees(
    count: int,
    *,
    min_length: int,
    max_length: int,
    max_depth: int,
    max_args: int,
    seed: int,
    log: Callable[[str], None] = print,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Draw ``count`` unique trees by the published rules; returns (tokens, offsets, labels, drawn)."""
    if min(count, min_length) < 0 or max_depth < 1 or max_args < 2:
        raise ValueError("need count >= 0, min_length >= 0, max_depth >= 1 and max_args >= 2")
    if max_length <= min_length + 1 or _max_reachable_length(max_depth, max_args) <= min_length:
        raise ValueError(
            f"no tree has min_length ({min_length}) < length < max_length ({max_length}) "
            f"with max_depth {max_depth} and max_args {max_args}"
        )
    rng = np.random.default_rng(seed)
    seen: set[bytes] = set()
    chunks, size_chunks, label_chunks = [], [], []
    drawn, idle_batches, started, last_log = 0, 0, time.perf_counter(), 0.0
    while len(seen) < count:
        levels, lengths, complete = _draw_shapes(rng, max_depth, max_args, max_length)
        drawn += BATCH_TREES
        accepted = complete & (lengths > min_length) & (lengths < max_length)
        found = len(seen)
        if accepted.any():
            tokens, sizes, labels = _build_trees(rng, levels, accepted)
            keep = _keep_unseen(tokens, sizes, seen, count)
            chunks.append(tokens[np.repeat(keep, sizes)])
            size_chunks.append(sizes[keep])
            label_chunks.append(labels[keep])
        idle_batches = 0 if len(seen) > found else idle_batches + 1
        if idle_batches >= 100:
            raise ValueError(f"found only {len(seen)} unique trees of {count} requested in {drawn} draws")
        elapsed = time.perf_counter() - started
        if elapsed - last_log >= 5.0 or len(seen) == count:
            log(f"listops: {len(seen)}/{count} unique trees, {drawn} drawn, {elapsed:.1f} s")
            last_log = elapsed
    sizes = np.concatenate([np.zeros(0, np.int64), *size_chunks])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    tokens = np.concatenate([np.zeros(0, np.uint8), *chunks])
    return tokens, offsets, np.concatenate([np.zeros(0, np.int64), *label_chunks]), drawn


def generate_command(out: Path, fmt: str = "compact", close_brackets: bool = True, **options: int) -> str:
    """The ``python -m data_prep listops`` command that regenerates data with these options."""
    words = ["python", "-m", "data_prep", TASK, "--out", str(out)]
    for name, value in options.items():
        words += [f"--{name.replace('_', '-')}", str(value)]
    words += [] if close_brackets else ["--no-close-brackets"]
    return shlex.join(words + (["--format", fmt] if fmt != "compact" else []))


def generate(
    out: Path,
    *,
    train: int = 96000,
    val: int = 2000,
    test: int = 2000,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
    seed: int = 0,
    close_brackets: bool = True,
    fmt: str = "compact",
    log: Callable[[str], None] = print,
) -> Path:
    """Generate ListOps into ``out/listops/`` (compact splits + manifest); returns that folder.

    ``fmt="tsv"`` also writes the published ``basic_{train,val,test}.tsv`` there. ``close_brackets=False`` drops
    every ``]`` token (the pre-2021 LRA input pipeline's ListOps).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if not close_brackets and fmt == "tsv":
        raise ValueError("--no-close-brackets writes compact splits only: the TSV form needs its ] tokens")
    sizes = {"train": train, "val": val, "test": test}
    for split, count in sizes.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"--{split} (examples in the {split} split) must be an integer >= 1, got {count!r}")
    rules = dict(min_length=min_length, max_length=max_length, max_depth=max_depth, max_args=max_args)
    command = generate_command(out, fmt, close_brackets, **sizes, **rules, seed=seed)
    tokens, offsets, labels, drawn = sample_trees(sum(sizes.values()), **rules, seed=seed, log=log)
    if not close_brackets:
        tokens, offsets = without_close_brackets(tokens, offsets)
    task_dir = Path(out) / TASK
    with staged_task_dir(task_dir, stale=generated_export(task_dir)) as stage:
        entries, first = {}, 0
        for split, count in sizes.items():
            last = first + count
            flat = (tokens[offsets[first] : offsets[last]], offsets[first : last + 1] - offsets[first])
            entries[split] = write_split(stage, split, flat, labels[first:last], len(VOCAB))
            if fmt == "tsv":
                write_tsv(stage / f"basic_{split}.tsv", *flat, labels[first:last])
            first = last
        write_manifest(stage, task=TASK, vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries,
                       source=generator_source(rules, seed, drawn, close_brackets), command=command)
    log(f"listops: wrote {', '.join(f'{k} {v}' for k, v in sizes.items())} to {task_dir}")
    return task_dir


def generated_export(task_dir: Path) -> tuple[str, ...]:
    """The TSV names of ``task_dir`` that this generator exported (``made_by``: no import): they show the older
    trees, so new data drops them. () when the folder was imported (its TSVs may be the user's release files)."""
    return tuple(f"basic_{split}.tsv" for split in SPLITS) if made_by(task_dir) == "generator" else ()


def without_close_brackets(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same sequences with every ``]`` token removed: tokens (T',) and offsets (N + 1,)."""
    keep = tokens != END_ID
    kept_before = np.concatenate([[0], np.cumsum(keep)])  # kept tokens before each position
    return tokens[keep], kept_before[offsets]


def generator_source(rules: dict, seed: int, drawn: int, close_brackets: bool = True) -> dict:
    """The manifest's ``source`` of generated data: the rules, the seed, whether ``]`` tokens are kept and how many
    trees were drawn (a manifest without ``close_brackets`` kept them)."""
    return {
        "close_brackets": close_brackets,
        "generator": "data_prep.listops (rules of LRA lra_benchmarks/data/listops.py)",
        "rng": "numpy.random.default_rng (PCG64)",
        "batch_trees": BATCH_TREES,
        "value_p": VALUE_P,
        "seed": seed,
        **rules,
        "trees_drawn": drawn,
    }


def import_tsv(source_dir: Path, out: Path, *, log: Callable[[str], None] = print) -> Path:
    """Convert the official ``basic_{train,val,test}.tsv`` in ``source_dir`` into ``out/listops/``.

    ``source_dir`` may also be the release root holding ``listops-1000/``.
    """
    source_dir = Path(source_dir)
    if (source_dir / "listops-1000").is_dir():
        source_dir = source_dir / "listops-1000"
    command = shlex.join(["python", "-m", "data_prep", TASK, "--out", str(out), "--source", str(source_dir)])
    paths = {split: source_dir / f"basic_{split}.tsv" for split in SPLITS}
    for path in paths.values():
        if not path.exists():
            raise fail(path, "official ListOps file is missing", command)
    task_dir = Path(out) / TASK
    ours = generated_export(task_dir) if Path(source_dir).resolve() != task_dir.resolve() else ()
    with staged_task_dir(task_dir, stale=ours) as stage:
        entries, brackets = {}, False
        for split, path in paths.items():
            sequences, labels = read_tsv(path, command)
            require_examples(split, labels.size, path, command)
            entries[split] = write_split(stage, split, sequences, labels, len(VOCAB))
            brackets = brackets or any((sequence == END_ID).any() for sequence in sequences)
            log(f"listops: imported {labels.size} {split} trees from {path}")
        # close_brackets: whether the files keep their "]" tokens (the release's do), as the generator's option says
        source = {"import": "LRA release TSV", "path": str(source_dir.resolve()), "close_brackets": brackets}
        write_manifest(stage, task=TASK, vocab=VOCAB, num_classes=NUM_CLASSES, splits=entries, source=source,
                       command=command)
    log(f"listops: wrote {task_dir}")
    return task_dir


_GENERATOR_OPTIONS = ("train", "val", "test", "min_length", "max_length", "max_depth", "max_args", "seed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m data_prep listops``."""
    defaults = inspect.signature(generate).parameters
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="root of prepared data; writes OUT/listops/"
    )
    parser.add_argument(
        "--source",
        type=Path,
        metavar="PATH",
        help="folder with the official basic_{train,val,test}.tsv: import them instead of generating",
    )
    for name in _GENERATOR_OPTIONS:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            dest=name,
            metavar="N",
            help=f"generator option (default {defaults[name].default})",
        )
    parser.add_argument(
        "--no-close-brackets", action="store_false", dest="close_brackets", default=None,
        help="drop every ] token (LRA's input pipeline before March 2021; the PyTorch ports' ListOps)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        dest="fmt",
        help="'tsv' also writes the published basic_*.tsv files (default compact)",
    )


def main(args: argparse.Namespace) -> int:
    """Run ``python -m data_prep listops`` with parsed ``args``."""
    options = {name: getattr(args, name) for name in _GENERATOR_OPTIONS if getattr(args, name) is not None}
    if args.close_brackets is not None:
        options["close_brackets"] = args.close_brackets
    if args.source is not None:
        if options or args.fmt:
            raise ValueError(
                "--source imports the official files; size, seed, --no-close-brackets and --format options do not apply"
            )
        import_tsv(args.source, args.out)
    else:
        generate(args.out, fmt=args.fmt or "compact", **options)
    return 0
