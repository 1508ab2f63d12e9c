"""Random states in checkpoints: each rank's own stream, restored exactly on as many processes, distinct on more."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import torch

from lra import rng_state


def states_of(seeds: list[int]) -> torch.Tensor:
    """``(len(seeds), bytes)``: the CPU generator's state after seeding with each."""
    rows = []
    for seed in seeds:
        torch.manual_seed(seed)
        rows.append(torch.get_rng_state())
    return torch.stack(rows)


def test_one_process_saves_its_state_as_one_row_and_the_old_key():
    torch.manual_seed(5)
    checkpoint: dict = {}
    rng_state.add_to(checkpoint, SimpleNamespace(device=torch.device("cpu"), _trainer=None))
    assert checkpoint["torch_rng_states"].shape[0] == 1 and "cuda_rng_states" not in checkpoint
    assert torch.equal(checkpoint["torch_rng_state"], checkpoint["torch_rng_states"][0])
    assert torch.equal(checkpoint["torch_rng_state"], states_of([5])[0])


def test_each_rank_gets_its_own_saved_state_back():
    saved = states_of([11, 12, 13])
    for rank in range(3):
        torch.manual_seed(0)
        rng_state.restore({"torch_rng_states": saved}, rank, 3)
        assert torch.equal(torch.get_rng_state(), saved[rank])


def test_on_another_process_count_the_ranks_draw_distinct_repeatable_streams(caplog):
    saved = {"torch_rng_states": states_of([31, 32])}
    with caplog.at_level(logging.WARNING, logger="lra.rng_state"):
        draws = []
        for rank in (0, 1, 2, 1):
            rng_state.restore(saved, rank, 3)
            draws.append(torch.rand(4))
    assert "saved by 2 process(es) and resumes on 3" in caplog.text
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    assert torch.equal(draws[1], draws[3])  # a function of the checkpoint and the rank


def test_spread_leaves_rank_zero_and_moves_the_others():
    torch.manual_seed(7)
    rng_state.spread(0)
    zero = torch.rand(3)
    torch.manual_seed(7)
    rng_state.spread(1)
    one = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(zero, torch.rand(3)) and not torch.equal(zero, one)
