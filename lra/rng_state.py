"""Every process's random streams in the checkpoint, so dropout masks continue exactly on resume.

A checkpoint holds ``torch_rng_states`` ``(world, bytes)``: each rank's CPU generator state (dropout on CPU
draws from it), and on CUDA ``cuda_rng_states`` likewise for the current device's generator; rank zero writes
the file. ``torch_rng_state`` (rank zero's CPU state) is kept for checkpoints read by older code; a checkpoint of one
process by older code holds only that, and the run's checkpoint reader gives it today's key
(``lra.run.record_compat.upgrade_checkpoint``). Under DDP every rank draws from a
stream of its own (``spread``): with one seed, all ranks would draw the same masks.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)

GOLDEN = 0x9E3779B9  # rank offsets between seeds: distinct streams for any number of ranks


def spread(rank: int, seed: int | None = None) -> None:
    """Reseed this process's generators (CPU and CUDA) for ``rank``: ``seed`` (default: the run's seed) plus
    ``rank`` golden-ratio steps; rank zero keeps its stream when ``seed`` is None."""
    if seed is not None or rank > 0:
        torch.manual_seed((torch.initial_seed() if seed is None else seed) + rank * GOLDEN)


def gather(module) -> dict[str, Tensor]:
    """This step's random states of all ranks, ``{key: (world, bytes) uint8 on CPU}``; every rank must call it
    (a collective under DDP)."""
    states = {"torch_rng_states": torch.get_rng_state()}
    if module.device.type == "cuda":
        states["cuda_rng_states"] = torch.cuda.get_rng_state(module.device)
    world = 1 if module._trainer is None else module.trainer.world_size
    if world == 1:
        return {key: state[None] for key, state in states.items()}
    return {key: module.all_gather(state).cpu() for key, state in states.items()}  # all_gather puts it on device


def add_to(checkpoint: dict[str, Any], module) -> None:
    """Add every rank's random states to ``checkpoint`` (a collective under DDP, as ``gather``)."""
    checkpoint.update(gather(module))
    checkpoint["torch_rng_state"] = checkpoint["torch_rng_states"][0].clone()


def restore(checkpoint: dict[str, Any], rank: int, world: int) -> None:
    """Set this process's generators from ``checkpoint``: exactly where it was saved by as many processes;
    saved by another number, rank zero's state then a stream of each rank's own drawn from it (a warning)."""
    states = checkpoint.get("torch_rng_states")
    if states is None:
        return
    cuda = checkpoint.get("cuda_rng_states")
    if len(states) == world:
        torch.set_rng_state(states[rank].cpu().clone())  # a row of the saved tensor: its own storage
        if cuda is not None and len(cuda) == world and torch.cuda.is_available():
            torch.cuda.set_rng_state(cuda[rank].cpu().clone())
        return
    log.warning("this checkpoint was saved by %d process(es) and resumes on %d: the dropout masks continue from "
                "a stream drawn from rank zero's random state, each rank its own, not as they would have",
                len(states), world)
    torch.set_rng_state(states[0].cpu().clone())
    spread(rank, int(torch.randint(2**62, ())))  # the same draw on every rank, then the rank's offset
