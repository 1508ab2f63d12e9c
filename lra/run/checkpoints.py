"""Checkpoints that belong to their run folder: written whole or not at all, never through a link, read in today's
layout (``lra.run.record_compat.upgrade_checkpoint``), paths rebased when the folder moved, a bad ``last.ckpt`` named.

Lightning writes a checkpoint to a temporary file elsewhere (fsspec's, in the system's temp folder) and copies
it across file systems, so a full disk left ``last.ckpt`` torn; ``RunFolderCheckpointIO`` writes a temporary
file beside it and renames it over (``lra_base.atomic``), so a failed write leaves the previous file whole.
Lightning keeps the best checkpoint's absolute path in ``last.ckpt``; when the run folder is moved or copied,
it restores that path but not its score, so a resumed run would test (or fail to find) the old folder's file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

from lra_base.atomic import LinkRefused, atomic_output, refuse_link
from lra_base.errors import UserError

from ..data_identity import CHECKPOINT_KEY
from .disk import disk_full, full_disk_error
from .record_compat import upgrade_checkpoint

PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def not_a_link(path: Path) -> None:
    """UserError naming ``path`` when it is a symbolic link (a run's files are regular files)."""
    try:
        refuse_link(path)
    except LinkRefused as err:
        raise UserError(str(err)) from None


class RunFolderCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes atomically in the checkpoint's own folder and opens no link."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        not_a_link(path)
        try:
            with atomic_output(path) as f:
                torch.save(checkpoint, f)
        except OSError as err:
            if full_disk_error(err) is None:
                raise
            raise disk_full(path.parent, path.name) from None

    def load_checkpoint(self, path, map_location: Any = lambda storage, loc: storage,
                        weights_only: bool | None = None) -> dict[str, Any]:
        path = Path(path)
        not_a_link(path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return upgrade_checkpoint(torch.load(f, map_location=map_location, weights_only=weights_only))


def rebased(state: dict[str, Any], dirpath: str) -> dict[str, Any]:
    """``state`` of a ModelCheckpoint saved in another folder, every path moved into ``dirpath``."""
    def move(path: str | None) -> str | None:
        return str(Path(dirpath) / Path(path).name) if path else path

    state = {**state, "dirpath": dirpath, **{key: move(state.get(key)) for key in PATH_KEYS if key in state}}
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {move(path): score for path, score in state["best_k_models"].items()}
    return state


class RunFolderCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose restored paths point into its own folder, wherever the run folder went."""

    @property
    def state_key(self) -> str:  # as ModelCheckpoint's: checkpoints written before this class still resume
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and saved != self.dirpath:
            state_dict = rebased(state_dict, self.dirpath)
        super().load_state_dict(state_dict)


class ResumePoint(NamedTuple):
    """What ``last.ckpt`` resumes: its global step, the run config it was saved with (the LightningModule's
    hyper-parameter ``cfg``) and the data it trained on (``lra.data_identity``); None for what it does not hold."""

    step: int
    config: dict[str, Any] | None
    data: dict[str, Any] | None


def resume_point(path: Path) -> ResumePoint:
    """The ``ResumePoint`` of ``last.ckpt``; a truncated or corrupt file is a UserError saying what to do, a link one
    naming it."""
    not_a_link(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        config, data = (checkpoint.get("hyper_parameters") or {}).get("cfg"), checkpoint.get(CHECKPOINT_KEY)
        return ResumePoint(int(checkpoint["global_step"]), config if isinstance(config, dict) else None,
                           data if isinstance(data, dict) else None)
    except Exception as err:  # torch, zipfile and pickle each raise their own kinds for a damaged file
        best = sorted(p.name for p in path.parent.glob("best-step*.ckpt"))
        from_best = f"; to resume from the best checkpoint instead: cp {path.parent / best[-1]} {path}" if best else ""
        raise UserError(f"{path} cannot be read ({type(err).__name__}: {err}): it is truncated or corrupt. "
                        f"Move it aside (mv {path} {path}.corrupt), then rerun to start this run over{from_best}"
                        ) from None
