"""Checkpoints that belong to their run folder: paths rebased when the folder moved, a bad ``last.ckpt`` named.

Lightning keeps the best checkpoint's absolute path in ``last.ckpt``; when the run folder is moved or copied,
it restores that path but not its score, so a resumed run would test (or fail to find) the old folder's file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from .errors import UserError

PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


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


def resume_step(path: Path) -> int:
    """The global step ``last.ckpt`` resumes from; a truncated or corrupt file is a UserError saying what to do."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return int(checkpoint["global_step"])
    except Exception as err:  # torch, zipfile and pickle each raise their own kinds for a damaged file
        best = sorted(p.name for p in path.parent.glob("best-step*.ckpt"))
        from_best = f"; to resume from the best checkpoint instead: cp {path.parent / best[-1]} {path}" if best else ""
        raise UserError(f"{path} cannot be read ({type(err).__name__}: {err}): it is truncated or corrupt. "
                        f"Move it aside (mv {path} {path}.corrupt), then rerun to start this run over{from_best}"
                        ) from None
