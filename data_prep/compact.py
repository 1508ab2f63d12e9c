"""The prepared-data format shared by every LRA task ("lra-compact", version 1).

A task lives in ``DIR/<task>/``: one ``<split>.npz`` per split and ``manifest.json``. A split file holds
``tokens`` (all sequences concatenated, smallest unsigned dtype for the vocabulary), ``offsets`` (int64,
N+1; sequence i is ``tokens[offsets[i]:offsets[i+1]]``) and ``labels`` (int64, N). Tasks with two
sequences per example add ``tokens2``/``offsets2`` through :func:`write_arrays`. Files are written to a
temporary name in the same folder and renamed into place (``lra_base.atomic``); the manifest is written last
and records each split's SHA-256, so a loader can refuse data that does not match it.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lra_base.atomic import atomic_output

FORMAT = "lra-compact"
VERSION = 1
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "val", "test")  # every task folder's splits, in the order they are written and loaded
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # earliest zip date; fixed so files are reproducible byte for byte


class DataError(RuntimeError):
    """Prepared data is missing, corrupt or does not match its manifest."""


def fail(path: Path | str, problem: str, rebuild_cmd: str) -> DataError:
    """Build the DataError for ``path``: names the file, the problem and the command that rebuilds it."""
    return DataError(f"{path}: {problem}. Rebuild it with: {rebuild_cmd}")


def require_examples(split: str, count: int, source: Path | str, command: str) -> None:
    """Refuse to write a split with no examples (a run could not validate, train or test on it), naming the
    source it came from."""
    if count < 1:
        raise DataError(f"{source}: gives {count} {split} examples; every split needs at least one. Supply a "
                        f"source with {split} examples, then run: {command}")


def manifest_path(task_dir: Path) -> Path:
    """Path of the manifest of the task prepared in ``task_dir``."""
    return Path(task_dir) / MANIFEST_NAME


def made_by(task_dir: Path) -> str | None:
    """How ``task_dir``'s data was made, read from its manifest without checking it: ``"import"`` (official or user
    files), ``"generator"``, or None when there is no readable manifest."""
    try:
        source = json.loads(manifest_path(task_dir).read_text(encoding="utf-8"))["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None if not isinstance(source, dict) else "import" if "import" in source else "generator"


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest dtype that holds token ids below ``vocab_size``."""
    if vocab_size <= 1 << 8:
        return np.dtype(np.uint8)
    if vocab_size <= 1 << 16:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def inside(folder: Path, relative: str | Path) -> Path | None:
    """``folder / relative`` when it resolves (symbolic links followed) inside ``folder``, else None."""
    folder = Path(folder).resolve()
    path = (folder / relative).resolve()
    return path if path != folder and path.is_relative_to(folder) else None


def pack_sequences(
    sequences: Sequence[np.ndarray] | tuple[np.ndarray, np.ndarray], vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Flat ``(tokens, offsets)`` from a list of 1-D id arrays or an already-flat ``(tokens, offsets)``.

    A tuple of exactly two arrays is read as the flat form; pass a list for two sequences.
    Raises ValueError on ids outside ``[0, vocab_size)`` or inconsistent offsets.
    """
    if isinstance(sequences, tuple) and len(sequences) == 2:
        tokens = np.asarray(sequences[0])
        offsets = np.asarray(sequences[1], dtype=np.int64)
    else:
        arrays = [np.asarray(s) for s in sequences]
        if any(a.ndim != 1 for a in arrays):
            raise ValueError("every sequence must be a 1-D array of token ids")
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    if tokens.ndim != 1 or offsets.ndim != 1 or offsets.size == 0:
        raise ValueError("tokens and offsets must be 1-D, offsets of length N+1")
    if offsets[0] != 0 or offsets[-1] != tokens.size or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must start at 0, never decrease and end at len(tokens)")
    if tokens.size and not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"token ids must be integers, got dtype {tokens.dtype}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    return tokens.astype(token_dtype(vocab_size), copy=False), offsets


def write_arrays(
    task_dir: Path, split: str, arrays: Mapping[str, np.ndarray], *, compress: bool = False
) -> dict:
    """Write named arrays to ``<split>.npz`` atomically; returns ``{"file", "sha256"}``.

    Unlike ``np.savez`` the zip entries carry a fixed timestamp, so equal arrays give equal checksums.
    """
    path = Path(task_dir) / f"{split}.npz"
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_output(path) as f, zipfile.ZipFile(f, "w", compression=method) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
            info.compress_type = method
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
    return {"file": path.name, "sha256": file_sha256(path)}


def write_split(
    task_dir: Path,
    split: str,
    sequences: Sequence[np.ndarray] | tuple[np.ndarray, np.ndarray],
    labels: np.ndarray,
    vocab_size: int,
    *,
    compress: bool = False,
) -> dict:
    """Write one split as ``<split>.npz`` and return its manifest entry.

    ``sequences`` is a list of 1-D token-id arrays or a flat ``(tokens, offsets)`` tuple; ``labels`` has
    one integer per sequence. The entry holds file, count, max_length, min_length and sha256.
    """
    tokens, offsets = pack_sequences(sequences, vocab_size)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size != offsets.size - 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be 1-D integers, one per sequence ({offsets.size - 1})")
    if labels.size == 0:
        raise ValueError(f"split {split!r} has no examples; every split needs at least one")
    lengths = np.diff(offsets)
    if lengths.min() < 1:  # the importers name the source file first; this guards every other writer
        raise ValueError(f"split {split!r}: sequence {int(np.argmin(lengths))} is empty; every example needs a token")
    entry = write_arrays(
        task_dir,
        split,
        {"tokens": tokens, "offsets": offsets, "labels": labels.astype(np.int64)},
        compress=compress,
    )
    return {
        "file": entry["file"],
        "count": int(labels.size),
        "max_length": int(lengths.max()) if lengths.size else 0,
        "min_length": int(lengths.min()) if lengths.size else 0,
        "sha256": entry["sha256"],
    }


def write_manifest(
    task_dir: Path,
    *,
    task: str,
    vocab: Sequence[str],
    num_classes: int,
    splits: Mapping[str, dict],
    source: Mapping,
    command: str,
) -> Path:
    """Write ``manifest.json`` atomically (call it after every split is written); returns its path."""
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "task": task,
        "vocab": list(vocab),
        "vocab_size": len(vocab),
        "num_classes": int(num_classes),
        "splits": {name: dict(entry) for name, entry in splits.items()},
        "source": dict(source),
        "command": command,
    }
    path = manifest_path(task_dir)
    with atomic_output(path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    return path


@dataclass(frozen=True, eq=False)
class CompactSplit:
    """One loaded split: sequence i is ``tokens[offsets[i]:offsets[i+1]]`` with label ``labels[i]``."""

    tokens: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)  # e.g. tokens2/offsets2

    def __len__(self) -> int:
        return int(self.labels.size)

    @property
    def lengths(self) -> np.ndarray:
        """Length of every sequence, int64 (N,)."""
        return np.diff(self.offsets)

    def sequence(self, i: int) -> np.ndarray:
        """Token ids of sequence ``i``."""
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


_REQUIRED_FIELDS = {
    "task": str,
    "vocab": list,
    "vocab_size": int,
    "num_classes": int,
    "splits": dict,
    "source": dict,
    "command": str,
}
_SPLIT_FIELDS = {"file": str, "count": int, "max_length": int, "min_length": int, "sha256": str}


def load_manifest(task_dir: Path, *, rebuild_cmd: str) -> dict:
    """Read and check ``manifest.json`` of ``task_dir``; raises DataError naming what is wrong."""
    task_dir = Path(task_dir)
    path = manifest_path(task_dir)
    if not task_dir.is_dir():
        raise fail(task_dir, "prepared-data folder does not exist", rebuild_cmd)
    if not path.is_file():
        raise fail(
            path, "manifest is missing (data not prepared, or preparation did not finish)", rebuild_cmd
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise fail(path, f"cannot read manifest ({e})", rebuild_cmd) from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise fail(path, f"field 'format' is not {FORMAT!r}", rebuild_cmd)
    if manifest.get("version") != VERSION:
        raise fail(path, f"field 'version' is {manifest.get('version')!r}, expected {VERSION}", rebuild_cmd)
    for name, kind in _REQUIRED_FIELDS.items():
        if not isinstance(manifest.get(name), kind):
            raise fail(path, f"field {name!r} is missing or not a {kind.__name__}", rebuild_cmd)
    if manifest["vocab_size"] != len(manifest["vocab"]):
        raise fail(path, "field 'vocab_size' differs from the length of 'vocab'", rebuild_cmd)
    for split, entry in manifest["splits"].items():
        for name, kind in _SPLIT_FIELDS.items():
            if not isinstance(entry, dict) or not isinstance(entry.get(name), kind):
                raise fail(
                    path, f"field 'splits.{split}.{name}' is missing or not a {kind.__name__}", rebuild_cmd
                )
        if Path(entry["file"]).name != entry["file"] or inside(task_dir, entry["file"]) is None:
            raise fail(path, f"field 'splits.{split}.file' ({entry['file']!r}) is not a file in {task_dir}",
                       rebuild_cmd)
    return manifest


def load_split(task_dir: Path, split: str, *, rebuild_cmd: str, verify: bool = True) -> CompactSplit:
    """Load one split after checking it against the manifest; every failure raises DataError.

    ``verify`` also compares the file's SHA-256 with the manifest (reads the file twice).
    """
    manifest = load_manifest(task_dir, rebuild_cmd=rebuild_cmd)
    if split not in manifest["splits"]:
        known = ", ".join(sorted(manifest["splits"])) or "none"
        raise fail(manifest_path(task_dir), f"split {split!r} not listed (has: {known})", rebuild_cmd)
    entry = manifest["splits"][split]
    path = Path(task_dir) / entry["file"]  # load_manifest checked that it stays inside task_dir
    if not path.is_file():
        raise fail(path, f"split file for {split!r} is missing", rebuild_cmd)
    if verify and file_sha256(path) != entry["sha256"]:
        raise fail(path, "sha256 does not match the manifest (file changed or corrupt)", rebuild_cmd)
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except Exception as e:  # zipfile, zlib and numpy each raise their own kinds for a corrupt file
        raise fail(path, f"cannot read arrays ({type(e).__name__}: {e})", rebuild_cmd) from e
    _check_arrays(path, arrays, entry, manifest, rebuild_cmd)
    extra = {k: v for k, v in arrays.items() if k not in ("tokens", "offsets", "labels")}
    return CompactSplit(arrays["tokens"], arrays["offsets"], arrays["labels"], extra)


def _check_arrays(path: Path, arrays: dict, entry: dict, manifest: dict, rebuild_cmd: str) -> None:
    """Check shapes, offsets, token ids and labels of a loaded split against its manifest entry."""
    for name in ("tokens", "offsets", "labels"):
        if name not in arrays:
            raise fail(path, f"array {name!r} is missing", rebuild_cmd)
    labels = arrays["labels"]
    count = entry["count"]
    if labels.ndim != 1 or labels.size != count or not np.issubdtype(labels.dtype, np.integer):
        raise fail(path, f"array 'labels' is not {count} integers as the manifest says", rebuild_cmd)
    if count and (labels.min() < 0 or labels.max() >= manifest["num_classes"]):
        raise fail(path, f"array 'labels' has values outside [0, {manifest['num_classes']})", rebuild_cmd)
    for tokens_name in (k for k in arrays if k.startswith("tokens")):
        offsets_name = "offsets" + tokens_name[len("tokens") :]
        tokens, offsets = arrays[tokens_name], arrays.get(offsets_name)
        if offsets is None:
            raise fail(path, f"array {offsets_name!r} is missing", rebuild_cmd)
        if offsets.ndim != 1 or offsets.size != count + 1 or offsets.dtype != np.int64:
            raise fail(path, f"array {offsets_name!r} is not {count + 1} int64 offsets", rebuild_cmd)
        lengths = np.diff(offsets)
        if tokens.ndim != 1 or offsets[0] != 0 or offsets[-1] != tokens.size or np.any(lengths < 0):
            raise fail(path, f"arrays {tokens_name!r}/{offsets_name!r} are inconsistent", rebuild_cmd)
        if count and lengths.min() < 1:  # no mechanism need handle a batch without a real token
            empty = np.flatnonzero(lengths < 1)
            raise fail(path, f"array {tokens_name!r} holds {empty.size} empty sequence(s), the first at index "
                             f"{int(empty[0])}; every example needs at least one token (older importers let empty "
                             f"reviews through)", rebuild_cmd)
        if not np.issubdtype(tokens.dtype, np.integer):
            raise fail(path, f"array {tokens_name!r} does not hold integer ids", rebuild_cmd)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= manifest["vocab_size"]):
            raise fail(
                path, f"array {tokens_name!r} has ids outside [0, {manifest['vocab_size']})", rebuild_cmd
            )
        if (
            tokens_name == "tokens"
            and count
            and (lengths.max() != entry["max_length"] or lengths.min() != entry["min_length"])
        ):
            raise fail(
                path, "sequence lengths differ from max_length/min_length in the manifest", rebuild_cmd
            )
