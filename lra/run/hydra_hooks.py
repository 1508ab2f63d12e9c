"""Hydra hooks of ``run.py``: the callback that guards a run folder and files and sums up a sweep.

Importing this module registers the run-folder name resolver (``lra.run.run_names``), which ``conf/config.yaml``
uses in ``hydra.run.dir``.
``RunHooks`` (registered in ``conf/config.yaml`` as the Hydra callback ``run_hooks``):

- a single run (``python run.py ...``): before Hydra creates the run folder, writes ``.hydra/`` or opens
  ``run.log``, the settings are parsed into the job's ``lra.settings.Run`` and checked, once (a refused command
  writes nothing; ``run.py`` takes the ``Run`` from here: ``parsed_run``), the folder is checked writable,
  its ``run.lock`` is taken (so a second command into a busy folder changes nothing in it), a link where
  Hydra writes its log or configs is refused by name, and so is a folder holding a run of other settings
  (``lra.run.same_run``);
- each job of a sweep (``-m``): the same checks and lock when the job starts, after Hydra made its folder and
  before anything is written in it: Hydra writes no ``.hydra/`` (``hydra.output_subdir: null``), this hook writes
  it once the job owns the folder, and ``run.log`` (``RunLogHandler``) waits until then, so a refused job changes
  nothing in another run's folder; a sweep over a name that is not one plain folder name is refused before any job;
- a sweep: its ``multirun.yaml`` is filed under ``multirun/<time>.yaml``, each job's status and folder
  are listed in ``multirun/<time>.jobs.tsv``, printed at the end, and the sweep exits 1 unless every job
  completed.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import errno
import logging
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from lra_base.atomic import LinkRefused, NotWritable, check_writable, refuse_link, write_atomic
from lra_base.errors import UserError
from lra_base.lock import LOCK_NAME, run_folder_lock

from ..checks import NAME_KEYS, check_name
from ..settings import Run
from . import run_names  # noqa: F401 (importing it registers conf/'s run_name resolver)
from .overrides import check_added_keys
from .same_run import refuse_other_run

RANK_KEYS = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")  # what launchers set
FINE = ("completed", "already completed")  # job outcomes a sweep exits 0 with
_job_status: str | None = None  # the outcome ``run.py`` noted for the job this process runs
_locked: set[str] = set()  # run folders whose run.lock a hook of this process holds
_refusal: str | None = None  # why the hook refused the sweep job this process runs
_created: dict[str, Callable[[], Any]] = {}  # a single run's folder this command created -> releases its lock
_parsed: dict[str, Run] = {}  # a run folder this process checked -> the Run of its job (run.py trains it)
HYDRA_SUBDIR = ".hydra"  # the run folder's copy of Hydra's configs


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


def checked_run(config: DictConfig, task_overrides: list[str]) -> Run:
    """The ``Run`` of a composed job config (Hydra's ``hydra`` node, where it has one, left out; ``Run.parse``: the
    folder's names first, as an override that puts a line break in one no longer parses), and no key added that
    nothing reads; else a UserError naming the problem and the fix."""
    job = copy.deepcopy(config)
    if "hydra" in job:
        with read_write(job), open_dict(job):
            del job["hydra"]
    run = Run.parse(OmegaConf.to_container(job, resolve=True))
    added, reference = added_keys_reference(task_overrides)
    if reference is not None:
        check_added_keys(added, reference)
    return run


def parsed_run(run_dir: Path) -> Run | None:
    """The ``Run`` this process's hook parsed for the job of ``run_dir`` (None: no hook ran, as in a DDP worker)."""
    return _parsed.get(os.path.realpath(run_dir))


def sweep_names(config: DictConfig) -> list[tuple[str, Any]]:
    """``(key, value)`` for every value a sweep gives a setting that names a run folder's part (``NAME_KEYS``):
    each value of a sweep over it (``tag=a,b``), else the sweep's config value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = OmegaConf.select(config, "hydra.overrides.task", default=None) or []
    lines = OmegaConf.to_container(overrides, resolve=False) if overrides else []  # as typed: ${...} unresolved
    parsed = OverridesParser.create().parse_overrides([str(line) for line in lines])
    swept = {o.key_or_group: list(o.sweep_string_iterator()) for o in parsed if o.is_sweep_override()}
    names = []
    for key in NAME_KEYS:
        values = swept.get(key) or [OmegaConf.select(config, key, default=None)]
        names += [(key, value) for value in values]
    return names


def hydra_files(config: DictConfig) -> list[str]:
    """The files Hydra's log and configs go to in a run folder (``run.log``, ``.hydra/``)."""
    configs = [f"{hydra_subdir(config)}/{name}.yaml" for name in ("config", "hydra", "overrides")]
    return [f"{config.hydra.job.name}.log", *configs]


def hydra_subdir(config: DictConfig) -> str | None:
    """Where a run folder's Hydra configs go: ``hydra.output_subdir`` when set (Hydra writes them itself, at job
    start), else ``.hydra`` (``conf/config.yaml``: written by ``write_hydra_files`` once the job owns the folder)."""
    return config.hydra.output_subdir or HYDRA_SUBDIR


def write_hydra_files(config: DictConfig, run_dir: Path) -> None:
    """Hydra's ``.hydra/{config,hydra,overrides}.yaml`` in ``run_dir``, as Hydra writes them, atomically; only when
    ``hydra.output_subdir`` is null (else Hydra wrote them)."""
    if config.hydra.output_subdir is not None:
        return
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    files = {"config": task, "hydra": OmegaConf.masked_copy(config, "hydra"), "overrides": config.hydra.overrides.task}
    for name, node in files.items():
        write_atomic(run_dir / HYDRA_SUBDIR / f"{name}.yaml", OmegaConf.to_yaml(node))


def job_refusal() -> str | None:
    """Why the hook refused the sweep job this process runs (``run.py`` reports it and skips the job), or None."""
    return _refusal


class RunLogHandler(logging.FileHandler):
    """Hydra's job log (``run.log``, ``conf/config.yaml``): opened only once the job owns its folder (rank zero
    holds its lock; other ranks write as before), so a refused sweep job neither creates nor appends to another
    run's log. Records from before are kept (up to ``WAITING``) and written first; a refused job's are dropped."""

    WAITING = 1000

    def __init__(self, filename: str = os.devnull, mode: str = "a", encoding: str | None = None, delay: bool = True,
                 errors: str | None = None) -> None:  # no filename: a job_logging preset without the file handler
        super().__init__(filename, mode, encoding, delay=True, errors=errors)
        self.waiting: list[logging.LogRecord] = []

    def owned(self) -> bool:
        return not is_rank_zero() or holds_lock(Path(self.baseFilename).parent)

    def emit(self, record: logging.LogRecord) -> None:
        if not self.owned():
            if len(self.waiting) < self.WAITING:
                self.waiting.append(record)
            return
        waiting, self.waiting = self.waiting, []
        for earlier in waiting:
            super().emit(earlier)
        super().emit(record)


def discard_created_folder(run_dir: Path) -> bool:
    """Remove ``run_dir`` when this command created it (a single run) and it holds nothing but Hydra's files and
    the lock: a command refused before training then leaves no run folder for ``results.progress`` to list.
    Whether it was removed."""
    real = os.path.realpath(run_dir)
    if real not in _created or not is_rank_zero():
        return False
    if {entry.name for entry in Path(real).iterdir()} - {HYDRA_SUBDIR, "run.log", LOCK_NAME}:
        return False  # something else was written there: left as it is
    for handler in list(logging.getLogger().handlers):  # run.log: closed, so that nothing writes into it again
        if isinstance(handler, logging.FileHandler) and os.path.dirname(os.path.realpath(handler.baseFilename)) == real:
            logging.getLogger().removeHandler(handler)
            handler.close()
    _created.pop(real)()  # the lock: released (its file removed) before the folder goes
    shutil.rmtree(real, ignore_errors=True)
    return True


def refuse(message: str) -> None:
    """Print ``error: <message>`` and exit 2, as ``run.py`` does for every user error."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def holds_lock(run_dir: Path) -> bool:
    """Whether this process took ``run_dir``'s ``run.lock`` before Hydra wrote into it (then ``run.py`` passes
    ``locked=True`` to ``lra.run.train.run``)."""
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
        self.lock = contextlib.ExitStack()  # the folder a single run or the current sweep job holds
        self.started: datetime | None = None

    def guard(self, config: DictConfig, folder: Callable[[], Path]) -> str | None:
        """Check the job's settings, then take the lock of its run folder (``folder()``, named by those settings;
        held in ``self.lock``) before anything is written there; the refusal's message, or None when the job owns
        the folder now."""
        elsewhere = "write this run elsewhere with hydra.run.dir=DIR"
        run_dir = Path()
        try:
            run = checked_run(config, list(config.hydra.overrides.task))
            run_dir = folder()
            new = not os.path.lexists(run_dir)
            check_writable(run_dir, elsewhere)
            self.lock.enter_context(run_folder_lock(run_dir))
            if new and config.hydra.mode != RunMode.MULTIRUN:  # a sweep's job folders are Hydra's, made before
                _created[os.path.realpath(run_dir)] = self.lock.close
            _locked.add(os.path.realpath(run_dir))
            self.lock.callback(_locked.discard, os.path.realpath(run_dir))
            for name in hydra_files(config):
                refuse_link(run_dir / name)
            refuse_other_run(run, run_dir)  # before .hydra/config.yaml of the run it holds is rewritten
            _parsed[os.path.realpath(run_dir)] = run
        except (UserError, NotWritable, LinkRefused) as err:
            self.lock.close()
            return str(err)
        except OSError as err:
            self.lock.close()
            if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise
            return str(NotWritable.of(run_dir, err.strerror, elsewhere))  # it became read-only after the check
        return None

    # a single run

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not is_rank_zero():  # a DDP worker: rank zero checked and locked the folder
            return
        HydraConfig.instance().set_config(config)
        try:
            refusal = self.guard(config, lambda: Path(str(config.hydra.run.dir)))
        except Exception:  # Hydra would only warn, and go on to write into a folder nobody checked
            traceback.print_exc()
            sys.exit(1)
        if refusal is not None:
            refuse(refusal)
        atexit.register(self.lock.close)  # run.py exits from inside the job on errors: on_run_end never comes

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.lock.close()

    # a sweep

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:  # before any job: Hydra makes each job's folder, named by these, before a job's hook can refuse it
            for key, value in sweep_names(config):
                check_name(key, value)
        except UserError as err:
            refuse(str(err))
        self.started = datetime.now()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _refusal
        note_job("failed")  # until run.py says otherwise
        _refusal = None
        run_dir = Path(config.hydra.runtime.output_dir)
        if config.hydra.mode == RunMode.MULTIRUN:
            file_sweep_config(Path(config.hydra.sweep.dir), self.started)
            if is_rank_zero():  # Hydra made the folder; its files wait until the job owns it (RunLogHandler)
                try:
                    _refusal = self.guard(config, lambda: run_dir)
                except Exception:  # not a user error: the job fails, as it would in run.py, and writes nothing
                    _refusal = f"the run folder's check failed:\n{traceback.format_exc()}"
                if _refusal is not None:
                    note_job("refused")
                    return
                atexit.register(self.lock.close)
        if is_rank_zero() and holds_lock(run_dir):
            write_hydra_files(config, run_dir)

    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or not is_rank_zero():
            return
        self.lock.close()  # the job's folder
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
