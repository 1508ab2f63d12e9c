"""Analysis tests run many tiny ops (pinv, eigvalsh, small matmuls): one thread is faster for them."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """On a busy 2-core machine two threads make tiny LAPACK calls ~100x slower; restore afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
