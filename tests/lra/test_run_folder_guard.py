"""``run.py`` writes nothing into a run folder it refuses (a busy folder, refused settings, a read-only folder),
and a sweep lists each job's outcome and fails when one did (issue 29, points 6, 11 and 12)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from hydra.types import RunMode
from omegaconf import OmegaConf

import lra.run.hydra_hooks
from lra_base.lock import run_folder_lock
from results.__main__ import main as results_main
from tests.lra.conftest import ROOT, TINY, compose_config, torchless_env
from tests.lra.test_run import run_py
from tests.results.records import write_record


def snapshot(folder) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_command_into_a_busy_folder_writes_nothing_there(tiny_data_dir, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "result.json").write_text(json.dumps({"status": "interrupted", "note": "run A's last segment"}))
    common = ["attention=linear", "experiment=quick", "trainer=debug", f"data_dir={tiny_data_dir}", *TINY]
    with run_folder_lock(busy):  # run A trains in it
        before = snapshot(busy)
        refused = run_py(*common, "model.checkpoint_blocks=maybe", f"hydra.run.dir={busy}", cwd=tmp_path)
        assert refused.returncode == 2 and "model.checkpoint_blocks='maybe'" in refused.stderr
        second = run_py(*common, f"hydra.run.dir={busy}", cwd=tmp_path)
        assert second.returncode == 2 and "is in use by another run" in second.stderr, second.stderr[-2000:]
        assert snapshot(busy) == before  # no record, no .hydra/, no run.log
    fresh = run_py(*common, "model.checkpoint_blocks=maybe", f"hydra.run.dir={tmp_path / 'fresh'}", cwd=tmp_path)
    assert fresh.returncode == 2 and not (tmp_path / "fresh").exists()  # refused: no run folder at all


@pytest.mark.parametrize("name", ["run.log", ".hydra/config.yaml"])
def test_a_link_where_hydra_writes_its_log_or_config_is_refused_by_name(tiny_data_dir, tmp_path, name):
    target = tmp_path / "victim.txt"
    target.write_text("mine\n")
    link = tmp_path / "run" / name
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    result = run_py("attention=linear", "experiment=quick", "trainer=debug", f"data_dir={tiny_data_dir}", *TINY,
                    f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert result.returncode == 2 and f"error: {link} is a symbolic link" in result.stderr, result.stderr[-2000:]
    assert target.read_text() == "mine\n"


@contextlib.contextmanager
def read_only(folder):
    """``folder`` made read-only for this process: ``chmod`` for a user, the immutable flag for root (which
    ignores modes); skips when neither can be set here."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        undo = ["chmod", "755", str(folder)]
    elif subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        undo = ["chattr", "-i", str(folder)]
    else:
        pytest.skip("cannot make a folder read-only here (root without chattr)")
    try:
        yield folder
    finally:
        subprocess.run(undo, check=True)


def test_a_rerun_in_a_read_only_run_folder_says_it_is_not_writable(tiny_data_dir, tmp_path):
    run_dir = write_record(tmp_path / "outputs", "listops", "linear", 0, 0.3).parent  # a completed run
    with read_only(run_dir):
        result = run_py("attention=linear", "experiment=quick", "trainer=debug", f"data_dir={tiny_data_dir}", *TINY,
                        f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"error: {run_dir} is not writable" in result.stderr and "hydra.run.dir=DIR" in result.stderr
    assert "Traceback" not in result.stderr and "Unable to configure handler" not in result.stderr


def test_tables_into_a_read_only_folder_say_it_is_not_writable(tmp_path, capsys):
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.3)
    out = tmp_path / "tables"
    out.mkdir()
    with read_only(out):
        assert results_main([str(tmp_path / "runs"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: {out} is not writable" in err and "--out DIR" in err and not list(out.iterdir())


def test_tables_are_not_written_through_a_link(tmp_path, capsys):
    write_record(tmp_path / "runs", "listops", "linear", 0, 0.3)
    target = tmp_path / "victim.md"
    target.write_text("mine\n")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "lra.md").symlink_to(target)
    assert results_main([str(tmp_path / "runs"), "--out", str(tmp_path / "tables")]) == 2
    assert f"{tmp_path / 'tables' / 'lra.md'} is a symbolic link" in capsys.readouterr().err
    assert target.read_text() == "mine\n"


def job(sweep_dir, folder):
    return OmegaConf.create({"hydra": {"mode": RunMode.MULTIRUN, "sweep": {"dir": str(sweep_dir)},
                                       "runtime": {"output_dir": str(folder)}}})


def test_a_sweep_lists_each_job_and_exits_1_when_one_failed_or_diverged(tmp_path, capsys):
    hooks = lra.run.hydra_hooks.RunHooks()
    hooks.on_multirun_start(job(tmp_path, tmp_path))
    statuses = ("completed", "diverged", "already completed", "refused")
    for number, status in enumerate(statuses):
        hooks.on_job_start(job(tmp_path, tmp_path / f"job{number}"))
        lra.run.hydra_hooks.note_job(status)
        hooks.on_job_end(job(tmp_path, tmp_path / f"job{number}"), SimpleNamespace(status=None))
    with pytest.raises(SystemExit) as exit_:
        hooks.on_multirun_end(job(tmp_path, tmp_path))
    assert exit_.value.code == 1
    lines = capsys.readouterr().out.splitlines()
    assert "4 job(s), 2 completed, 2 not" in lines[1]
    assert [[part.strip() for part in line.rsplit(" ", 1)] for line in lines[2:]] == [
        [status, str(tmp_path / f"job{number}")] for number, status in enumerate(statuses)]


def test_a_sweep_whose_jobs_all_completed_exits_normally(tmp_path, capsys):
    hooks = lra.run.hydra_hooks.RunHooks()
    hooks.on_multirun_start(job(tmp_path, tmp_path))
    hooks.on_job_start(job(tmp_path, tmp_path / "a"))
    lra.run.hydra_hooks.note_job("completed")
    hooks.on_job_end(job(tmp_path, tmp_path / "a"), SimpleNamespace(status=None))
    hooks.on_multirun_end(job(tmp_path, tmp_path))
    assert "1 job(s), 1 completed, 0 not" in capsys.readouterr().out


def held_folder(folder, data_dir) -> dict[str, bytes]:
    """A completed run at lr 0.001 in ``folder``, with the ``.hydra/`` and ``run.log`` its command wrote."""
    cfg = compose_config(["attention=linear", "experiment=quick", f"data_dir={data_dir}", *TINY])
    record = {"task": "listops", "attention": "linear", "seed": 0, "tag": "quick", "experiment": "quick",
              "status": "completed", "metrics": {"val_acc": 0.3, "test_acc": 0.1}, "config": cfg}
    (folder / ".hydra").mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(record))
    (folder / ".hydra" / "config.yaml").write_text("task:\n  optim:\n    lr: 0.001\n")
    (folder / ".hydra" / "overrides.yaml").write_text("- attention=linear\n")
    (folder / "run.log").write_text("the run's own log\n")
    return snapshot(folder)


@pytest.mark.parametrize("busy", [False, True], ids=["completed", "training"])
def test_a_refused_sweep_job_changes_nothing_in_the_folder(tiny_data_dir, tmp_path, busy):
    sweep, folder = tmp_path / "sweep", tmp_path / "sweep" / "X"
    before = held_folder(folder, tiny_data_dir)
    with run_folder_lock(folder) if busy else contextlib.nullcontext():
        if busy:
            before = snapshot(folder)  # with run A's run.lock
        result = subprocess.run([sys.executable, str(ROOT / "run.py"), "-m", "attention=linear", "experiment=quick",
                                 f"data_dir={tiny_data_dir}", *TINY, "task.optim.lr=0.05", f"hydra.sweep.dir={sweep}",
                                 "hydra.sweep.subdir=X"], cwd=tmp_path, env=torchless_env(tmp_path),
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 1, result.stderr[-2000:]
        expected = "is in use by another run" if busy else "task.optim.lr: 0.001 -> 0.05"
        assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert "refused" in result.stdout
        assert snapshot(folder) == before  # .hydra/ and run.log as they were


def test_a_sweep_job_writes_hydra_files_and_its_log_once_it_owns_the_folder(tiny_data_dir, tmp_path):
    result = run_py("-m", "attention=linear", "experiment=quick", "trainer=debug", f"data_dir={tiny_data_dir}", *TINY,
                    "seed=0,1", f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=job${hydra.job.num}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    for number in (0, 1):
        job = tmp_path / f"job{number}"
        assert OmegaConf.load(job / ".hydra" / "config.yaml").seed == number
        assert f"seed={number}" in OmegaConf.load(job / ".hydra" / "overrides.yaml")
        assert OmegaConf.load(job / ".hydra" / "hydra.yaml").hydra.runtime.output_dir == str(job)
        assert "test_acc=" in (job / "run.log").read_text()
