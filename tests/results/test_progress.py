"""`python -m results.progress`: each run folder's state, last validation, escape step and pace."""

import json
import os
import socket

from torch.utils.tensorboard import SummaryWriter

from lra_base.lock import LOCK_NAME, live_holder, run_folder_lock
from results.progress import main, progress_table


def run_folder(root, seed=1, validations=((50, 0.18, 1000.0), (100, 0.31, 1100.0), (150, 0.35, 1200.0)),
               status=None, checkpoint=True):
    """A ListOps run folder as run.py leaves it: Hydra's config, metrics.csv, TensorBoard events, last.ckpt."""
    folder = root / "listops" / "softmax" / f"seed{seed}" / "study"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text(
        "task:\n  name: listops\n  max_steps: 1000\nattention:\n  name: softmax\n"
        f"seed: {seed}\ntrainer:\n  max_steps: ${{task.max_steps}}\n")
    (folder / "csv").mkdir()
    rows = ["epoch,step,val/acc"] + [f"0,{step - 1},{acc}" for step, acc, _ in validations]
    (folder / "csv" / "metrics.csv").write_text("\n".join(rows) + "\n")
    with SummaryWriter(log_dir=str(folder / "tensorboard")) as writer:
        for step, acc, wall_time in validations:
            writer.add_scalar("val/acc", acc, step - 1, walltime=wall_time)
    if checkpoint:
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    if status:
        (folder / "result.json").write_text(json.dumps({"status": status}))
    return folder


def test_a_stopped_run_shows_its_step_escape_and_the_pace_of_its_last_segment(tmp_path):
    run_folder(tmp_path)
    row = progress_table([tmp_path]).iloc[0]
    assert row["run"] == "listops/softmax/seed1/study" and row["state"] == "stopped"
    assert row["step"] == "150 / 1,000" and row["best val"] == "35.00" and row["last val"] == "35.00"
    assert row["escaped at"] == "100"  # the first validation >= 30%
    assert row["steps/h"] == "1,800"  # 100 steps in 200 s
    assert row["hours left"] == f"{850 / 1800:.2f}"


def test_state_follows_the_lock_and_the_record(tmp_path):
    training = run_folder(tmp_path, seed=1)
    run_folder(tmp_path, seed=2, status="completed")
    run_folder(tmp_path, seed=3, status="interrupted", validations=((50, 0.17, 10.0),))
    run_folder(tmp_path, seed=4, checkpoint=False, validations=())
    with run_folder_lock(training):
        table = progress_table([tmp_path]).set_index("run")
    states = table["state"].to_dict()
    assert states["listops/softmax/seed1/study"].startswith("training (pid ")
    assert states["listops/softmax/seed2/study"] == "completed"
    assert table.loc["listops/softmax/seed2/study", "steps/h"] == ""  # no pace for a finished run
    assert states["listops/softmax/seed3/study"] == "interrupted"
    assert table.loc["listops/softmax/seed3/study", "escaped at"] == "not yet"
    assert table.loc["listops/softmax/seed3/study", "steps/h"] == ""  # one validation: no pace
    assert states["listops/softmax/seed4/study"] == "not started"
    assert progress_table([tmp_path]).set_index("run").loc["listops/softmax/seed1/study", "state"] == "stopped"


def test_a_lock_file_left_by_a_dead_process_is_not_a_live_run(tmp_path):
    for host in (socket.gethostname(), "elsewhere"):  # a pid above Linux's largest, or another machine's
        (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 2**22 + 12345, "host": host, "started": ""}))
        assert live_holder(tmp_path) is None
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    assert live_holder(tmp_path) == os.getpid()
    (tmp_path / LOCK_NAME).write_text("not json")
    assert live_holder(tmp_path) is None


def test_the_command_prints_a_table_or_says_what_is_missing(tmp_path, capsys):
    assert main([str(tmp_path)]) == 0
    assert "No run folders" in capsys.readouterr().out
    run_folder(tmp_path)
    assert main([str(tmp_path)]) == 0
    assert "listops/softmax/seed1/study" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_only_hydra_configs_mark_run_folders(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.yaml").write_text("task:\n  name: listops\n")  # not under .hydra/: not a run folder
    assert progress_table([tmp_path]).empty


def test_an_unreadable_config_still_gives_the_folders_line(tmp_path, capsys):
    folder = run_folder(tmp_path)
    (folder / ".hydra" / "config.yaml").write_text("task: [unclosed\n")
    row = progress_table([tmp_path]).iloc[0]
    assert row["state"] == "stopped" and row["step"] == "150" and row["escaped at"] == ""  # task unknown
    assert "config.yaml: not a readable config" in capsys.readouterr().err


def test_a_stopped_run_shows_the_step_it_resumes_from_and_a_finished_one_never_escaped_says_never(tmp_path):
    import torch

    folder = run_folder(tmp_path, validations=((50, 0.18, 1000.0), (250, 0.2, 1100.0)))
    torch.save({"global_step": 303, "state_dict": {}}, folder / "checkpoints" / "last.ckpt")
    row = progress_table([tmp_path]).iloc[0]
    assert row["state"] == "stopped" and row["step"] == "303 / 1,000"  # last.ckpt's step, not the last validation
    assert row["escaped at"] == "not yet"
    run_folder(tmp_path, seed=2, validations=((50, 0.18, 1000.0), (1000, 0.2, 1100.0)), status="completed")
    done = progress_table([tmp_path]).set_index("run").loc["listops/softmax/seed2/study"]
    assert done["state"] == "completed" and done["escaped at"] == "never"
