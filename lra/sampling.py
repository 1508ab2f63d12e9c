"""Training samplers that resume mid-epoch exactly: the order is a function of (seed, epoch) alone.

``EpochSampler`` is ``task.batching: random`` (the protocol); ``LengthGroupedSampler`` is
``task.batching: length_grouped`` (batches of similar lengths, less padding: another protocol).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler


class EpochSampler(Sampler[int]):
    """A fresh permutation of ``range(size)`` each epoch, drawn from its own generator seeded by
    (seed, epoch); ``resume_at(epoch, consumed)`` makes that epoch's next pass skip what was consumed.

    ``whole`` > 1 cuts each epoch's order to a multiple of it (whole batches: a batch trained in parts
    then never ends an epoch short, where Lightning would step on fewer parts). Lightning calls ``set_epoch``
    at every epoch start; the global torch RNG is never touched.

    Under DDP each of ``world`` ranks passes ``rank`` and takes every world-th example of the epoch's order (and
    of what is left of it after ``resume_at``): one step's ranks together take the examples one process would,
    and the order is cut to a multiple of ``world`` too, so every rank has as many batches (an epoch's short last
    batch loses up to ``world - 1`` examples that one process would take; none where the batch divides the split).
    """

    def __init__(self, size: int, seed: int, whole: int = 1, rank: int = 0, world: int = 1):
        if not 0 <= rank < world:
            raise ValueError(f"rank={rank} must be in [0, world={world})")
        self.size, self.seed, self.epoch, self.rank, self.world = size, seed, 0, rank, world
        whole = math.lcm(whole, world)
        self.kept = size - size % whole if size >= whole else size - size % world  # equal shares of the ranks
        if world > 1 and size and not self.kept:
            raise ValueError(f"{size} training examples cannot be shared by {world} processes: fewer than one each")
        self._resume: tuple[int, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, consumed: int) -> None:
        self._resume = (epoch, consumed)

    def __len__(self) -> int:
        return len(range(self.rank, self.kept, self.world))

    def epoch_order(self, generator: torch.Generator) -> list[int]:
        """The epoch's examples in training order, drawn from ``generator`` (seeded by seed and epoch)."""
        return torch.randperm(self.size, generator=generator).tolist()[:self.kept]

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = self.epoch_order(generator)
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip = self._resume[1]
        self._resume = None
        return iter(order[skip:][self.rank::self.world])


class LengthGroupedSampler(EpochSampler):
    """``EpochSampler``'s permutation regrouped into batches of similar lengths (the idea of fairseq's
    size-sorted batches and Hugging Face's ``group_by_length`` megabatches).

    The epoch's permutation is cut into pools of ``pool`` consecutive batches of ``batch_size``; each pool is
    sorted by ``lengths`` (ties keep their permuted order) and cut into batches; then every whole batch of the
    epoch is shuffled, and the few examples left over (fewer than a batch, when ``whole`` keeps them) end the
    epoch as one shorter batch, as in ``EpochSampler``. The order stays a function of (seed, epoch): the
    permutation and the batch shuffle come from the same seeded generator, so ``resume_at`` works unchanged.
    ``batch_size`` is the optimizer's batch: micro-batches cut each sorted batch into equal parts.
    """

    def __init__(self, lengths: Sequence[int] | np.ndarray, seed: int, batch_size: int, pool: int,
                 whole: int = 1, rank: int = 0, world: int = 1):
        if batch_size < 1 or pool < 1:
            raise ValueError(f"batch_size={batch_size} and pool={pool} must be >= 1")
        self.lengths = np.asarray(lengths, dtype=np.int64)  # (size,) tokens each example takes in a batch
        super().__init__(len(self.lengths), seed, whole, rank, world)
        self.batch_size, self.pool = batch_size, pool

    def epoch_order(self, generator: torch.Generator) -> list[int]:
        order = np.asarray(super().epoch_order(generator), dtype=np.int64)
        whole = len(order) - len(order) % self.batch_size
        span = self.pool * self.batch_size
        batches = []
        for start in range(0, whole, span):
            members = order[start:min(start + span, whole)]
            members = members[np.argsort(self.lengths[members], kind="stable")]
            batches.extend(members.reshape(-1, self.batch_size))
        shuffled = torch.randperm(len(batches), generator=generator).tolist()
        return np.concatenate([*(batches[i] for i in shuffled), order[whole:]]).tolist()
