"""Hydra hooks of ``run.py``: the run-folder name resolver and the callback that guards a run folder and files
and sums up a sweep.

Importing this module registers the resolver, which ``conf/config.yaml`` uses in ``hydra.run.dir``.
``RunHooks`` (registered in ``conf/config.yaml`` as the Hydra callback ``run_hooks``):

- a single run (``python run.py ...``): before Hydra creates the run folder, writes ``.hydra/`` or opens
  ``run.log``, the settings are checked (a refused command writes nothing), the folder is checked writable,
  its ``run.lock`` is taken (so a second command into a busy folder changes nothing in it), a link where
  Hydra writes its log or configs is refused by name, and so is a folder holding a run of other settings
  (``lra.same_run``);
- a sweep (``-m``): its ``multirun.yaml`` is filed under ``multirun/<time>.yaml``, each job's status and folder
  are listed in ``multirun/<time>.jobs.tsv``, printed at the end, and the sweep exits 1 unless every job
  completed.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import errno
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from .atomic import LinkRefused, NotWritable, check_writable, refuse_link
from .checks import check_added_keys, check_config
from .config import CONF_DIR
from .errors import UserError
from .identity import IN_THE_PATH, flatten, where_or_how
from .lock import run_folder_lock
from .same_run import refuse_other_run
from .settings import complete

RANK_KEYS = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")  # what launchers set
FINE = ("completed", "already completed")  # job outcomes a sweep exits 0 with
_job_status: str | None = None  # the outcome ``run.py`` noted for the job this process runs
_locked: set[str] = set()  # run folders whose run.lock a hook of this process holds


def names_the_folder(override: Any, conf_dir: Path = CONF_DIR) -> bool:
    """Whether a parsed command-line override changes what the run computes (``lra.identity``) and is not in the
    path already: a key outside ``WHERE_OR_HOW``, or a config group choice (``trainer=debug``) that sets one."""
    key = override.key_or_group
    if key in IN_THE_PATH or where_or_how(key):
        return False
    if "." in key or not (Path(conf_dir) / key).is_dir():
        return True
    if override.is_delete() or override.is_sweep_override():
        return True
    return any(not where_or_how(leaf) for leaf in group_leaves(key, str(override.value()), Path(conf_dir)))


def group_leaves(group: str, choice: str, conf_dir: Path) -> list[str]:
    """The dotted keys ``conf/<group>/<choice>.yaml`` sets, with those of the group's files it includes other than
    ``default`` (the baseline every choice starts from)."""
    path = conf_dir / group / f"{choice}.yaml"
    if choice == "default" or not path.is_file():
        return [group] if choice != "default" else []
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    included = [entry for entry in node.pop("defaults", None) or [] if isinstance(entry, str)]
    leaves = [f"{group}.{key}" for key in flatten(node)]
    return leaves + [leaf for name in included if name != "_self_" for leaf in group_leaves(group, name, conf_dir)]


def run_name(tag: str, overrides: Any) -> str:
    """``<tag>``, or ``<tag>,<overrides>`` for a run with other settings (the overrides that name the folder,
    sorted, as typed): a sibling of the plain run's folder, never a folder inside it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [str(line) for line in overrides or []]
    parsed = OverridesParser.create().parse_overrides(lines)
    named = sorted(o.input_line for o in parsed if names_the_folder(o))
    return ",".join([str(tag), *named])


if not OmegaConf.has_resolver("run_name"):
    OmegaConf.register_new_resolver("run_name", run_name)


def is_rank_zero() -> bool:
    """This process is rank zero (or not one of several): the one that locks and writes the run folder."""
    return all(int(os.environ.get(key, "0")) == 0 for key in RANK_KEYS)  # node 1's local rank 0 is not rank zero


def added_keys_reference(overrides: list[str]) -> tuple[list[str], dict[str, Any] | None]:
    """The keys ``+key=...``/``++key=...`` add, and the config composed without those overrides."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    added = [o.key_or_group for o in parsed if o.is_add() or o.is_force_add()]
    if not any(key.split(".")[0] in ("task", "model") for key in added) or not GlobalHydra.instance().is_initialized():
        return added, None
    kept = [o.input_line for o in parsed if not (o.is_add() or o.is_force_add())]
    return added, OmegaConf.to_container(compose(config_name="config", overrides=kept), resolve=False)


def check_settings(config: dict[str, Any], task_overrides: list[str]) -> None:
    """The settings check of a composed run config (``lra.checks``): a UserError naming the problem and the fix."""
    added, reference = added_keys_reference(task_overrides)
    if reference is not None:
        check_added_keys(added, reference)
    check_config(config)


def job_config(config: DictConfig) -> dict[str, Any]:
    """The resolved config the job will get (Hydra's, without its ``hydra`` node; complete, as ``run.py`` makes
    it)."""
    job = copy.deepcopy(config)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return complete(OmegaConf.to_container(job, resolve=True))


def hydra_files(config: DictConfig) -> list[str]:
    """The files Hydra opens by name in a run folder (its log, its ``.hydra/`` configs)."""
    subdir = config.hydra.output_subdir
    configs = [f"{subdir}/{name}.yaml" for name in ("config", "hydra", "overrides")] if subdir else []
    return [f"{config.hydra.job.name}.log", *configs]


def refuse(message: str) -> None:
    """Print ``error: <message>`` and exit 2, as ``run.py`` does for every user error."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def holds_lock(run_dir: Path) -> bool:
    """Whether this process took ``run_dir``'s ``run.lock`` before Hydra wrote into it (then ``run.py`` passes
    ``locked=True`` to ``lra.train.run``)."""
    return os.path.realpath(run_dir) in _locked


def note_job(status: str) -> None:
    """Say how the job of this process ended (``run.py``), for the sweep's summary."""
    global _job_status
    _job_status = status


def file_sweep_config(sweep_dir: Path, started: datetime | None = None) -> None:
    """Move ``<sweep_dir>/multirun.yaml`` to ``<sweep_dir>/multirun/<time the sweep started>.yaml`` (one file per
    sweep)."""
    source = sweep_dir / "multirun.yaml"
    target = sweep_dir / "multirun" / f"{started or datetime.now():%Y-%m-%d_%H-%M-%S}.yaml"
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # parallel jobs: the first one moves it
            os.replace(source, target)


class RunHooks(Callback):
    """See the module docstring."""

    def __init__(self) -> None:
        self.lock = contextlib.ExitStack()
        self.started: datetime | None = None

    # a single run

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not is_rank_zero():  # a DDP worker: rank zero checked and locked the folder
            return
        HydraConfig.instance().set_config(config)
        job = job_config(config)
        try:
            check_settings(job, list(config.hydra.overrides.task))
        except UserError as err:
            refuse(str(err))
        run_dir, elsewhere = Path(str(config.hydra.run.dir)), "write this run elsewhere with hydra.run.dir=DIR"
        try:
            check_writable(run_dir, elsewhere)
            self.lock.enter_context(run_folder_lock(run_dir))
            _locked.add(os.path.realpath(run_dir))
            self.lock.callback(_locked.discard, os.path.realpath(run_dir))
            for name in hydra_files(config):
                refuse_link(run_dir / name)
            refuse_other_run(job, run_dir)  # before Hydra overwrites .hydra/config.yaml of the run it holds
        except (UserError, NotWritable, LinkRefused) as err:
            refuse(str(err))
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            refuse(str(NotWritable.of(run_dir, err.strerror, elsewhere)))  # it became read-only after the check
        atexit.register(self.lock.close)  # run.py exits from inside the job on errors: on_run_end never comes

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.lock.close()

    # a sweep

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.started = datetime.now()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        note_job("failed")  # until run.py says otherwise
        if config.hydra.mode == RunMode.MULTIRUN:
            file_sweep_config(Path(config.hydra.sweep.dir), self.started)

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or not is_rank_zero():
            return
        escaped = job_return is not None and job_return.status == JobStatus.FAILED  # raised out of run.py
        status = "failed" if escaped else _job_status or "failed"
        line = f"{status}\t{config.hydra.runtime.output_dir}\n"
        jobs = self.jobs_file(config)
        jobs.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(jobs, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            os.write(fd, line.encode())  # one write per line: parallel jobs' lines do not mix
        finally:
            os.close(fd)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        file_sweep_config(Path(config.hydra.sweep.dir), self.started)
        jobs = self.jobs_file(config)
        lines = jobs.read_text().splitlines() if jobs.is_file() else []
        outcomes = [line.split("\t", 1) for line in lines]
        bad = [status for status, _ in outcomes if status not in FINE]
        print(f"\nsweep: {len(outcomes)} job(s), {len(outcomes) - len(bad)} completed, {len(bad)} not "
              f"(list: {jobs})")
        for status, folder in outcomes:
            print(f"  {status:<17} {folder}")
        if bad:
            sys.exit(1)

    def jobs_file(self, config: DictConfig) -> Path:
        """``<sweep.dir>/multirun/<time>.jobs.tsv``: a line ``<status>\t<folder>`` per job that ended."""
        started = self.started or datetime.now()
        return Path(config.hydra.sweep.dir) / "multirun" / f"{started:%Y-%m-%d_%H-%M-%S}.jobs.tsv"
