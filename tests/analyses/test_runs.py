"""One way to reuse or train an analysis's runs: a changed setting never lands in another setting's folder."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from analyses import _runs, ar_ablation
from lra_base.errors import UserError

BASE = ["--seeds", "2"]  # not --quick: its own max_steps would hide --steps


def planned(tmp_path, *argv: str) -> dict[str, tuple[dict, object]]:
    return ar_ablation.plan(ar_ablation.parse_args([*BASE, "--out-root", str(tmp_path), *argv]))[2]


@pytest.mark.parametrize("changed", [["--steps", "7"], ["--lrs", "0.01"], ["model.dropout=0.2"]],
                         ids=["steps", "lr", "override"])
def test_a_changed_setting_cannot_resume_another_settings_checkpoint(tmp_path, changed):
    base = planned(tmp_path)
    for _, run_dir in base.values():  # every run of the base setting was interrupted after a validation
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"base setting")
    other = planned(tmp_path, *changed)
    assert len(other) == len(base)
    assert not {run_dir for _, run_dir in base.values()} & {run_dir for _, run_dir in other.values()}
    assert not [cfg for cfg, _ in other.values() if cfg in [c for c, _ in base.values()]]
    for _, run_dir in other.values():
        assert not (run_dir / "checkpoints" / "last.ckpt").exists()


def test_the_same_setting_finds_its_runs_again(tmp_path):
    assert planned(tmp_path) == planned(tmp_path)
    assert len({run_dir for _, run_dir in planned(tmp_path).values()}) == len(planned(tmp_path))


def test_a_completed_run_is_reused_only_under_its_own_config(tmp_path):
    cfg, run_dir = next(iter(planned(tmp_path).values()))
    run_dir.mkdir(parents=True)
    record = {"task": "ar", "attention": "llops", "seed": 0, "status": "completed", "config": cfg.config(),
              "run_dir": "outputs/analyses/elsewhere"}  # trained in another clone, copied here
    (run_dir / "result.json").write_text(json.dumps(record))
    assert _runs.train_or_reuse(cfg, run_dir) == {**record, "run_dir": str(run_dir)}  # its curve is read here
    with pytest.raises(UserError, match="holds a completed run of other settings .* seed: 0 -> 1"):
        _runs.train_or_reuse(replace(cfg, seed=1), run_dir)


def test_a_committed_copy_of_a_completed_run_is_reused_where_its_folder_is_empty(tmp_path, monkeypatch):
    """Another machine's run, archived with `results.archive` (record and curve, no checkpoint), is not trained
    again on a fresh clone; a copy of other settings is not taken for it."""
    from lra.run import train
    from results import archive

    committed = tmp_path / "committed"
    monkeypatch.setattr(_runs, "COMMITTED_RUNS", committed)
    cfg, run_dir = next(iter(planned(tmp_path / "outputs" / "analyses").values()))
    (run_dir / "csv").mkdir(parents=True)
    record = {"task": "ar", "attention": "llops", "seed": 0, "status": "completed", "config": cfg.config(),
              "metrics": {"test_acc": 0.9}, "run_dir": str(run_dir)}
    (run_dir / "result.json").write_text(json.dumps(record))
    (run_dir / "csv" / "metrics.csv").write_text("step,val/acc\n9,0.2\n19,0.6\n29,0.9\n")
    copy = archive.archive(run_dir, committed)
    assert copy == committed / "analyses" / "ar_ablation" / "runs" / run_dir.name
    for path in sorted(run_dir.rglob("*"), reverse=True):  # a fresh clone: the outputs are gone
        path.rmdir() if path.is_dir() else path.unlink()

    def no_training(*args, **kwargs):
        raise AssertionError("trained a run whose committed copy completed under the same settings")

    monkeypatch.setattr(train, "run", no_training)
    reused = _runs.train_or_reuse(cfg, run_dir)
    assert reused["metrics"] == {"test_acc": 0.9} and reused["run_dir"] == str(copy)
    assert ar_ablation.crossing_step(reused) == 20  # the copy's metrics.csv is its curve; logged at index 19
    assert _runs.reusable_record(replace(cfg, rerun=True), run_dir) is None
    other = json.loads((copy / "result.json").read_text())
    other["config"]["task"]["max_steps"] += 1
    (copy / "result.json").write_text(json.dumps(other))
    assert _runs.reusable_record(cfg, run_dir) is None
    with pytest.raises(AssertionError, match="trained a run"):
        _runs.train_or_reuse(cfg, run_dir)


def _slow_run(run, run_dir):  # a stand-in for one training run in a worker: a second, then its folder
    import time
    from pathlib import Path

    time.sleep(1.0)
    Path(run_dir).mkdir(parents=True)
    return {"status": "completed"}


def test_ctrl_c_while_runs_are_queued_starts_none_of_them(tmp_path, monkeypatch):
    """Before, leaving the pool waited for every queued run: a card or ablation went on training after Ctrl-C."""
    import signal
    import threading

    monkeypatch.setattr(_runs, "_train_or_fail", _slow_run)  # the pool's workers fork after this
    jobs = {f"run{i}": (None, tmp_path / f"run{i}") for i in range(4)}
    # Python's own Ctrl-C handler, whatever an earlier test in this process left; the signal goes to the main thread
    # (this process only, not the workers), whose wait it interrupts at once
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            _runs.train_all(jobs, workers=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert [path.name for path in sorted(tmp_path.iterdir())] == ["run0"]  # the running one ends; no other starts


def _quick_run(run, run_dir):
    from pathlib import Path

    Path(run_dir).mkdir(parents=True)
    return {"status": "completed", "run": run}


def test_every_run_is_trained_once_and_returned_in_the_jobs_order(tmp_path, monkeypatch):
    monkeypatch.setattr(_runs, "_train_or_fail", _quick_run)
    jobs = {f"run{i}": (i, tmp_path / f"run{i}") for i in range(5)}
    done = _runs.train_all(jobs, workers=2)
    assert list(done) == list(jobs) and [record["run"] for record in done.values()] == list(range(5))
    assert len(list(tmp_path.iterdir())) == 5
