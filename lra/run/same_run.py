"""One run per folder: a command whose settings differ from what its run folder holds is refused by name.

A folder holds a run through its completed ``result.json`` (its ``config``) or, while unfinished, its
``checkpoints/last.ckpt`` (the config the LightningModule saved as hyper-parameters, read with
``weights_only=True``), made today's ``Run`` by ``lra.run.record_compat.upgrade``. The two are compared by
``Run.differences``: a resume under another learning rate, model size or trainer limit, and a completed record
answered for other settings (``tag=quick`` without ``experiment=quick``), become one error naming the differing keys
and the two ways out. Checkpoints and records
written before a setting existed compare at the value they ran with (``upgrade``).
The data counts too, though ``data_dir`` does not: a folder's checkpoint and record keep the checksums of the split
files it trained on (``lra.data_identity``), and a command whose data folder holds other examples is refused the
same way (``data: <trained on> -> <now>``), so a resume never trains on a mix of two data sets.
No torch is imported unless the folder has a ``last.ckpt`` and no completed record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lra_base.errors import UserError

from ..data_identity import data_identity, describe_data, other_data, task_data_dir
from ..identity import describe
from ..settings import Run
from .record import RECORD_NAME, completed_record
from .record_compat import upgrade

LAST = Path("checkpoints") / "last.ckpt"
DATA = "data"  # the key of a data change among the settings' (``changes_from``)


@dataclass(frozen=True)
class HeldRun:
    """What a run folder holds: a completed run (its record's config) or an unfinished one (its last.ckpt's)."""

    completed: bool
    source: Path  # result.json or checkpoints/last.ckpt
    config: dict[str, Any] | None  # None: a checkpoint without a saved config, or one that cannot be read
    step: int | None = None
    record: dict[str, Any] | None = None  # the completed record
    data: dict[str, Any] | None = None  # the data it trained on (lra.data_identity); None: unknown (older runs)


def held_run(run_dir: Path) -> HeldRun | None:
    """The run ``run_dir`` holds, or None for an empty folder (or one whose unfinished run left no checkpoint)."""
    run_dir = Path(run_dir)
    if (record := readable_record(run_dir)) is not None:
        config = record.get("config")
        return HeldRun(True, run_dir / RECORD_NAME, config if isinstance(config, dict) else {}, record=record,
                       data=record.get("data"))
    if (run_dir / LAST).exists():
        from .checkpoints import resume_point  # torch: only for a folder with a checkpoint to resume

        try:
            point = resume_point(run_dir / LAST)
        except UserError:  # damaged: the run names it, with the way out, when it resumes (lra.run.train)
            return HeldRun(False, run_dir / LAST, None)
        return HeldRun(False, run_dir / LAST, point.config, point.step, data=point.data)
    return None


def readable_record(run_dir: Path) -> dict[str, Any] | None:
    """``completed_record(run_dir)``; a ``result.json`` nested too deeply for Python's JSON reader is a UserError
    naming it (not a record this suite wrote: another run's folder, or a damaged file)."""
    try:
        return completed_record(run_dir)
    except RecursionError:
        path = Path(run_dir) / RECORD_NAME
        raise UserError(f"{path} is nested too deeply to read, so it is not a record this suite wrote: move it away "
                        f"(mv {path} {path}.bad) or give this run another folder (hydra.run.dir=DIR)") from None


def current_data(run: Run) -> dict[str, Any] | None:
    """The identity of the data ``run`` points at, when it is prepared (``lra.data_identity``)."""
    try:
        return data_identity(task_data_dir(run))
    except (AttributeError, TypeError):  # a run without a data root: nothing to compare
        return None


def data_change(trained: Any, now: Any) -> list[tuple[str, Any, Any]]:
    """``[("data", what it trained on, what is there now)]`` when the two hold other examples, else ``[]``."""
    return [(DATA, describe_data(trained), describe_data(now))] if other_data(trained, now) else []


def changes_from(held: HeldRun | None, run: Run) -> list[tuple[str, Any, Any]]:
    """How ``run`` differs from the held run: its settings (none for an empty folder or a checkpoint without a
    saved config), then its data (``DATA``: when both are known and hold other examples)."""
    if held is None:
        return []
    settings = [] if held.config is None else upgrade(held.config).differences(run)
    return settings + data_change(held.data, current_data(run))


def other_run_message(run_dir: Path, held: HeldRun, changes: list[tuple[str, Any, Any]], run: Run | None = None) \
        -> str:
    """What the folder holds, how ``run`` differs from it (``key: its value -> this one``), and the ways out."""
    where = held.source.relative_to(run_dir)
    other = other_what(changes)
    if held.completed:
        what, own = f"a completed run of {other} ({where})", ""
    else:
        what = f"an unfinished run of {other} ({where}, step {held.step})"
        own = f"rerun it with its own {resume_with(changes, held)} to resume it; "
    experiments = (held.config or {}).get("experiment"), run.experiment if run is not None else None
    hint = ""
    if experiments[0] != experiments[1]:
        hint = (f" (it ran experiment={experiments[0] or 'none'}; this command has experiment="
                f"{experiments[1] or 'none'})")
    return (f"{run_dir} holds {what}: {describe(changes)}{hint}. Either {own}give this run a folder of its own "
            f"(tag=<name>, an override that names one, or hydra.run.dir=DIR); or add rerun=true to train this folder "
            f"again with these settings (its outputs move to replaced/)")


def other_what(changes: list[tuple[str, Any, Any]]) -> str:
    """``"other settings"``, ``"other data"`` or both, as ``changes`` say."""
    kinds = [kind for kind, found in (("settings", any(key != DATA for key, _, _ in changes)),
                                      ("data", any(key == DATA for key, _, _ in changes))) if found]
    return "other " + " and ".join(kinds)


def resume_with(changes: list[tuple[str, Any, Any]], held: HeldRun) -> str:
    """What a resume needs back: its settings, and its data (``data_dir=...``, the folder it trained on)."""
    if not any(key == DATA for key, _, _ in changes):
        return "settings"
    data_dir = (held.config or {}).get("data_dir")
    data = f"data (data_dir={data_dir})" if data_dir else "data"
    return data if len(changes) == 1 else f"settings and {data}"


def refuse_other_data(run: Run, run_dir: Path, held: HeldRun, now: dict[str, Any] | None) -> None:
    """A UserError when the data ``run`` reads (``now``, just prepared) holds other examples than ``held`` trained
    on: the check of ``refuse_other_run`` for data that was not there yet when it ran."""
    if changes := data_change(held.data, now):
        raise UserError(other_run_message(Path(run_dir), held, changes, run))


def refuse_other_run(run: Run, run_dir: Path) -> HeldRun | None:
    """The run ``run_dir`` holds; a UserError when its settings differ from ``run`` 's and ``run`` does not say
    ``rerun=true``."""
    held = held_run(run_dir)
    changes = changes_from(held, run)
    if changes and not run.rerun:
        raise UserError(other_run_message(Path(run_dir), held, changes, run))
    return held
