"""A stopped run names the signal the user sent: ``interrupted (Ctrl-C, SIGINT)`` or ``stopped by SIGTERM``, not
Lightning's ``Received SIGTERM: 15`` for both, nor ``preempted`` (issue 60 point 6)."""

from __future__ import annotations

import json
import logging
import signal

import pytest
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra.run.callbacks import CheckpointOnPreemption, sent_signal, stop_signal, stopped_by
from lra.run.train import run
from tests.lra.conftest import signal_at_step, tiny


@pytest.mark.parametrize("signum, words", [(signal.SIGINT, "interrupted (Ctrl-C, SIGINT)"),
                                           (signal.SIGTERM, "stopped by SIGTERM")], ids=["ctrl_c", "sigterm"])
def test_the_log_and_the_record_name_the_signal_sent(tiny_data_dir, tmp_path, monkeypatch, caplog, signum, words):
    monkeypatch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(1, signum), raising=False)
    with caplog.at_level(logging.INFO), pytest.raises(SIGTERMException) as stopped:
        run(tiny(tiny_data_dir), tmp_path)
    assert sent_signal(stopped.value) == stop_signal(stopped.value) == signum
    assert f"{words} at step 2: saved {tmp_path / 'checkpoints' / 'last.ckpt'}" in caplog.text
    assert "Received SIGTERM" not in caplog.text and "preempted" not in caplog.text
    assert json.loads((tmp_path / "result.json").read_text())["error"].startswith(f"{words}; last.ckpt saved")


def test_sigusr1_is_named_but_exits_as_sigterm():
    assert stopped_by(signal.SIGUSR1) == "stopped by SIGUSR1"
    stopped = SIGTERMException()
    stopped.signum, stopped.user_signal = signal.SIGTERM, signal.SIGUSR1
    assert stop_signal(stopped) == signal.SIGTERM and sent_signal(stopped) == signal.SIGUSR1
