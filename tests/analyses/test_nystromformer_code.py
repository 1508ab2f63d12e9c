"""The Nystromformer port runner on a stand-in port (``port_stand_in``) and tiny generated ListOps."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from analyses import nystromformer_code as runner
from data_prep.listops import generate
from tests.analyses.port_stand_in import RUN_TASKS, write_stand_in

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("port")
    generate(base / "data", train=16, val=8, test=9, min_length=20, max_length=60, seed=3)
    return write_stand_in(base / "code"), base / "data"


def run(port: Path, data: Path, out: Path, *mode: str, stop_at: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("PORT_STOP_AT", None)
    if stop_at is not None:
        env["PORT_STOP_AT"] = str(stop_at)
    command = [sys.executable, "-m", "analyses.nystromformer_code", "--port", str(port), "--data-dir", str(data),
               "--out", str(out), "--seed", "1", *mode]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def log_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs" / "listops_softmax_output.log").read_text().splitlines()]


def test_edits_change_only_the_listed_lines_and_name_a_missing_one(tiny, tmp_path):
    port, _ = tiny
    patched, diff = runner.patched_source(port)
    assert "PORT_RESUME.start()" in patched and "PORT_RESUME.save(train_step_idx)" in patched
    assert ".cuda()" not in patched
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert removed == [old for _, old, new in runner.EDITS if not new.startswith(old)]  # an insert keeps its line
    (tmp_path / "run_tasks.py").write_text(RUN_TASKS.replace("model = model.cuda()\n", ""))
    with pytest.raises(SystemExit, match="expected one line 'model = model.cuda\\(\\)', found 0"):
        runner.patched_source(tmp_path)


def test_a_folder_without_the_port_files_is_named(tmp_path):
    with pytest.raises(SystemExit, match="not the port's LRA/code folder .missing run_tasks.py"):
        runner.check_port(tmp_path)


def test_our_data_in_the_port_format(tiny, tmp_path):
    _, data = tiny
    runner.convert(data, tmp_path)
    with open(tmp_path / "listops.test.pickle", "rb") as f:
        examples = pickle.load(f)  # written by the line above
    assert len(examples) == 9
    ids = examples[0]["input_ids_0"]
    assert ids.shape == (runner.PAD_TO,) and ids.dtype.name == "int32"
    length = int((ids != 0).sum())
    assert 20 <= length <= 60 and not ids[length:].any()  # real ids first, then zeros


def test_our_softmax_gives_the_port_softmax_outputs_and_gradients(tiny):
    port, data = tiny
    found = runner.parity(runner.import_port(port), data)
    for name in ("attention", "model", "model_wrapper", "dataset", "lra_config"):
        sys.modules.pop(name, None)
    assert found["dtype"] == "torch.float32"
    assert found["tokens_max_abs"] < 1e-5 and found["scores_max_abs"] < 1e-5 and found["grads_max_rel"] < 1e-5


def test_a_stopped_run_resumes_to_the_same_log_and_model(tiny, tmp_path):
    port, data = tiny
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = run(port, data, whole, "--train")
    assert done.returncode == 0, done.stderr
    assert "completed after step 8" in done.stdout
    stopped = run(port, data, cut, "--train", stop_at=7)  # after the validation at step 5
    assert stopped.returncode != 0 and "stopped" in stopped.stderr
    assert [row["train_step_idx"] for row in log_lines(cut)] == [2, 2, 5, 5]
    with open(cut / "logs" / "listops_softmax_output.log", "a") as f:
        f.write('{"component": "train", "train_step_idx": 8, "acc')  # a line cut mid-write
    resumed = run(port, data, cut, "--train")
    assert resumed.returncode == 0, resumed.stderr
    assert "after step 5" in resumed.stdout
    assert log_lines(cut) == log_lines(whole)  # every validation and the test, to the port's 4 decimals
    states = [torch.load(out / "logs" / "resume.pt", weights_only=True)["model"] for out in (whole, cut)]
    for name, value in states[0].items():
        torch.testing.assert_close(states[1][name], value, rtol=1e-6, atol=1e-7)
    facts = json.loads((cut / "port.json").read_text())
    assert facts["seed"] == 1 and facts["precision"] == "fp32" and "+" in facts["patch"]


def test_a_resume_on_other_data_is_refused_naming_both(tiny, tmp_path):
    port, data = tiny
    other = tmp_path / "other"
    generate(other, train=16, val=8, test=9, min_length=20, max_length=60, seed=4)
    out = tmp_path / "run"
    assert run(port, data, out, "--train", stop_at=1).returncode != 0
    refused = run(port, other, out, "--train")
    assert refused.returncode != 0
    assert "was started with another data_manifest_sha256" in refused.stderr
    refused = run(port, other, out, "--record")  # before: scored on the other data, under the trained data's hash
    assert refused.returncode != 0 and "trained on other data than --data-dir" in refused.stderr
    assert not (out / "result.json").exists()


def test_the_record_holds_the_port_numbers_and_the_tables_show_them_beside_study_port(tiny, tmp_path):
    from results.__main__ import main as results_main
    from tests.results.records import write_record

    port, data = tiny
    out = tmp_path / "outputs" / "listops" / "softmax" / "seed1" / "nystromformer_code"
    assert run(port, data, out, "--train").returncode == 0
    recorded = run(port, data, out, "--record")
    assert recorded.returncode == 0, recorded.stderr
    record = json.loads((out / "result.json").read_text())
    log = log_lines(out)
    assert record["status"] == "completed" and record["steps"] == 9 and record["tag"] == "nystromformer_code"
    assert record["metrics"]["test_acc"] == log[-1]["accu"] and log[-1]["component"] == "test"
    assert record["metrics"]["val_acc"] == max(row["accu"] for row in log if row["component"] == "dev")
    assert 0 <= record["metrics"]["test_acc_all"] <= 1  # all 9 test trees (the port's loader: 8)
    assert record["segments"][0]["precision"] == "32-true" and "+" in record["config"]["patch"]
    runs = tmp_path / "runs"
    write_record(runs, "listops", "softmax", 0, 0.35, tag="study_port")
    (runs / "port").mkdir(parents=True)
    for name in ("result.json", "metrics.csv"):
        (runs / "port" / name).write_bytes((out / name).read_bytes())
    assert results_main([str(runs), "--out", str(tmp_path / "tables")]) == 0
    markdown = (tmp_path / "tables" / "lra.md").read_text()
    study = markdown.split("## tag `study_port`")[1]
    assert "The port's own code on our data, this protocol (tag `nystromformer_code`" in study
    port_section = markdown.split("## tag `nystromformer_code`")[1].split("## tag")[0]
    assert "listops Δ (Nystromformer port)" in port_section
    assert "two remain: fp32 here against its fp16 autocast, and our test split" in port_section
    assert "record no config" not in port_section  # the port's settings are in port.json, not a config of ours


def test_an_unfinished_record_says_how_to_resume_it(tiny, tmp_path):
    """The port's run resumes with ``--train`` from its ``resume.pt``, not from a ``last.ckpt``: lra.md says so."""
    from results.collect import collect

    port, data = tiny
    out = tmp_path / "runs" / "listops" / "softmax" / "seed1" / "nystromformer_code"
    assert run(port, data, out, "--train", stop_at=7).returncode != 0
    assert run(port, data, out, "--record").returncode == 1  # unfinished
    record = json.loads((out / "result.json").read_text())
    assert record["status"] == "interrupted" and "test_acc" not in record["metrics"]
    assert record["resumes_with"].startswith("python -m analyses.nystromformer_code --port PORT --seed 1 --train")
    _, problems = collect([tmp_path / "runs"])
    assert [p.kind for p in problems] == ["unfinished"]
    assert "--train (from logs/resume.pt) resumes it" in problems[0].message and "last.ckpt" not in problems[0].message
