"""The threads benchmark's cases: environment, command and the busy process (no time is asserted)."""

from __future__ import annotations

import signal

import pytest

from benchmarks import threads


def test_each_case_sets_thread_count_and_wait_policy():
    env = threads.job_env(2, "ACTIVE")
    assert env["OMP_NUM_THREADS"] == "2" and env["OMP_WAIT_POLICY"] == "ACTIVE"
    assert threads.job_env(1, "PASSIVE")["OMP_WAIT_POLICY"] == "PASSIVE"
    spin = threads.job_env(2, "spin:3000")
    assert spin["GOMP_SPINCOUNT"] == "3000" and "OMP_WAIT_POLICY" not in spin
    suite = threads.job_env(None, "suite")
    assert not {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & suite.keys()
    with pytest.raises(ValueError, match="spin:N"):
        threads.job_env(2, "SLEEPY")


def test_the_job_is_the_quick_command_cut_to_the_steps_in_its_own_folder(tmp_path):
    command = threads.job_command("llops", 150, tmp_path / "run", ["seed=1"])
    assert command[1].endswith("run.py")
    assert {"task=listops", "attention=llops", "experiment=quick", "task.max_steps=150", "task.eval_every=150",
            f"hydra.run.dir={tmp_path / 'run'}", "seed=1"} <= set(command)


def test_the_busy_process_runs_inside_the_block_and_is_gone_after(monkeypatch):
    started = []
    real_popen = threads.subprocess.Popen

    def spy(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(threads.subprocess, "Popen", spy)
    with threads.load("busy"):
        assert len(started) == 1 and started[0].poll() is None
    assert started[0].returncode == -signal.SIGKILL
    with threads.load("idle"):
        assert len(started) == 1


def test_the_suites_choice_is_read_from_the_line_lra_threads_logs(caplog, monkeypatch):
    from lra.run.threads import FreeCoreThreads, torch_threads

    watcher = FreeCoreThreads(most=2)
    watcher.cpus, watcher._last = {0, 1}, (0.0, 0.0, 0.0)
    monkeypatch.setattr(watcher, "_reading", lambda: (1.0, 1.6, 0.0))  # others kept 1.6 of 2 cores busy
    with torch_threads(2), caplog.at_level("INFO", logger="lra.run.threads"):
        assert watcher.check() == 1
    assert threads.CHOICE.findall(caplog.text) == [("1", "1.6")]


def test_repeats_below_one_are_refused():
    with pytest.raises(SystemExit):
        threads.main(["--repeats", "0"])
