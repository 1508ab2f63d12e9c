"""Datasets and the base DataModule over prepared data in the compact format (``data_prep.compact``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from data_prep.compact import SPLITS, CompactSplit, DataError, load_manifest, load_split, manifest_path
from data_prep.fetch_sources import fetch_command
from lra_base.errors import UserError

from .data_identity import data_identity
from .sampling import EpochSampler, LengthGroupedSampler
from .settings import Run, Task

log = logging.getLogger(__name__)


class SequenceDataset(Dataset):
    """One tokenised sequence and its label per item, truncated to ``max_len``."""

    def __init__(self, split: CompactSplit, max_len: int):
        self.split, self.max_len = split, max_len

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.split.sequence(i)[: self.max_len], int(self.split.labels[i])


def pad_batch(items: list[tuple[np.ndarray, int]], multiple: int = 1, limit: int | None = None) \
        -> dict[str, torch.Tensor]:
    """Right-pad with id 0 to the longest sequence, rounded up to ``multiple`` but never past ``limit`` (the model's
    ``max_len``, which the sequences are cut to); keep true lengths."""
    lengths = torch.tensor([len(seq) for seq, _ in items], dtype=torch.long)
    n = int(lengths.max())
    n = -(-n // multiple) * multiple
    n = n if limit is None else max(min(n, limit), int(lengths.max()))
    tokens = torch.zeros(len(items), n, dtype=torch.long)
    for row, (seq, _) in enumerate(items):
        tokens[row, : len(seq)] = torch.from_numpy(seq.astype(np.int64))
    labels = torch.tensor([label for _, label in items], dtype=torch.long)
    return {"tokens": tokens, "lengths": lengths, "labels": labels}


def take(split: CompactSplit, indices: np.ndarray) -> CompactSplit:
    """Examples ``indices`` of ``split``; every ``tokens*``/``offsets*`` pair is gathered, other extras
    are per-example arrays."""
    indices = np.asarray(indices, dtype=np.int64)

    def gather(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = offsets[indices], offsets[indices + 1]
        new_offsets = np.concatenate([[0], np.cumsum(ends - starts)]).astype(np.int64)
        pieces = [tokens[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
        return (np.concatenate(pieces) if pieces else tokens[:0]), new_offsets

    tokens, offsets = gather(split.tokens, split.offsets)
    extra = {}
    for name, array in split.extra.items():
        if name.startswith("tokens"):
            offsets_name = "offsets" + name[len("tokens"):]
            extra[name], extra[offsets_name] = gather(array, split.extra[offsets_name])
        elif not name.startswith("offsets"):
            extra[name] = array[indices]
    return CompactSplit(tokens, offsets, split.labels[indices], extra)


def missing_source_message(task_dir: Path, needs: str, command: str) -> str:
    """The message for a converted task whose data was never prepared: the command that downloads and converts it
    (``python -m data_prep fetch``; run.py never downloads unasked), or how to convert files the user has."""
    return (f"no prepared data under {task_dir}. Download the official files and convert them with:\n  "
            f"{fetch_command(task_dir.name, task_dir.parent)}\nor, with the files at hand ({needs}), convert them "
            f"with:\n  {command}\n(PATH = where those files are)")


class CompactDataModule(pl.LightningDataModule):
    """Loads ``<task.data.root>/<task.name>/`` (train/val/test) and serves padded batches.

    Subclasses may override ``prepare_data`` to generate missing data, ``missing_data_message`` to explain
    how to get data that cannot be generated, and ``rebuild_command``. ``task.data.limit`` (e.g.
    ``{val: 1000, test: 2000}``) keeps a fixed random subset of those splits (seed 0, same for every run).
    """

    splits = SPLITS

    def __init__(self, run: Run):
        super().__init__()
        self.run = run
        self.task = run.task
        self.root = Path(self.task.data.root)
        self.task_dir = self.root / self.task.name
        self.data: dict[str, CompactSplit] = {}
        self.loaded_identity: dict[str, Any] | None = None  # the splits' checksums as setup loaded them

    def rebuild_command(self) -> str:
        return f"python -m data_prep {self.task.name} --out {self.root}"

    def missing_data_message(self) -> str | None:
        """What ``prepare_data`` says when the data was never prepared; None leaves it to ``setup``."""
        return None

    def prepare_data(self) -> None:
        if not manifest_path(self.task_dir).is_file() and (message := self.missing_data_message()):
            raise UserError(message)

    def manifest(self) -> dict[str, Any]:
        try:
            manifest = load_manifest(self.task_dir, rebuild_cmd=self.rebuild_command())
        except DataError as err:
            raise UserError(str(err)) from None
        if manifest["task"] != self.task.name:  # a copied or renamed folder: another task's examples
            raise UserError(f"{manifest_path(self.task_dir)} holds {manifest['task']} data, not {self.task.name}: "
                            f"point task.data.root elsewhere, or make this task's with: {self.rebuild_command()}")
        return manifest

    def refuse_cut_examples(self, what: str) -> None:
        """An import that cut each example to fewer bytes than ``task.max_len`` (its ``max_length``) is refused: the
        model would see shorter examples than the protocol's, without a word."""
        stored = self.manifest()["source"].get("max_length", 0)
        if stored and stored < self.task.max_len:
            raise UserError(f"{self.task_dir} holds {what} cut to {stored} bytes but task.max_len is "
                            f"{self.task.max_len}. Convert them again with: {self.rebuild_command()}")

    def data_identity(self) -> dict[str, Any] | None:
        """Which data this module reads: its manifest's split checksums (``lra.data_identity``), kept in the run's
        checkpoints and record; None without a manifest (data made in memory). Once ``setup`` loaded the splits,
        theirs: a folder written again later (another import) does not change what this run trained on."""
        return self.loaded_identity if self.data else data_identity(self.task_dir)

    @property
    def vocab_size(self) -> int:
        return int(self.manifest()["vocab_size"])

    @property
    def num_classes(self) -> int:
        return int(self.manifest()["num_classes"])

    def setup(self, stage: str | None = None) -> None:
        if self.data:
            return
        try:
            self._load()
        except BaseException:  # a refused setup keeps nothing: a second call checks again
            self.data, self.loaded_identity = {}, None
            raise

    def _load(self) -> None:
        before = data_identity(self.task_dir)
        try:
            for split in self.splits:
                self.data[split] = load_split(self.task_dir, split, rebuild_cmd=self.rebuild_command())
        except DataError as err:
            raise UserError(str(err)) from None
        if data_identity(self.task_dir) != before:  # each split is checked against the manifest as it loads
            raise UserError(f"{self.task_dir} was written again while its splits loaded (another data_prep or run): "
                            f"its splits may come from two versions; run again once nothing writes it")
        self.loaded_identity = before
        self.check_not_empty()
        for split, count in (self.task.data.limit or {}).items():
            if split not in self.data:
                raise UserError(f"task.data.limit names split {split!r}; splits are {', '.join(self.splits)}")
            if count is not None and count < len(self.data[split]):
                keep = np.random.default_rng(0).choice(len(self.data[split]), size=int(count), replace=False)
                self.data[split] = take(self.data[split], np.sort(keep))
        if self.num_classes != self.task.num_classes:
            raise UserError(f"{self.task_dir}: data has {self.num_classes} classes but task.num_classes is "
                            f"{self.task.num_classes}. Rebuild it with: {self.rebuild_command()}")
        self.check_lengths()

    def check_not_empty(self) -> None:
        """A split without examples cannot train, select a checkpoint (val) or be tested: refused by file."""
        for split, data in self.data.items():
            if not len(data):
                file = self.task_dir / self.manifest()["splits"][split]["file"]
                use = {"train": "train", "val": "select a checkpoint"}.get(split, "test")
                raise UserError(f"{file}: the {split} split has no examples, so the run could not {use}. "
                                f"Prepare the data again with: {self.rebuild_command()}")

    def check_lengths(self) -> None:
        """Sequences longer than ``task.max_len`` are cut only when ``task.truncate`` says so, and then logged."""
        max_len = self.task.max_len
        for split, data in self.data.items():
            lengths = np.concatenate([np.diff(v) for k, v in data.extra.items() if k.startswith("offsets")]
                                     + [data.lengths])  # every document of a pair task too
            cut = int((lengths > max_len).sum())
            if not cut:
                continue
            if not self.task.truncate:
                raise UserError(f"task.max_len={max_len} is shorter than {cut} of the {lengths.size} {split} "
                                f"sequences (up to {int(lengths.max())} tokens): they would be cut without a word. "
                                f"Raise task.max_len to {int(lengths.max())}, or add ++task.truncate=true to cut them")
            log.info("task.truncate: %d of the %d %s sequences are cut to task.max_len=%d tokens (longest %d)",
                     cut, lengths.size, split, max_len, int(lengths.max()))

    def majority_acc(self) -> float:
        """Test accuracy of always predicting the most frequent training label."""
        self.setup()
        majority = np.bincount(self.data["train"].labels).argmax()
        return float((self.data["test"].labels == majority).mean())

    def padded_lengths(self, split: str) -> np.ndarray:
        """Tokens each example of ``split`` takes in a padded batch: its length cut to ``task.max_len``; for a
        pair task the longer of its documents (both are padded to one width)."""
        data = self.data[split]
        lengths = data.lengths
        for name, offsets in data.extra.items():
            if name.startswith("offsets"):
                lengths = np.maximum(lengths, np.diff(offsets))
        return np.minimum(lengths, self.task.max_len)

    def eval_order(self, split: str) -> list[int]:
        """Examples of ``split`` longest first (ties in file order): each evaluation batch then pads only to
        lengths close to its own, and accuracy and mean loss do not depend on the order."""
        return np.argsort(-self.padded_lengths(split), kind="stable").tolist()

    def train_batch_size(self) -> int:
        """Examples in one training micro-batch of this process (``Run.micro_batch_size_on``): under DDP rank r takes
        every world-th example of the training order, so the ranks' batches of one step together are the batch one
        process would take."""
        return self.run.micro_batch_size_on(self.shard()[1])

    def _loader(self, split: str, sampler: EpochSampler | list[int] | None = None) -> DataLoader:
        workers = self.task.data.num_workers
        batch_size = self.train_batch_size() if split == "train" else self.run.eval_batch_size
        # an own generator: creating an iterator then never draws from the global RNG (exact resume)
        generator = torch.Generator().manual_seed(self.run.seed)
        return DataLoader(
            self.make_dataset(self.data[split]), batch_size=batch_size, sampler=sampler,
            num_workers=workers, persistent_workers=workers > 0, drop_last=False,
            collate_fn=self.collate, generator=generator,
        )

    def state_dict(self) -> dict[str, int]:
        """Where training stands in its epoch, saved in checkpoints so a resumed run sees the same batches."""
        if self.trainer is None:
            return {}
        progress = self.trainer.fit_loop.epoch_loop.batch_progress.current
        return {"epoch": self.trainer.current_epoch, "batches_done": progress.completed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume_state = dict(state)

    def make_dataset(self, split: CompactSplit) -> Dataset:
        return SequenceDataset(split, self.task.max_len)

    def collate(self, items):
        return pad_batch(items, self.task.data.pad_multiple, self.task.max_len)

    def shard(self) -> tuple[int, int]:
        """(rank, world size) of this process: (0, 1) without DDP. The data module shards its orders itself
        (Lightning's sampler wrapping is off: ``Run.trainer_arguments``), so a DDP run resumes exactly."""
        if self.trainer is None:
            return 0, 1
        return int(self.trainer.global_rank), int(self.trainer.world_size)

    def train_sampler(self) -> EpochSampler:
        """The training order of ``task.batching``: ``random`` (the protocol) or ``length_grouped`` (batches of
        similar lengths from pools of ``task.batching_pool`` batches; ``lra.sampling``), this rank's share."""
        micro = self.task.micro_batches  # parts of a batch: every batch whole, so steps align
        seed, whole = self.run.seed, self.task.batch_size if micro > 1 else 1
        rank, world = self.shard()
        if len(self.data["train"]) < world:
            raise UserError(f"the training split has {len(self.data['train'])} examples, fewer than the {world} "
                            "processes: run on fewer (trainer.devices) or generate a larger split")
        if self.task.batching == "length_grouped":
            return LengthGroupedSampler(self.padded_lengths("train"), seed, self.task.batch_size,
                                        self.task.batching_pool, whole=whole, rank=rank, world=world)
        return EpochSampler(len(self.data["train"]), seed, whole=whole, rank=rank, world=world)

    def train_dataloader(self) -> DataLoader:
        sampler = self.train_sampler()
        state = getattr(self, "_resume_state", None)
        if state:  # every rank has taken batches_done batches: the ranks together that many whole steps' worth
            sampler.resume_at(state["epoch"], state["batches_done"] * self.train_batch_size() * sampler.world)
        return self._loader("train", sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_share("val"))

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_share("test"))

    def eval_share(self, split: str) -> list[int]:
        """This rank's part of ``eval_order(split)``: every world-th example (the metrics add the parts up)."""
        rank, world = self.shard()
        order = self.eval_order(split)
        if len(order) < world:  # a rank without a batch would never join the metrics' sync
            raise UserError(f"the {split} split has {len(order)} examples, fewer than the {world} processes: run on "
                            f"at most {len(order)} (trainer.devices) or generate a larger split")
        return order[rank::world]

    @classmethod
    def example_batch(cls, task: Task, batch_size: int, vocab_size: int,
                      generator: torch.Generator) -> dict[str, torch.Tensor]:
        """A batch laid out as this task's, at full length without padding: random ids in ``[1, vocab_size)`` and
        labels (benchmarks time steps on it without data)."""
        length = cls.example_length(task)
        tokens = torch.randint(1, vocab_size, (batch_size, length), generator=generator)
        return {"tokens": tokens, "lengths": torch.full((batch_size,), length),
                "labels": torch.randint(0, task.num_classes, (batch_size,), generator=generator)}

    @classmethod
    def example_length(cls, task: Task) -> int:
        """Tokens of a full-length example: ``task.max_len``."""
        return task.max_len
