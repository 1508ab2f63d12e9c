"""Train and test one LRA model: ``python run.py task=listops attention=llops [experiment=quick]``.

Hydra composes ``conf/``; ``-m`` sweeps (``task=listops,text attention=llops,based seed=0,1,2``).
Each run writes ``result.json`` in ``outputs/<task>/<attention>/seed<seed>/<tag>/``;
``python -m results`` tabulates them. The config is parsed into one ``lra.settings.Run`` and checked once, before
torch and Lightning load, so a typo is reported in about a second.
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from lra.run.hydra_hooks import (  # + conf/'s resolver
    checked_run,
    discard_created_folder,
    holds_lock,
    is_rank_zero,
    job_refusal,
    note_job,
    parsed_run,
)
from lra.run.overrides import missing_plugin, unknown_override
from lra.run.record_compat import old_experiment_spelling
from lra_base.errors import Diverged, UserError, refused_before_training

log = logging.getLogger("run")


def to_log_file(message: str) -> None:
    """Also write ``message`` to Hydra's ``run.log`` (the console already shows it)."""
    record = log.makeRecord(log.name, logging.INFO, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def report(message: str, *, error: bool = False) -> None:
    """Print ``message`` and add it to the run's ``run.log``: once, by the first process of a DDP run."""
    if not is_rank_zero():
        return
    print(f"\n{message}", file=sys.stderr if error else sys.stdout)
    to_log_file(message)


def rerun_command() -> str:
    return shlex.join(["python", sys.argv[0], *sys.argv[1:]])


def number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    try:  # checked before Hydra wrote anything (lra.run.hydra_hooks: a single run, and each job of a sweep)
        if (refusal := job_refusal()) is not None:
            raise UserError(refusal)
        # the Run the hook parsed, or, where none ran (a config without the hooks, a DDP worker), parsed here
        run = parsed_run(run_dir) or checked_run(cfg, list(hydra_cfg.overrides.task))
    except UserError as err:  # refused before the training stack loads; no record: the folder may be another run's
        note_job("refused")
        report(f"error: {err}", error=True)  # not into run.log: the folder is not this job's (RunLogHandler)
        if sweeping:
            return None
        sys.exit(2)

    from pytorch_lightning.utilities.exceptions import SIGTERMException
    from pytorch_lightning.utilities.rank_zero import rank_zero_only

    from lra.run.callbacks import sent_signal, stop_signal, stopped_by
    from lra.run.train import run as train

    try:
        record = train(run, run_dir, locked=holds_lock(run_dir))
    except UserError as err:  # refused before training (settings, checkpoint, data): no record; else failed
        note_job("refused" if refused_before_training(err) else "failed")
        report(f"error: {err}", error=True)
        if refused_before_training(err):
            discard_created_folder(run_dir)  # when this command made it: no folder of a run that never started
        if sweeping:  # let the other jobs of the sweep run
            return None
        sys.exit(2)
    except Diverged as err:
        note_job("diverged")
        report(f"diverged: {err}\nrecord: {run_dir / 'result.json'} (status: diverged)", error=True)
        if sweeping:
            return None
        sys.exit(1)
    except SIGTERMException as err:
        signum = stop_signal(err)
        note_job("interrupted")
        report(f"{stopped_by(sent_signal(err))}: last.ckpt saved in {run_dir / 'checkpoints'}; rerun the same "
               f"command to resume:\n  {rerun_command()}", error=True)
        if sweeping and signum != signal.SIGINT:  # a preempted job; Ctrl-C stops the whole sweep
            return None
        sys.exit(128 + signum)
    except KeyboardInterrupt:
        report(f"{stopped_by(signal.SIGINT)} at once; rerun the same command to resume from the last validation:\n"
               f"  {rerun_command()}", error=True)
        sys.exit(128 + signal.SIGINT)
    except Exception:
        if not sweeping:
            raise
        log.exception("job failed; its result.json says status=failed, the sweep goes on")
        return None
    m = record["metrics"]
    note_job("already completed" if record.get("already_completed") else "completed")
    if rank_zero_only.rank != 0:
        return m["val_acc"]
    if record.get("already_completed"):
        report(f"already completed: {run_dir / 'result.json'} (test_acc={number(m.get('test_acc'))}); left as it "
               f"is. Add rerun=true to train it again from scratch (the old outputs move to replaced/).")
        return m["val_acc"]
    report(f"{record['task']} / {record['attention']} / seed {record['seed']}: val_acc={number(m['val_acc'])} "
           f"test_acc={number(m['test_acc'])} majority_acc={number(m['majority_acc'])} "
           f"({record['wall_time_s']:.0f} s)\nrecord: {run_dir / 'result.json'}")
    return m["val_acc"]


if __name__ == "__main__":
    if problem := (missing_plugin(sys.argv[1:]) or old_experiment_spelling(sys.argv[1:])
                   or unknown_override(sys.argv[1:])):
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
