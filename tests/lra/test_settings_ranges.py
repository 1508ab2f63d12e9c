"""Settings outside their range (optimizer, seed, data limits, attention options) and keys the config lacks are
refused by name before torch loads, with the valid range or the closest keys."""

from __future__ import annotations

import subprocess
import sys

import pytest

import attention_zoo
from attention_zoo.registry import declared, option_problem
from lra.config import CONF_DIR
from lra.run.overrides import unknown_override
from lra.settings import Run
from lra_base.errors import UserError
from tests.lra.conftest import CONF, ROOT, compose_config, compose_run, torchless_env


@pytest.mark.parametrize("overrides, message", [
    (["task.optim.lr=nan"], "task.optim.lr=nan: must be a finite number > 0"),
    (["task.optim.lr=-1"], "task.optim.lr=-1: must be a finite number > 0"),
    (["task.optim.betas=[2,2]"], "task.optim.betas=[2, 2]: must be two numbers in [0, 1)"),
    (["task.optim.warmup_steps=-5"], "task.optim.warmup_steps=-5: must be an integer >= 0"),
    (["task.optim.eps=0"], "task.optim.eps=0: must be a finite number > 0"),
    (["seed=-1"], "seed=-1: must be an integer in [0, 4294967295]"),
    (["seed=4294967296"], "seed=4294967296: must be an integer in [0, 4294967295]"),
    (["task.data.limit={val:-3}"], "task.data.limit.val=-3: must be null (the whole split) or an integer >= 1"),
    (["task.data.limit={train:0}"], "task.data.limit.train=0: must be null"),
    (["task.data.limit={test:abc}"], "task.data.limit.test='abc': must be null"),
    (["task.data.limit={tset:5}"], "task.data.limit.tset: not a split; splits are train, val, test"),
    (["attention=llops", "attention.eps=-1.0"], "attention.eps=-1.0: must be > 0 for attention=llops"),
    (["attention=llops", "attention.degree=0"], "attention.degree=0: must be >= 1 for attention=llops"),
    (["attention=llops", "attention.degree=abc"],
     "attention.degree='abc': must be an integer like its default (degree=4) for attention=llops"),
    (["attention=llops", "attention.square=3"], "attention.square=3: must be true or false"),
    (["attention=llops", "+attention.degre=3"], "attention=llops has no option 'degre'; valid options: degree=4"),
])
def test_settings_out_of_range_are_refused_by_name(overrides, message):
    with pytest.raises(UserError) as error:
        Run.parse(compose_config(overrides))
    assert message in str(error.value)


def test_valid_settings_pass():
    Run.parse(compose_config(["task.optim.warmup_steps=0", "task.data.limit={val:5,test:null}", "seed=4294967295",
                                 "attention=llops", "attention.eps=1"]))


def test_options_read_from_source_are_the_registry_options_and_every_attention_config_passes():
    mechanisms = declared()
    assert sorted(mechanisms) == attention_zoo.available()
    for name in attention_zoo.available():
        assert mechanisms[name][0] == attention_zoo.options(name), name
    for path in sorted((CONF_DIR / "attention").glob("*.yaml")):
        attention = compose_config([f"attention={path.stem}"])["attention"]
        assert option_problem(attention.pop("name"), attention) is None, path.name


def test_a_declared_range_is_what_the_constructor_refuses():
    for name, (defaults, ranges) in declared().items():
        for key, spec in ranges.items():
            bound = float(spec.split()[1])
            outside = bound - 1 if ">=" in spec else bound if ">" in spec else bound + 1
            value = int(outside) if isinstance(defaults[key], int) else float(outside)
            with pytest.raises(ValueError):
                attention_zoo.build(name, head_dim=8, num_heads=2, max_len=16, **{key: value})


@pytest.mark.parametrize("argv, message", [
    (["task.max_step=100"], "task.max_step=100: task has no key 'max_step'; did you mean task.max_steps"),
    (["task=text", "task.optim.lrr=1"], "task.optim has no key 'lrr'; did you mean task.optim.lr?"),
    (["model.dimm=3"], "did you mean model.dim?"),
])
def test_a_key_the_config_lacks_names_the_closest_keys_not_the_plus_spelling(argv, message):
    assert message in unknown_override(argv)


def test_an_option_the_mechanism_takes_but_its_yaml_omits_is_named_with_the_plus_spelling():
    """llops takes chunk_size (its causal prefix-sum chunk) though conf/attention/llops.yaml does not list it: the
    refusal says so and how to set it, not that nothing reads it; a misspelling finds it; +attention.chunk_size runs."""
    yaml = (CONF / "attention" / "llops.yaml").read_text()
    assert "chunk_size" in declared()["llops"][0] and "chunk_size" not in yaml
    message = unknown_override(["attention=llops", "attention.chunk_size=128"])
    assert message == ("attention.chunk_size=128: attention has no key 'chunk_size': llops's yaml does not list it, "
                       "though llops takes it (default 256); set it with +attention.chunk_size=...")
    assert "did you mean attention.chunk_size?" in unknown_override(["attention=llops", "attention.chunk_sise=1"])
    assert unknown_override(["attention=llops", "+attention.chunk_size=128"]) is None
    assert compose_run(["attention=llops", "+attention.chunk_size=128"]).attention.options["chunk_size"] == 128


@pytest.mark.parametrize("argv", [["task.max_steps=10"], ["task.causal=true"], ["+task.max_step=1"],
                                  ["task=listops,text", "task.optim.lr=1e-3"], ["hydra.job.chdir=true"],
                                  ["+trainer.max_epochs=3"], ["attention=linear,softmax"], ["hydra/launcher=basic"],
                                  ["hydra.run.dir=x", "hydra.sweeper.params.x=1"], ["+hydra.job.env_set.A=1"]])
def test_valid_or_optional_keys_and_additions_are_left_to_the_other_checks(argv):
    assert unknown_override(argv) is None


@pytest.mark.parametrize("argv, message", [
    (["trainer.max_step=100"], "trainer.max_step=100: trainer has no key 'max_step'; did you mean trainer.max_steps"),
    (["trainer.max_epochs=3"], "trainer.max_epochs=3: trainer has no key 'max_epochs' (conf/trainer does not set "
                               "this Lightning Trainer argument); add it with +trainer.max_epochs=..."),
    (["foo=3"], "foo=3: the config has no key 'foo'; Valid keys under the config: attention,"),
    (["attention=lineer"], "attention=lineer: attention has no option 'lineer'; did you mean attention=linear or "
                           "attention=linformer? Valid options for attention: based, bigbird,"),
    (["task=listop"], "did you mean task=listops? Valid options for task: ar, image, listops,"),
    (["experiment=quik"], "did you mean experiment=quick? Valid options for experiment: lra_original, quick,"),
    (["trainer=cpuu"], "did you mean trainer=cpu? Valid options for trainer: cpu, ddp,"),
    (["hydra/launcher=jobli"], "did you mean hydra/launcher=joblib? Valid options for hydra/launcher: basic, joblib,"),
    (["attention=linear,lineer"], "attention=lineer: attention has no option 'lineer'"),
    (["hydra.job.chdirr=true"], "hydra.job.chdirr=true: hydra.job has no key 'chdirr'; did you mean hydra.job.chdir?"),
    (["hydra/launcher=joblib", "hydra.launcher.n_job=2"], "did you mean hydra.launcher.n_jobs?"),
    (["+trainer.max_stepz=2"], "+trainer.max_stepz=2: 'max_stepz' is not an argument of Lightning's Trainer; did you "
                               "mean trainer.max_steps"),
], ids=["trainer_key", "trainer_argument", "top_key", "attention", "task", "experiment", "trainer", "launcher",
        "sweep", "hydra_key", "launcher_key", "added_trainer_key"])
def test_every_group_option_and_key_gets_the_closest_names(argv, message):
    assert message in unknown_override(argv)


def test_run_py_refuses_these_before_importing_torch(tmp_path):
    env = torchless_env(tmp_path)
    for args, message in ((["task.optim.lr=nan"], "error: task.optim.lr=nan: must be a finite number > 0"),
                          (["attention=llops", "attention.degree=abc"], "must be an integer like its default"),
                          (["attention=llops", "attention.eps=-1.0"], "attention.eps=-1.0: must be > 0"),
                          (["task.max_step=100"], "did you mean task.max_steps"),
                          (["trainer.max_step=100"], "did you mean trainer.max_steps"),
                          (["attention=lineer"], "did you mean attention=linear"),
                          (["-m", "hydra/launcher=jobli"], "did you mean hydra/launcher=joblib")):
        result = subprocess.run([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path / 'run'}"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
        assert not any(hydra_words in result.stderr for hydra_words in ("Traceback", "use +", "Available options"))


def test_the_registry_answers_options_without_torch_and_loads_the_mechanisms_when_asked_what_is_registered(tmp_path):
    """``attention_zoo.registry`` checks options from the source with no torch; ``available()`` then imports every
    mechanism (torch with them), so a ``@register`` in a new file is all it takes to be listed."""
    code = ("import sys, attention_zoo\n"
            "print(attention_zoo.option_problem('llops', {'degree': 0}))\n"
            "print('torch' in sys.modules)\n"
            "print('llops' in attention_zoo.available(), 'torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == ["attention.degree=0: must be >= 1 for attention=llops (default degree=4)",
                                          "False", "True True"], result.stderr[-2000:]
