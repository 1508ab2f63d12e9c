"""Run-folder names derived from settings: a name part that is not one plain folder name is refused before anything
is written (issue 58 point 11), and a folder name stays within the file system's limit (point 9)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lra.settings import Run
from lra_base.errors import UserError
from tests.lra.conftest import ROOT, compose_config, torchless_env

SHORT = ["attention=linear", "experiment=quick", "task.max_steps=20", "task.eval_every=10"]


def run_torchless(*args: str, cwd, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``run.py`` in ``cwd`` where importing torch fails: a refusal shown to come before torch loads."""
    env = {**torchless_env(cwd), **(env_extra or {})}
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "fake" not in p.parts)


@pytest.mark.parametrize("sweep", [False, True])
def test_a_tag_that_leaves_outputs_is_refused_in_one_line_and_writes_nothing(tmp_path, sweep):
    before = files_under(tmp_path)
    mode = ["-m", f"hydra.sweep.dir={tmp_path / 'outputs'}"] if sweep else []
    result = run_torchless(*mode, *SHORT, "tag=../../../../escaped", cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and "error: tag='../../../../escaped' is not one plain folder name" \
        in result.stderr and "Traceback" not in result.stderr
    assert files_under(tmp_path) == before  # no outputs/, no escaped/


@pytest.mark.parametrize("key", ["tag", "task.name", "attention.name"])
def test_a_name_with_a_line_break_or_an_escape_is_refused(tmp_path, key):
    result = run_torchless(*SHORT, f"{key}=${{oc.env:NAME}}", cwd=tmp_path, env_extra={"NAME": "a\x1b[2Jb\nc"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and f"error: {key}='a\\x1b[2Jb\\nc' is not one plain folder name" \
        in result.stderr
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("section,key,value", [(None, "tag", ".."), (None, "tag", "."), (None, "tag", ""),
                                               (None, "experiment", "a/b"), ("task", "name", "x" * 256),
                                               ("attention", "name", "lin\u2028ear")])
def test_the_settings_check_refuses_names_that_are_not_one_folder(section, key, value):
    cfg = compose_config(SHORT)
    (cfg[section] if section else cfg)[key] = value
    with pytest.raises(UserError, match="is not one plain folder name"):
        Run.parse(cfg)


def test_plain_names_pass():
    Run.parse(compose_config([*SHORT, "tag=my_study-2.b", "seed=3"]))


TWELVE = ["task.optim.lr=0.00123456789", "task.optim.weight_decay=0.0123456789", "task.optim.eps=1.23456789e-09",
          "task.optim.warmup_steps=123", "task.optim.betas=[0.9123456789,0.9987654321]", "task.batching_pool=51",
          "model.dropout=0.123456789", "model.attention_dropout=0.0123456789", "model.ffn_dim=130", "model.depth=3",
          "model.embed_init_std=0.0212345678", "task.optim.schedule=cosine"]


def run_dir_name(*overrides: str, whole: bool = False) -> str:
    """The run folder's name (``whole``: its path) that ``run.py`` would give these overrides."""
    from hydra import compose, initialize_config_dir

    from lra.config import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True, overrides=list(overrides))
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(cfg)
        return cfg.hydra.run.dir if whole else cfg.hydra.run.dir.rsplit("/", 1)[-1]


def test_a_run_folder_name_of_twelve_overrides_is_cut_to_a_prefix_and_a_digest():
    name = run_dir_name(*SHORT, *TWELVE)
    assert len(name.encode()) <= 255 and name.startswith("quick,model.attention_dropout=0.0123456789,")
    assert name[-13] == "~" and all(c in "0123456789abcdef" for c in name[-12:])
    assert run_dir_name(*SHORT, *TWELVE[:-1], "task.optim.schedule=rsqrt") != name  # the digest tells them apart
    assert run_dir_name("experiment=quick", "task.optim.lr=0.05") == "quick,task.optim.lr=0.05"  # as they were


def test_a_value_with_a_slash_stays_one_folder():
    path = run_dir_name(*SHORT, "+attention.kernel=a/../../b", whole=True)
    assert path.startswith("outputs/listops/linear/seed0/quick,+attention.kernel=a_.._.._b,") and path.count("/") == 4


def test_every_committed_run_folder_keeps_its_name():
    from lra.run.run_files import COMMITTED_RUNS, bounded_name

    names = {p.parent.name for p in COMMITTED_RUNS.rglob("result.json")}
    assert len(names) > 5 and all(bounded_name(name) == name for name in names)


def test_run_py_with_twelve_overrides_runs_in_the_bounded_folder(tmp_path):
    result = run_torchless(*SHORT, *TWELVE, cwd=tmp_path)
    assert "File name too long" not in result.stderr and "torch was imported" in result.stderr, result.stderr[-2000:]
    (config,) = (tmp_path / "outputs").rglob(".hydra/config.yaml")  # the job got as far as loading torch
    assert len(config.parent.parent.name.encode()) <= 255
