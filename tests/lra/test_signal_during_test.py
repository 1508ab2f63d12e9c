"""SIGTERM or Ctrl-C during the test stage (issue 58, point 14): training is done, so the test of the best checkpoint
finishes and the run is recorded completed with its metrics, as README and docs/design.md say."""

from __future__ import annotations

import json
import os
import signal

import pytest

from lra.run.callbacks import CheckpointOnPreemption
from lra.run.train import run
from lra.settings import Run
from tests.lra.conftest import TINY, compose_run


def tiny(data_dir) -> Run:
    """12 steps; 64 test trees in 2 batches of 32."""
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY, "task.max_steps=12",
                        "task.eval_every=4", "trainer.enable_progress_bar=false"])


def signal_at_first_test_batch(signum: int):
    """A ``CheckpointOnPreemption`` hook that sends ``signum`` to this process once, as the test's first batch
    starts."""

    def send(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        if batch_idx == 0 and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signum)

    return send


@pytest.fixture(scope="module")
def reference(tiny_data_dir, tmp_path_factory) -> dict:
    """The metrics of the run without a signal."""
    return run(tiny(tiny_data_dir), tmp_path_factory.mktemp("reference"))["metrics"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1],
                         ids=["sigterm", "ctrl-c", "sigusr1"])
def test_a_signal_during_the_test_lets_it_finish_and_the_run_completes(signum, reference, tiny_data_dir, tmp_path,
                                                                        monkeypatch):
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGUSR1)}
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_test_batch_start", signal_at_first_test_batch(signum),
                      raising=False)
        record = run(tiny(tiny_data_dir), tmp_path / "signalled")
    saved = json.loads((tmp_path / "signalled" / "result.json").read_text())
    assert record["status"] == saved["status"] == "completed" and saved["error"] is None
    for metric in ("val_acc", "test_acc", "test_loss"):  # the whole test split, as without the signal
        assert saved["metrics"][metric] == pytest.approx(reference[metric], rel=1e-6, abs=1e-9), metric
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers  # restored after the run
