"""The progress bar counts steps of ``task.max_steps`` (issue 32, point 6).

A run is bounded by steps, so Lightning sets ``max_epochs=-1`` and its own bars showed "Epoch 0/-2" (rich) or the
batches of one epoch; ``lra.run.callbacks.StepProgressBar`` shows ``step: ... S/max_steps`` and, after a resume, starts
at the resumed step. These tests read what the bar rendered on a tiny run.
"""

from __future__ import annotations

import re

import pytest
from pytorch_lightning.utilities.exceptions import SIGTERMException

from lra.run.callbacks import CheckpointOnPreemption
from lra.run.checkpoints import resume_point
from lra.run.train import run
from lra.settings import Run
from tests.lra.conftest import TINY, compose_run, signal_at_step

STEPS = 12
FRAME = re.compile(r"step:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)")  # "step:  50%|█████     | 6/12 [..., 3.1step/s, ...]"


def config(data_dir) -> Run:
    return compose_run(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY,
                        f"task.max_steps={STEPS}", "task.eval_every=5", "trainer.enable_progress_bar=true"])


def step_frames(rendered: str) -> list[tuple[int, int]]:
    """(step, total) of every frame the training bar drew (tqdm redraws a line after a carriage return)."""
    return [(int(m[1]), int(m[2])) for m in FRAME.finditer(rendered)]


def test_the_bar_counts_steps_to_max_steps_and_never_a_negative_epoch_total(tiny_data_dir, tmp_path, capfd):
    run(config(tiny_data_dir), tmp_path / "run")
    rendered = "".join(capfd.readouterr())
    frames = step_frames(rendered)
    assert frames, f"no 'step: n/{STEPS}' bar in the output:\n{rendered[-2000:]}"
    assert frames[0] == (0, STEPS) and frames[-1] == (STEPS, STEPS)
    assert {total for _, total in frames} == {STEPS}
    assert [step for step, _ in frames] == sorted(step for step, _ in frames)  # one bar for the whole run
    assert not re.search(r"Epoch \d+/-\d", rendered) and "/-" not in rendered


def test_a_resumed_run_counts_on_from_the_step_it_resumed_at(tiny_data_dir, tmp_path, monkeypatch, capfd):
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointOnPreemption, "on_train_batch_start", signal_at_step(7), raising=False)
        with pytest.raises(SIGTERMException):
            run(config(tiny_data_dir), tmp_path / "run")
    capfd.readouterr()  # the first segment's output
    resumed = resume_point(tmp_path / "run" / "checkpoints" / "last.ckpt")[0]  # the end of the signalled step
    assert 0 < resumed < STEPS
    run(config(tiny_data_dir), tmp_path / "run")
    frames = step_frames("".join(capfd.readouterr()))
    assert frames[0] == (resumed, STEPS) and frames[-1] == (STEPS, STEPS)
    assert min(step for step, _ in frames) == resumed  # never drawn from 0 again
