"""Fixtures for end-to-end tests: composed configs and a tiny generated ListOps."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import lra.run.hydra_hooks  # noqa: F401  (registers the run-folder resolver that hydra.run.dir uses)
from lra.config import CONF_DIR, compose, compose_run
from lra.settings import Run

ROOT = Path(__file__).resolve().parents[2]
CONF, compose_config = CONF_DIR, compose  # the names the tests import; one definition, in lra.config
__all__ = ["CONF", "ROOT", "TINY", "compose_config", "compose_run", "tiny"]
TINY = ["task.data.generate.train=160", "task.data.generate.val=64", "task.data.generate.test=64",
        "task.data.generate.min_length=20", "task.data.generate.max_length=60"]


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory) -> Path:
    """A data root shared by the session; ListOps is generated into it on first use."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture()
def tiny_overrides(tiny_data_dir) -> list[str]:
    return ["experiment=quick", f"data_dir={tiny_data_dir}", *TINY]


def tiny(data_dir, *overrides: str) -> Run:
    """The ``Run`` of a 12-step quick linear run on the tiny ListOps under ``data_dir``."""
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY,
                        "task.max_steps=12", "task.eval_every=4", "trainer.enable_progress_bar=false", *overrides])


@pytest.fixture(scope="module")
def interrupted(tiny_data_dir, tmp_path_factory):
    """A run folder of ``tiny`` stopped by SIGTERM at step 6 (``last.ckpt`` saved there), to copy."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException  # torch only where a run is needed

    from lra.run.callbacks import CheckpointOnPreemption
    from lra.run.train import run

    folder = tmp_path_factory.mktemp("interrupted") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(6), raising=False)
        with pytest.raises(SIGTERMException):
            run(tiny(tiny_data_dir), folder)
    return folder


def signal_at_step(step: int, signum: int = signal.SIGTERM, every_nth_batch: int = 1):
    """A callback hook (patch it onto ``CheckpointOnPreemption``) that sends ``signum`` to this process once,
    from the first hooked batch at ``global_step == step`` whose index is a multiple of ``every_nth_batch``."""

    def send(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        if trainer.global_step == step and batch_idx % every_nth_batch == 0 and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signum)

    return send


def torchless_env(tmp_path: Path) -> dict[str, str]:
    """An environment for a ``run.py`` subprocess in which importing torch fails: a check that must run before
    torch loads is shown to do so."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    return {**os.environ, "PYTHONPATH": f"{fake.parent}{os.pathsep}{ROOT}", "HYDRA_FULL_ERROR": "0"}
