"""Multi-query associative recall (MQAR; Arora et al., Zoology, arXiv 2312.04927; used by BASED, arXiv
2402.18668, and the LLoPS paper's ablations): ``num_pairs`` key-value pairs, then every key again at a
random later position; the model must output the key's value at each query position.

    k_1 v_1 k_2 v_2 ... k_P v_P  _ _ k_3 _ k_1 _ ... _ k_2 _        targets: v_3 at k_3, v_1 at k_1, ...

Keys and values come from disjoint halves of the vocabulary (id 0 = pad, 1 = blank filler), every key
of a sequence is distinct. The data is synthetic and made in memory from ``task.data.seed`` (no files);
the model is causal (``task.causal``) and scores every query position, so accuracy is over queries.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset
from torchmetrics.classification import MulticlassAccuracy

from data_prep.compact import CompactSplit
from lra_base.errors import UserError

from ..data import CompactDataModule
from ..module import ClassificationModule
from ..settings import Model, Run, Task

LRA_COLUMN = None  # not an LRA task: no column in LRA's tables (lra.task_facts)
AVERAGED = False  # not in the LRA average
LENGTH_VARYING = False  # every sequence has one length

IGNORE = -100  # target at positions that are not queries
BLANK = 1
FIRST_KEY = 2


def vocabulary(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Key ids and value ids: the two halves of ``[2, vocab_size)``."""
    half = (vocab_size - FIRST_KEY) // 2
    return np.arange(FIRST_KEY, FIRST_KEY + half), np.arange(FIRST_KEY + half, FIRST_KEY + 2 * half)


def make_mqar(count: int, *, seq_len: int, num_pairs: int, vocab_size: int, seed: int) -> CompactSplit:
    """``count`` MQAR sequences of ``seq_len`` tokens; per-token targets in ``extra["targets"]``."""
    keys, values = vocabulary(vocab_size)
    if num_pairs > len(keys):
        raise UserError(f"ar: {num_pairs} pairs need {num_pairs} distinct keys, but vocab_size={vocab_size} "
                        f"has {len(keys)}; raise task.vocab_size to at least {2 * num_pairs + FIRST_KEY}")
    if seq_len < 3 * num_pairs:
        raise UserError(f"ar: seq_len={seq_len} cannot hold {num_pairs} pairs and their {num_pairs} queries; "
                        f"use task.seq_len >= {3 * num_pairs}")
    rng = np.random.default_rng(seed)
    order = rng.random((count, len(keys))).argsort(axis=1)[:, :num_pairs]
    k = keys[order]  # (count, P) distinct per row
    v = rng.choice(values, size=(count, num_pairs))  # (count, P)
    tokens = np.full((count, seq_len), BLANK, dtype=np.int64)
    targets = np.full((count, seq_len), IGNORE, dtype=np.int64)
    tokens[:, 0 : 2 * num_pairs : 2], tokens[:, 1 : 2 * num_pairs : 2] = k, v
    free = seq_len - 2 * num_pairs
    slots = 2 * num_pairs + rng.random((count, free)).argsort(axis=1)[:, :num_pairs]  # (count, P) positions
    rows = np.arange(count)[:, None]
    tokens[rows, slots], targets[rows, slots] = k, v
    offsets = np.arange(count + 1, dtype=np.int64) * seq_len
    labels = np.zeros(count, dtype=np.int64)  # unused: the targets are per token
    return CompactSplit(tokens.reshape(-1), offsets, labels, {"targets": targets})


class RecallDataset(Dataset):
    """Tokens and per-token targets of one split."""

    def __init__(self, split: CompactSplit):
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.split.sequence(i), self.split.extra["targets"][i]


def stack_batch(items: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, Tensor]:
    """Equal-length sequences: ``tokens`` and ``targets`` ``(B, N)``, ``lengths`` ``(B,)``."""
    tokens = torch.from_numpy(np.stack([t for t, _ in items]))
    targets = torch.from_numpy(np.stack([y for _, y in items]))
    lengths = torch.full((len(items),), tokens.shape[1], dtype=torch.long)
    return {"tokens": tokens, "lengths": lengths, "targets": targets}


class DataModule(CompactDataModule):
    """Synthetic splits made in memory; split ``i`` uses seed ``task.data.seed + i`` (fixed across runs)."""

    def prepare_data(self) -> None:
        pass

    @property
    def vocab_size(self) -> int:
        return int(self.task.own["vocab_size"])

    @property
    def num_classes(self) -> int:
        return int(self.task.own["vocab_size"])

    def setup(self, stage: str | None = None) -> None:
        if self.data:
            return
        if self.task.num_classes != self.task.own["vocab_size"]:
            raise UserError("ar: task.num_classes must equal task.vocab_size (the model predicts a token)")
        data = self.task.data.own  # split sizes and seed: the data is made here
        shape = {k: int(self.task.own[k]) for k in ("seq_len", "num_pairs", "vocab_size")}
        if shape["seq_len"] > self.task.max_len:
            raise UserError(f"ar: task.seq_len={shape['seq_len']} exceeds task.max_len={self.task.max_len}")
        for i, split in enumerate(self.splits):
            self.data[split] = make_mqar(int(data[split]), seed=int(data["seed"]) + i, **shape)

    def majority_acc(self) -> float:
        """Query accuracy of always answering the most frequent training value."""
        self.setup()
        train, test = self.data["train"].extra["targets"], self.data["test"].extra["targets"]
        majority = np.bincount(train[train != IGNORE]).argmax()
        return float((test[test != IGNORE] == majority).mean())

    def make_dataset(self, split: CompactSplit) -> Dataset:
        return RecallDataset(split)

    @classmethod
    def example_length(cls, task: Task) -> int:
        return int(task.own["seq_len"])

    @classmethod
    def example_batch(cls, task: Task, batch_size: int, vocab_size: int,
                      generator: torch.Generator) -> dict[str, Tensor]:
        """Random tokens with a target at every position (``targets``), as ``stack_batch`` lays them out."""
        batch = super().example_batch(task, batch_size, vocab_size, generator)
        shape = batch["tokens"].shape
        return {**batch, "targets": torch.randint(0, task.num_classes, shape, generator=generator)}

    def collate(self, items):
        return stack_batch(items)


class LitModule(ClassificationModule):
    """Causal token classifier: a linear read-out of every position, loss and accuracy on queries only."""

    fixed_pooling = "none"  # every position is read out

    def __init__(self, run: Run, vocab_size: int, num_classes: int):
        super().__init__(run, vocab_size, num_classes)
        metric = MulticlassAccuracy(num_classes=num_classes, average="micro", ignore_index=IGNORE)
        self.train_acc, self.val_acc, self.test_acc = metric, metric.clone(), metric.clone()

    def build_head(self, model: Model, num_classes: int) -> nn.Module:
        return nn.Linear(model.dim, num_classes)

    def model_step(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        logits = self(batch).flatten(0, 1)  # (B N, vocab)
        targets = batch["targets"].flatten()
        return F.cross_entropy(logits, targets, ignore_index=IGNORE), logits, targets
