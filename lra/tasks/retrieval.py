"""Retrieval (LRA, arXiv 2011.04006): does one AAN paper cite the other (Radev et al. 2013), from the
bytes of both, up to 4000 each, 2 classes. One shared encoder embeds both documents into u and v; the
head sees [u, v, u*v, u-v] (the ports' SCHeadDual; LRA ``classifier_head_dual`` with NLI interaction).
Data is converted from files the user supplies (``python -m data_prep retrieval``)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from data_prep import retrieval as converter
from data_prep.compact import CompactSplit
from lra_base.errors import UserError

from ..data import CompactDataModule, missing_source_message, pad_batch
from ..module import ClassificationModule
from ..settings import Model, Task

LRA_COLUMN = 3  # its column in LRA's tables (lra.task_facts)
AVERAGED = True  # in the LRA average
LENGTH_VARYING = True  # sequences of many lengths: task.batching=length_grouped saves padding


class PairDataset(Dataset):
    """Both documents of a pair (each truncated to ``max_len``) and its label per item."""

    def __init__(self, split: CompactSplit, max_len: int):
        self.split, self.max_len = split, max_len
        self.tokens2, self.offsets2 = split.extra["tokens2"], split.extra["offsets2"]

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, int]:
        second = self.tokens2[self.offsets2[i] : self.offsets2[i + 1]]
        return self.split.sequence(i)[: self.max_len], second[: self.max_len], int(self.split.labels[i])


def pad_pairs(items: list[tuple[np.ndarray, np.ndarray, int]], multiple: int = 1,
              limit: int | None = None) -> dict[str, Tensor]:
    """``tokens``/``lengths`` of document 1, ``tokens2``/``lengths2`` of document 2, ``labels`` (``pad_batch``)."""
    first = pad_batch([(a, y) for a, _, y in items], multiple, limit)
    second = pad_batch([(b, y) for _, b, y in items], multiple, limit)
    return {**first, "tokens2": second["tokens"], "lengths2": second["lengths"]}


class DataModule(CompactDataModule):
    """AAN pairs from ``tokens``/``offsets`` and ``tokens2``/``offsets2`` of each split."""

    def rebuild_command(self) -> str:
        return converter.prepare_command(self.root, max_length=max(converter.MAX_LENGTH, self.task.max_len))

    def missing_data_message(self) -> str:
        return missing_source_message(self.task_dir, converter.SOURCE_HELP, self.rebuild_command())

    def prepare_data(self) -> None:
        super().prepare_data()
        self.refuse_cut_examples("documents")

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        for split, data in self.data.items():
            if "tokens2" not in data.extra:
                raise UserError(f"{self.task_dir}: split {split!r} has no second document (tokens2); it is "
                                f"not retrieval data. Convert it again with: {self.rebuild_command()}")

    def make_dataset(self, split: CompactSplit) -> Dataset:
        return PairDataset(split, self.task.max_len)

    def collate(self, items):
        return pad_pairs(items, self.task.data.pad_multiple, self.task.max_len)

    @classmethod
    def example_batch(cls, task: Task, batch_size: int, vocab_size: int,
                      generator: torch.Generator) -> dict[str, Tensor]:
        """Two full-length documents per example (``tokens``/``lengths`` and ``tokens2``/``lengths2``)."""
        batch = super().example_batch(task, batch_size, vocab_size, generator)
        second = torch.randint(1, vocab_size, batch["tokens"].shape, generator=generator)
        return {**batch, "tokens2": second, "lengths2": batch["lengths"].clone()}


class DualHead(nn.Sequential):
    """``[u, v, u*v, u-v] -> Linear(4 dim, hidden) -> ReLU -> Linear(hidden, classes)``."""

    def __init__(self, dim: int, hidden: int, num_classes: int):
        super().__init__(nn.Linear(4 * dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def pair_features(u: Tensor, v: Tensor) -> Tensor:
    """The head input ``[u, v, u*v, u-v]`` ``(B, 4 dim)`` of pooled documents ``u``, ``v`` ``(B, dim)``."""
    return torch.cat([u, v, u * v, u - v], dim=-1)


class LitModule(ClassificationModule):
    """Dual encoder: the shared encoder embeds both documents in one pass over a 2B batch."""

    def build_head(self, model: Model, num_classes: int) -> nn.Module:
        return DualHead(model.dim, model.ffn_dim, num_classes)

    def embed_pair(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """Pooled ``(u, v)``, each ``(B, dim)``: both documents right-padded to one width, encoded together."""
        first, second = batch["tokens"], batch["tokens2"]
        width = max(first.shape[1], second.shape[1])
        tokens = torch.cat([F.pad(first, (0, width - first.shape[1])), F.pad(second, (0, width - second.shape[1]))])
        pooled = self.encoder(tokens, torch.cat([batch["lengths"], batch["lengths2"]]))  # (2B, dim)
        return pooled.chunk(2)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.head(pair_features(*self.embed_pair(batch)))

    def tokens_in(self, batch: dict[str, Tensor]) -> int:
        return int(batch["lengths"].sum()) + int(batch["lengths2"].sum())  # both documents
