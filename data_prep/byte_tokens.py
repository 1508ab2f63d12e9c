"""Byte tokens of LRA Text and Retrieval: UTF-8 byte ``b`` becomes id ``b + 1``, id 0 is padding.

This is tfds ``ByteTextEncoder`` without extra tokens, which the LRA input pipelines use
(lra_benchmarks/text_classification and matching); vocabulary size 257.
"""

from __future__ import annotations

import numpy as np

PAD_ID = 0
VOCAB = ("<pad>", *(f"<0x{b:02X}>" for b in range(256)))


class BytePacker:
    """Collects documents (bytes) as token ids in the compact layout: flat ids plus N+1 offsets.

    ``max_length`` > 0 keeps the first ``max_length`` bytes of each document; 0 keeps whole documents.
    """

    def __init__(self, max_length: int = 0):
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0 (0 keeps whole documents), got {max_length}")
        self.max_length = max_length
        self._buffer = bytearray()
        self._lengths: list[int] = []

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, document: bytes) -> None:
        piece = document[: self.max_length] if self.max_length else document
        self._buffer += piece
        self._lengths.append(len(piece))

    def packed(self) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, offsets)``: uint16 ids in [1, 256] and int64 offsets (N+1)."""
        tokens = np.frombuffer(bytes(self._buffer), dtype=np.uint8).astype(np.uint16) + 1
        offsets = np.zeros(len(self._lengths) + 1, dtype=np.int64)
        np.cumsum(self._lengths, out=offsets[1:])
        return tokens, offsets


def decode(ids: np.ndarray) -> bytes:
    """The bytes of a sequence of ids (padding dropped); inverse of the packing for tests and inspection."""
    ids = np.asarray(ids, dtype=np.int64)
    return (ids[ids != PAD_ID] - 1).astype(np.uint8).tobytes()
