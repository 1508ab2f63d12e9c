"""A training sampler that resumes mid-epoch exactly: the order is a function of (seed, epoch) alone."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class EpochSampler(Sampler[int]):
    """A fresh permutation of ``range(size)`` each epoch, drawn from its own generator seeded by
    (seed, epoch); ``resume_at(epoch, consumed)`` makes that epoch's next pass skip what was consumed.

    ``whole`` > 1 cuts each epoch's order to a multiple of it (whole batches: a batch trained in parts
    then never ends an epoch short, where Lightning would step on fewer parts). Lightning calls ``set_epoch``
    at every epoch start; the global torch RNG is never touched.
    """

    def __init__(self, size: int, seed: int, whole: int = 1):
        self.size, self.seed, self.epoch = size, seed, 0
        self.kept = size - size % whole if size >= whole else size
        self._resume: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, consumed: int) -> None:
        self._resume = (epoch, consumed)

    def __len__(self) -> int:
        return self.kept

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.size, generator=generator).tolist()[:self.kept]
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip = self._resume[1]
        self._resume = None
        return iter(order[skip:])
