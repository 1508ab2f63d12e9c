"""``task.batching=length_grouped``: every example once an epoch, batches cut from length-sorted pools of the
seeded permutation, an order that is a function of (seed, epoch) and resumes at any batch, less padding than
random batching on ListOps-like lengths; refused by name where it cannot apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lra.sampling import EpochSampler, LengthGroupedSampler
from lra.settings import Run
from lra.tasks.listops import DataModule
from lra_base.errors import UserError
from tests.lra.conftest import TINY, compose_config, compose_run

BATCH, POOL = 8, 3


def listops_like_lengths(count: int, seed: int = 0) -> np.ndarray:
    """Tree lengths spread like ListOps' 500-2000 tokens (skewed to the short end: mean ~1,000)."""
    rng = np.random.default_rng(seed)
    return np.clip(500 + rng.gamma(2.0, 270.0, count), 501, 1999).astype(np.int64)


def batches(order: list[int], size: int) -> list[list[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


def padding_fraction(order: list[int], lengths: np.ndarray, size: int) -> float:
    """Share of the computed tokens that are padding when each batch is padded to its longest."""
    real = padded = 0
    for batch in batches(order, size):
        real, padded = real + lengths[batch].sum(), padded + len(batch) * lengths[batch].max()
    return 1 - real / padded


@pytest.mark.parametrize("size, whole", [(100, 1), (96, 1), (100, BATCH), (5, 1)],
                         ids=["a shorter last batch", "whole batches", "cut to whole batches", "under one batch"])
def test_each_example_once_an_epoch(size, whole):
    sampler = LengthGroupedSampler(listops_like_lengths(size), seed=1, batch_size=BATCH, pool=POOL, whole=whole)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = list(sampler)
        kept = size - size % whole
        assert len(order) == len(sampler) == kept and len(set(order)) == kept
        assert set(order) <= set(range(size))
        if whole == 1:
            assert sorted(order) == list(range(size))
        else:  # the same examples as random batching leaves in (the permutation's first ``kept``)
            random = EpochSampler(size, seed=1, whole=whole)
            random.set_epoch(epoch)
            assert sorted(order) == sorted(random)


def test_batches_come_from_one_pool_of_the_permutation_each_and_are_sorted_within_it():
    size, lengths = 100, listops_like_lengths(100)
    grouped, random = (LengthGroupedSampler(lengths, seed=2, batch_size=BATCH, pool=POOL),
                       EpochSampler(size, seed=2))
    grouped.set_epoch(1), random.set_epoch(1)
    order, permutation = list(grouped), list(random)
    span = BATCH * POOL
    pool_of = {index: position // span for position, index in enumerate(permutation[:size - size % BATCH])}
    by_pool: dict[int, list[list[int]]] = {}
    for batch in batches(order, BATCH)[:-1]:
        assert len(batch) == BATCH and len({pool_of[i] for i in batch}) == 1, "a batch mixes pools"
        by_pool.setdefault(pool_of[batch[0]], []).append(batch)
    assert sorted(by_pool) == list(range(-(-(size - size % BATCH) // span)))
    for pool in by_pool.values():  # the pool's batches hold consecutive runs of its sorted lengths
        ranges = sorted((lengths[b].min(), lengths[b].max()) for b in pool)
        assert all(high <= next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
    assert order[-(size % BATCH):] == permutation[-(size % BATCH):]  # the leftover ends the epoch
    pool_order = [pool_of[b[0]] for b in batches(order, BATCH)[:-1]]
    assert pool_order != sorted(pool_order), "the batches were not shuffled across pools"


def test_the_order_is_a_function_of_seed_and_epoch_and_leaves_the_global_rng_alone():
    lengths = listops_like_lengths(200)
    state = torch.get_rng_state()
    first = list(LengthGroupedSampler(lengths, seed=3, batch_size=BATCH, pool=POOL))
    assert list(LengthGroupedSampler(lengths, seed=3, batch_size=BATCH, pool=POOL)) == first
    assert list(LengthGroupedSampler(lengths, seed=4, batch_size=BATCH, pool=POOL)) != first
    later = LengthGroupedSampler(lengths, seed=3, batch_size=BATCH, pool=POOL)
    later.set_epoch(1)
    assert list(later) != first
    later.set_epoch(0)
    assert list(later) == first
    assert torch.equal(state, torch.get_rng_state())


def test_a_resume_at_any_batch_gives_the_identical_remainder():
    sampler = LengthGroupedSampler(listops_like_lengths(100), seed=5, batch_size=BATCH, pool=POOL)
    sampler.set_epoch(2)
    full = list(sampler)
    for done in range(len(full) // BATCH + 1):
        sampler.resume_at(epoch=2, consumed=done * BATCH)
        assert list(sampler) == full[done * BATCH:], done
    assert list(sampler) == full  # the skip applies to one pass


def test_less_padding_than_random_batching_on_listops_like_lengths():
    """ListOps at the full protocol's batch of 32: random batches pad to ~1,900 tokens for trees of ~1,000."""
    lengths = listops_like_lengths(3200)
    random = padding_fraction(list(EpochSampler(len(lengths), seed=0)), lengths, 32)
    grouped = [padding_fraction(list(LengthGroupedSampler(lengths, seed=0, batch_size=32, pool=pool)), lengths, 32)
               for pool in (1, 5, 50)]
    assert random > 0.3
    assert grouped[0] == pytest.approx(random, rel=1e-9)  # pools of one batch: random batching's batches, reordered
    assert grouped[1] < random / 2 and grouped[2] < random / 10
    assert grouped[2] < grouped[1]


def tiny_module(data_dir, *overrides: str) -> DataModule:
    module = DataModule(compose_run(["experiment=quick", f"data_dir={data_dir}", *TINY,
                                     "task.batching=length_grouped", "task.batch_size=32", *overrides]))
    module.prepare_data()
    module.setup()
    return module


def loaded_lengths(loader) -> list[list[int]]:
    return [batch["lengths"].tolist() for batch in loader]


def test_micro_batches_cut_each_sorted_batch_into_equal_parts(tiny_data_dir):
    module = tiny_module(tiny_data_dir, "task.micro_batches=2")
    parts = loaded_lengths(module.train_dataloader())
    assert [len(p) for p in parts] == [16] * 10  # 160 trees: 5 batches of 32, each as 2 parts of 16
    for first, second in zip(parts[::2], parts[1::2]):  # one batch: sorted, so its parts do not overlap
        assert max(first) <= min(second)


def test_the_data_module_resumes_mid_epoch_with_the_same_batches(tiny_data_dir):
    module = tiny_module(tiny_data_dir)
    loader = module.train_dataloader()
    loader.sampler.set_epoch(1)
    whole_epoch = loaded_lengths(loader)
    resumed = tiny_module(tiny_data_dir)
    resumed.load_state_dict({"epoch": 1, "batches_done": 2})
    loader = resumed.train_dataloader()
    loader.sampler.set_epoch(1)
    assert loaded_lengths(loader) == whole_epoch[2:]
    padded = sum(len(b) * max(b) for b in whole_epoch)
    random = loaded_lengths(tiny_module(tiny_data_dir, "task.batching=random").train_dataloader())
    assert padded < sum(len(b) * max(b) for b in random)


def test_every_task_batches_at_random_by_default():
    for task in ("listops", "text", "retrieval", "image", "pathfinder", "pathx", "ar"):
        cfg = compose_config([f"task={task}"])
        assert cfg["task"]["batching"] == "random", task
        Run.parse(cfg)
    Run.parse(compose_config(["task=retrieval", "task.batching=length_grouped"]))


@pytest.mark.parametrize("overrides, message", [
    (["task.batching=sorted"], "task.batching='sorted': must be one of random, length_grouped"),
    (["task.batching=length_grouped", "task.batching_pool=0"], "task.batching_pool=0: must be an integer >= 1"),
    (["task.batching_pool=two"], "task.batching_pool='two': must be an integer >= 1"),
    (["task=image", "task.batching=length_grouped"],
     "every image sequence has the same length, so there is no padding to save; it applies to listops, text, "
     "retrieval"),
    (["task=ar", "task.batching=length_grouped"], "every ar sequence has the same length"),
])
def test_bad_batching_settings_are_refused_by_name(overrides, message):
    with pytest.raises(UserError) as error:
        Run.parse(compose_config(overrides))
    assert message in str(error.value)
