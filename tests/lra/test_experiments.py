"""One experiment mechanism: `experiment=<name> task=<task>` for every experiment, its name recorded, the
old `experiment=<name>/<task>` refused with the new spelling, and conf/experiment/README.md listing them all."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from lra.run.record import new_record
from lra.run.record_compat import old_experiment_spelling
from tests.lra.conftest import CONF, compose_config, compose_run
from tests.lra.test_run import run_py

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
TASKS = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))


def test_every_experiment_names_itself_and_is_listed_in_the_readme():
    readme = (CONF / "experiment" / "README.md").read_text()
    assert EXPERIMENTS
    for name in EXPERIMENTS:
        own = OmegaConf.load(CONF / "experiment" / f"{name}.yaml")
        assert own.experiment == name and own.tag == name
        assert f"| `{name}` |" in readme


def test_per_task_files_sit_under_an_experiment_and_name_a_task():
    folders = [p for p in (CONF / "experiment").iterdir() if p.is_dir()]
    assert folders
    for folder in folders:
        assert folder.name in EXPERIMENTS
        assert {p.stem for p in folder.glob("*.yaml")} <= set(TASKS)
        for path in folder.glob("*.yaml"):
            assert path.read_text().startswith("# @package _global_"), path
            assert set(OmegaConf.load(path)) <= {"task", "model", "trainer"}, path  # no tag: <name>.yaml sets it


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_and_task_compose_for_every_pair(name):
    for task in TASKS:
        cfg = compose_config([f"experiment={name}", f"task={task}"])  # composed (Run.parse refuses a task not covered)
        assert cfg["experiment"] == name and cfg["tag"] == name and cfg["task"]["name"] == task


def test_the_per_task_file_is_applied_and_the_record_names_the_experiment(tmp_path):
    run = compose_run(["experiment=lra_original", "task=text"])
    assert run.model.dim == 256 and run.task.optim.schedule == "rsqrt"
    assert new_record(run, tmp_path)["experiment"] == "lra_original"
    assert new_record(compose_run(["task=text"]), tmp_path)["experiment"] is None


@pytest.mark.parametrize("argv,fix", [
    (["experiment=lra_original/text"], "experiment=lra_original task=text"),
    (["-m", "experiment=lra_original/text,lra_original/image"], "experiment=lra_original task=text,image"),
])
def test_the_old_spelling_is_refused_with_the_new_one(argv, fix):
    assert fix in old_experiment_spelling(argv)


def test_current_spellings_pass():
    assert old_experiment_spelling(["experiment=quick", "task=text", "+experiment_note=a/b"]) is None


def test_run_py_refuses_the_old_spelling_before_composing(tmp_path):
    done = run_py("experiment=lra_original/image", cwd=tmp_path)
    assert done.returncode == 2 and "experiment=lra_original task=image" in done.stderr
    assert "Traceback" not in done.stderr


def _sky_table() -> dict[str, list[str]]:
    """docs/protocol.md's SKY schedule table (section 5): task -> [batch, lr, warm-up, steps, eval]."""
    text = (CONF.parent / "docs" / "protocol.md").read_text()
    table = text.split("**SKY** (src/config.py", 1)[1].split("\n\n", 2)[1]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


@pytest.mark.parametrize("task", ["listops", "text", "retrieval", "image", "pathfinder"])
def test_skyformer_port_runs_each_task_on_the_schedule_docs_protocol_gives(task):
    batch, lr, warmup, steps, every = _sky_table()[task]
    task_ = compose_run(["experiment=skyformer_port", f"task={task}"]).task
    optim = task_.optim
    assert task_.batch_size == int(batch.split()[0]) and optim.lr == float(lr)
    assert optim.warmup_steps == int(warmup) and task_.max_steps == int(steps.rstrip("k")) * 1000
    assert task_.eval_every == int(every.split("/")[0]) and optim.schedule == "onecycle"
    assert task_.batch_size % task_.micro_batches == 0
