"""Batches are padded to a multiple of ``task.data.pad_multiple``, never past the model's ``max_len``."""

from __future__ import annotations

import numpy as np

from lra.data import pad_batch
from lra.tasks.retrieval import pad_pairs


def sequence(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.int32)


def test_a_batch_rounds_up_to_the_multiple_but_not_past_max_len():
    """Before, a 2,000-token ListOps batch with pad_multiple=64 became 2,048 wide and the encoder refused it."""
    assert pad_batch([(sequence(100), 0), (sequence(30), 1)], 64, 2000)["tokens"].shape == (2, 128)
    full = pad_batch([(sequence(2000), 0), (sequence(5), 1)], 64, 2000)
    assert full["tokens"].shape == (2, 2000) and full["lengths"].tolist() == [2000, 5]
    assert pad_batch([(sequence(2000), 0)], 64)["tokens"].shape == (1, 2048)  # no limit given: the multiple
    pairs = pad_pairs([(sequence(3990), sequence(10), 1)], 64, 4000)
    assert pairs["tokens"].shape == (1, 4000) and pairs["tokens2"].shape == (1, 64)
