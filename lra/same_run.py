"""One run per folder: a command whose settings differ from what its run folder holds is refused by name.

A folder holds a run through its completed ``result.json`` (its ``config``) or, while unfinished, its
``checkpoints/last.ckpt`` (the config the LightningModule saved as hyper-parameters, read with
``weights_only=True``). The two are compared by ``lra.identity.differences``: a resume under another learning
rate, model size or trainer limit, and a completed record answered for other settings (``tag=quick`` without
``experiment=quick``), become one error naming the differing keys and the two ways out. Checkpoints and records
written before a setting existed compare with the value they used implicitly (``lra.record_compat.IMPLICIT``).
No torch is imported unless the folder has a ``last.ckpt`` and no completed record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError
from .identity import describe, differences
from .record import RECORD_NAME, completed_record

LAST = Path("checkpoints") / "last.ckpt"


@dataclass(frozen=True)
class HeldRun:
    """What a run folder holds: a completed run (its record's config) or an unfinished one (its last.ckpt's)."""

    completed: bool
    source: Path  # result.json or checkpoints/last.ckpt
    config: dict[str, Any] | None  # None: a checkpoint without a saved config, or one that cannot be read
    step: int | None = None
    record: dict[str, Any] | None = None  # the completed record


def held_run(run_dir: Path) -> HeldRun | None:
    """The run ``run_dir`` holds, or None for an empty folder (or one whose unfinished run left no checkpoint)."""
    run_dir = Path(run_dir)
    if (record := completed_record(run_dir)) is not None:
        config = record.get("config")
        return HeldRun(True, run_dir / RECORD_NAME, config if isinstance(config, dict) else {}, record=record)
    if (run_dir / LAST).exists():
        from .checkpoints import resume_point  # torch: only for a folder with a checkpoint to resume

        try:
            step, config = resume_point(run_dir / LAST)
        except UserError:  # damaged: the run names it, with the way out, when it resumes (lra.train)
            return HeldRun(False, run_dir / LAST, None)
        return HeldRun(False, run_dir / LAST, config, step)
    return None


def changes_from(held: HeldRun | None, cfg: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """How ``cfg`` differs from the held run's settings (none for an empty folder or a checkpoint without a
    saved config)."""
    if held is None or held.config is None:
        return []
    return differences(held.config, cfg)


def other_run_message(run_dir: Path, held: HeldRun, changes: list[tuple[str, Any, Any]],
                      cfg: dict[str, Any] | None = None) -> str:
    """What the folder holds, how ``cfg`` differs from it (``key: its value -> this one``), and the ways out."""
    where = held.source.relative_to(run_dir)
    if held.completed:
        what, own = f"a completed run of other settings ({where})", ""
    else:
        what = f"an unfinished run of other settings ({where}, step {held.step})"
        own = "rerun it with its own settings to resume it; "
    experiments = (held.config or {}).get("experiment"), (cfg or {}).get("experiment")
    hint = ""
    if experiments[0] != experiments[1]:
        hint = (f" (it ran experiment={experiments[0] or 'none'}; this command has experiment="
                f"{experiments[1] or 'none'})")
    return (f"{run_dir} holds {what}: {describe(changes)}{hint}. Either {own}give this run a folder of its own "
            f"(tag=<name>, an override that names one, or hydra.run.dir=DIR); or add rerun=true to train this folder "
            f"again with these settings (its outputs move to replaced/)")


def refuse_other_run(cfg: dict[str, Any], run_dir: Path) -> HeldRun | None:
    """The run ``run_dir`` holds; a UserError when its settings differ from ``cfg`` and ``cfg`` does not say
    ``rerun=true``."""
    held = held_run(run_dir)
    changes = changes_from(held, cfg)
    if changes and not cfg["rerun"]:
        raise UserError(other_run_message(Path(run_dir), held, changes, cfg))
    return held
