"""Preemption under DDP, the decision itself: a signal marks one rank, the ranks agree at a batch's end."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from lra.run.callbacks import CheckpointOnPreemption


def ddp_trainer(others_marked: bool, asked: list, killed: list, between_parts: bool = False) -> SimpleNamespace:
    def reduce_boolean_decision(decision: bool, all: bool = True) -> bool:
        asked.append(decision)
        return decision or others_marked

    strategy = SimpleNamespace(launcher=SimpleNamespace(kill=killed.append),
                               reduce_boolean_decision=reduce_boolean_decision)
    loop = SimpleNamespace(epoch_loop=SimpleNamespace(_should_accumulate=lambda: between_parts))
    return SimpleNamespace(world_size=2, _signal_connector=SimpleNamespace(received_sigterm=False), strategy=strategy,
                           fit_loop=loop)


def test_a_signal_marks_this_rank_and_is_passed_on_once_but_stops_nothing_by_itself(tmp_path):
    asked, killed = [], []
    trainer, callback = ddp_trainer(False, asked, killed), CheckpointOnPreemption(tmp_path / "last.ckpt")
    callback.setup(trainer, None, "test")
    for _ in range(2):
        trainer._signal_connector._sigterm_notifier_fn(signal.SIGTERM, None)  # what Lightning's handler calls
    assert killed == [signal.SIGTERM] and not trainer._signal_connector.received_sigterm  # no stop, no collective
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert asked == [True] and trainer._signal_connector.received_sigterm  # agreed at the batch's end


@pytest.mark.parametrize(("others_marked", "stops"), [(False, False), (True, True)])
def test_a_rank_not_signalled_stops_with_the_one_that_was(tmp_path, others_marked, stops):
    asked, killed = [], []
    trainer, callback = ddp_trainer(others_marked, asked, killed), CheckpointOnPreemption(tmp_path / "last.ckpt")
    callback.setup(trainer, None, "fit")
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert asked == [False] and trainer._signal_connector.received_sigterm is stops and killed == []


def test_between_the_parts_of_a_batch_the_agreed_stop_waits_for_the_last_part(tmp_path):
    asked, killed = [], []
    trainer, callback = ddp_trainer(True, asked, killed, between_parts=True), CheckpointOnPreemption(tmp_path)
    callback.setup(trainer, None, "fit")
    callback.on_train_batch_end(trainer, None, None, None, 0)
    assert not trainer._signal_connector.received_sigterm
    trainer.fit_loop.epoch_loop._should_accumulate = lambda: False
    callback.on_train_batch_end(trainer, None, None, None, 1)
    assert trainer._signal_connector.received_sigterm and asked == [False, False]
