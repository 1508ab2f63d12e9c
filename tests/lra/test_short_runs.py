"""A run that trains fewer steps than it is bounded by is not completed (issue 58, point 3): Lightning settings that
train no step are refused before anything is written, one that stops fitting early ends the run ``failed`` without a
test, and ``python -m results`` never tabulates a record that says completed after too few steps."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lra.run.train import run
from lra.settings import Run
from lra_base.errors import UserError
from results.collect import collect
from tests.lra.conftest import ROOT, TINY, compose_config, compose_run, torchless_env
from tests.results.records import write_record

SETTINGS = ["attention=linear", "experiment=quick", *TINY, "task.max_steps=12", "task.eval_every=4",
            "trainer.enable_progress_bar=false"]


@pytest.mark.parametrize("override", ["+trainer.max_epochs=0", "+trainer.limit_train_batches=0.0",
                                      "+trainer.limit_train_batches=0", "trainer.max_steps=0"])
def test_settings_that_train_no_step_are_refused_by_name(override):
    key = override.lstrip("+").split("=")[0]
    with pytest.raises(UserError, match=rf"{key}=0(\.0)? trains no step.*task\.max_steps=12"):
        Run.parse(compose_config([*SETTINGS, "data_dir=unused", override]))


def test_run_py_refuses_them_in_one_line_before_torch_loads_and_writes_nothing(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "run.py"), *SETTINGS, f"data_dir={tmp_path / 'data'}",
                             "+trainer.max_epochs=0", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                            env=torchless_env(tmp_path), capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("error: trainer.max_epochs=0 trains no step")
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_a_fit_that_stops_before_its_last_step_is_failed_and_not_tested(tiny_data_dir, tmp_path):
    """160 training trees in batches of 32: one epoch is 5 steps of the 12 the run is to train."""
    cfg = compose_run([*SETTINGS, f"data_dir={tiny_data_dir}", "+trainer.max_epochs=1"])
    with pytest.raises(UserError, match=r"training stopped at step 5 of 12 because of trainer\.max_epochs=1"):
        run(cfg, tmp_path)
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["status"] == "failed" and "not complete" in record["error"]
    assert record["steps"] == 5 and record["metrics"] == {}


def test_results_never_tabulate_a_completed_record_of_too_few_steps(tmp_path):
    config = compose_config([*SETTINGS, "data_dir=unused", "+trainer.max_epochs=0"])
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.085, config=config, steps=0)
    whole = compose_config([*SETTINGS, "data_dir=unused"])
    write_record(tmp_path / "runs", "listops", "softmax", 0, 0.3, config=whole, steps=12)
    long, problems = collect([tmp_path / "runs"])
    completed = long[long["status"] == "completed"]
    assert set(completed["attention"]) == {"softmax"}
    assert [(p.kind, p.run) for p in problems] == [("short", "listops/linear/seed 0")]
    assert "trained 0 of its 12 steps" in problems[0].message
