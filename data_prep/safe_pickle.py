"""A restricted unpickler for pickles that hold only builtin containers and numpy arrays.

The CIFAR-10 python batches are Python 2 protocol-2 pickles of a dict whose ``data`` is a numpy array
(``numpy.core.multiarray._reconstruct``, ``numpy.ndarray``, ``numpy.dtype``); a copy re-saved by Python 3
with protocol < 3 also names ``_codecs.encode`` for every bytes object. Those are the only globals
resolved here; any other name (``os.system``, ``builtins.eval``, ...) is refused before it is looked up,
so a crafted file cannot run code. Never use plain ``pickle.load`` on downloaded files.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

try:
    from numpy._core.multiarray import _reconstruct as _numpy_reconstruct
except ImportError:  # numpy < 1.26 has no numpy._core
    from numpy.core.multiarray import _reconstruct as _numpy_reconstruct


def _reconstruct(subtype, shape, dtype):
    """numpy's array constructor for pickles, limited to plain ndarrays."""
    if subtype is not np.ndarray:
        raise pickle.UnpicklingError(f"refusing to build an array of type {subtype!r}")
    return _numpy_reconstruct(subtype, shape, dtype)


def _latin1_encode(text, encoding="latin1"):
    """``_codecs.encode`` as protocol-2 pickles use it for bytes: ``encode(str, 'latin1')`` only."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("refusing _codecs.encode other than (str, 'latin1')")
    return text.encode("latin-1")


ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class ArrayUnpickler(pickle.Unpickler):
    """Unpickler that resolves only ALLOWED_GLOBALS and has no persistent ids."""

    def find_class(self, module: str, name: str):
        allowed = ALLOWED_GLOBALS.get((module, name))
        if allowed is None:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name} (not a numpy-array pickle)")
        return allowed

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing persistent ids")


def loads(blob: bytes, *, encoding: str = "bytes"):
    """Unpickle ``blob`` with ArrayUnpickler; Python 2 ``str`` becomes ``bytes`` by default."""
    return ArrayUnpickler(io.BytesIO(blob), encoding=encoding).load()


def load_file(path: Path, *, encoding: str = "bytes"):
    """Unpickle the file at ``path`` with ArrayUnpickler."""
    with open(path, "rb") as f:
        return ArrayUnpickler(f, encoding=encoding).load()
