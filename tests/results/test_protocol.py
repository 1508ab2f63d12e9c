"""Config drift: the protocol a tag's runs are checked against, and runs off it kept out of the averages."""

import copy
import shutil

import pytest

from lra.config import CONF_DIR, compose
from results.__main__ import runs_table
from results.collect import collect
from results.html import protocol_line
from results.markdown import shared_protocol_notes, to_markdown
from results.protocol import (
    FROM_CONF,
    MOST_COMMON,
    UNCHECKED,
    compose_protocol,
    config_drift,
    drift_message,
    most_common_config,
    protocol_notes,
    protocol_view,
    shared_protocols,
)
from results.summary import summarize
from tests.results.records import write_record
from tests.results.test_collect import section

BASE = {
    "seed": 0, "tag": "quick", "data_dir": "data",
    "attention": {"name": "softmax", "dropout": 0.0},
    "model": {"dim": 64, "depth": 2, "heads": 2},
    "task": {"name": "listops", "max_steps": 1500, "optim": {"lr": 1e-3, "betas": [0.9, 0.999]},
             "data": {"root": "data/quick", "num_workers": 0, "limit": None,
                      "generate": {"train": 20000, "workers": 2}}},
    "trainer": {"accelerator": "auto", "devices": 1, "max_steps": 1500, "precision": "32-true",
                "enable_progress_bar": True, "log_every_n_steps": 20},
}


def changed(config, **settings):
    """A deep copy of `config` with dotted keys set, e.g. changed(BASE, **{"task.optim.lr": 0.01})."""
    config = copy.deepcopy(config)
    for dotted, value in settings.items():
        *parents, leaf = dotted.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return config


def test_same_config_has_no_drift():
    assert config_drift(BASE, copy.deepcopy(BASE)) == []


def test_protocol_settings_differences_are_listed_sorted():
    config = changed(BASE, **{"task.optim.lr": 1e-4, "model.dim": 128, "trainer.precision": "bf16-mixed"})
    assert config_drift(config, BASE) == [
        "model.dim=128 (protocol 64)",
        "task.optim.lr=0.0001 (protocol 0.001)",
        "trainer.precision=bf16-mixed (protocol 32-true)",
    ]


def test_attention_seed_paths_workers_and_hardware_are_not_protocol():
    config = changed(BASE, **{
        "seed": 3, "tag": "other", "data_dir": "/scratch", "attention.name": "llops", "attention.degree": 4,
        "task.data.root": "/scratch/quick", "task.data.num_workers": 8, "task.data.generate.workers": 16,
        "trainer.accelerator": "gpu", "trainer.devices": 4, "trainer.enable_progress_bar": False,
    })
    assert config_drift(config, BASE) == []


def test_null_equals_absent_but_a_value_does_not():
    assert config_drift(changed(BASE, **{"task.extra": None}), BASE) == []
    assert config_drift(changed(BASE, **{"task.data.limit": {"test": 500}}), BASE) == [
        "task.data.limit.test=500 (protocol <absent>)"]
    without_steps = changed(BASE)
    del without_steps["trainer"]["max_steps"]
    assert config_drift(without_steps, BASE) == ["trainer.max_steps=<absent> (protocol 1500)"]


def test_view_keeps_lists_and_only_protocol_trainer_keys():
    view = protocol_view(BASE)
    assert view["task.optim.betas"] == [0.9, 0.999]
    assert {key for key in view if key.startswith("trainer.")} == {"trainer.max_steps", "trainer.precision"}
    assert not any(key.startswith(("attention.", "seed", "tag")) for key in view)


def test_drift_message_caps_the_list():
    differences = [f"task.k{i}=1 (protocol 0)" for i in range(9)]
    assert drift_message(differences[:2]) == "task.k0=1 (protocol 0); task.k1=1 (protocol 0)"
    assert drift_message(differences).endswith("task.k5=1 (protocol 0); and 3 more")


def test_most_common_config_ignores_non_protocol_settings():
    configs = [changed(BASE, seed=1), changed(BASE, **{"task.optim.lr": 0.5}), changed(BASE, seed=2)]
    assert most_common_config(configs) is configs[0]


def test_compose_protocol_from_the_repo_conf():
    quick, default = compose_protocol("quick", "listops"), compose_protocol("default", "listops")
    assert quick["tag"] == "quick" and default["tag"] == "default"
    assert quick["task"]["name"] == default["task"]["name"] == "listops"
    assert quick["task"]["max_steps"] < default["task"]["max_steps"]
    assert config_drift(quick, default)  # the quick preset is not the full protocol
    assert compose_protocol("no_such_tag", "listops") is None
    assert compose_protocol("quick", "no_such_task") is None


def protocol_record(root, config, attention, seed, acc, **extra):
    """A quick ListOps record whose config is `config` with this run's attention and seed."""
    config = changed(config, seed=seed, **{"attention.name": attention})
    return write_record(root, "listops", attention, seed, acc, tag=config["tag"], config=config, **extra)


@pytest.fixture
def quick():
    return compose_protocol("quick", "listops")


def test_drifted_runs_form_a_section_named_by_their_settings(tmp_path, quick):
    lr = quick["task"]["optim"]["lr"]
    protocol_record(tmp_path / "a", quick, "softmax", 0, 0.40, finished_at="2026-01-01T00:00:00")
    protocol_record(tmp_path / "a", quick, "softmax", 1, 0.44)
    faster = changed(quick, **{"task.optim.lr": lr * 10})
    protocol_record(tmp_path / "b", faster, "softmax", 0, 0.90, finished_at="2026-02-01T00:00:00")
    protocol_record(tmp_path / "b", faster, "softmax", 1, 0.80)
    protocol_record(tmp_path / "c", changed(quick, **{"task.max_steps": 100}), "softmax", 0, 0.30)
    long, problems = collect([tmp_path])
    assert problems == []
    runs = long.drop_duplicates("path").set_index("path")
    assert set(runs["status"]) == {"completed"} and set(runs["protocol"]) == {FROM_CONF}
    section_lr, section_steps = f"quick · task.optim.lr={lr * 10}", "quick · task.max_steps=100"
    assert sorted(set(runs["tag"])) == ["quick", section_steps, section_lr]
    summary = summarize(long).set_index(["tag", "attention"])
    assert summary.loc[("quick", "softmax"), "listops_mean"] == pytest.approx(42.0)  # the protocol's seeds only
    assert summary.loc[(section_lr, "softmax"), "listops_mean"] == pytest.approx(85.0)
    assert summary.loc[(section_lr, "softmax"), "listops_n"] == 2
    markdown = to_markdown(summarize(long), problems, {}, long=long)
    assert f"## tag `{section_lr}`" in markdown and "differ from tag `quick`'s protocol" in markdown
    assert "Not averaged" not in markdown


def test_unknown_tag_falls_back_to_most_common_config(tmp_path, quick):
    ablation = changed(quick, tag="ablation")
    protocol_record(tmp_path, ablation, "softmax", 0, 0.40)
    protocol_record(tmp_path, ablation, "llops", 0, 0.50)
    protocol_record(tmp_path, changed(ablation, **{"model.depth": 6}), "based", 0, 0.60)
    write_record(tmp_path, "listops", "linear", 0, 0.30, tag="ablation")  # no recorded config: unchecked
    long, problems = collect([tmp_path])
    assert problems == []
    assert long.drop_duplicates("path").set_index("attention")["tag"]["based"] == "ablation · model.depth=6"
    protocols = long.drop_duplicates("path").set_index("attention")["protocol"]
    assert protocols.to_dict() == {"based": MOST_COMMON, "linear": UNCHECKED, "llops": MOST_COMMON,
                                   "softmax": MOST_COMMON}
    notes = protocol_notes(long)
    assert list(notes) == ["ablation"] and len(notes["ablation"]) == 2
    assert "most common config among its 3 checked run(s)" in notes["ablation"][0]
    assert "1 completed run(s) record no config" in notes["ablation"][1]
    markdown = to_markdown(summarize(long), problems, {}, notes=notes)
    assert "no experiment config for tag `ablation`" in markdown
    ablation_rows = summarize(long).query("tag == 'ablation'")["attention"]
    assert set(ablation_rows) == {"softmax", "llops", "linear", "(majority class)"}  # based: its own section


def test_failed_runs_are_not_checked(tmp_path, quick):
    protocol_record(tmp_path, changed(quick, **{"model.dim": 7}), "softmax", 0, None, status="failed")
    long, problems = collect([tmp_path])
    assert [p.kind for p in problems] == ["failed"]
    assert long["protocol"].eq("").all()


def test_a_setting_added_later_counts_as_its_implicit_value_in_older_runs():
    older = BASE  # recorded before task.optim.schedule existed: it trained with the linear schedule
    assert config_drift(older, changed(BASE, **{"task.optim.schedule": "linear"})) == []
    assert config_drift(older, changed(BASE, **{"task.optim.schedule": "cosine"})) == [
        "task.optim.schedule=linear (protocol cosine)"]
    assert protocol_view(changed(BASE, **{"task.optim.schedule": "rsqrt"}))["task.optim.schedule"] == "rsqrt"


def test_a_recorded_experiment_is_the_protocol_whatever_the_tag(tmp_path, quick):
    mine = changed(quick, tag="mine")  # experiment=quick tag=mine: no conf/experiment/mine.yaml to guess from
    protocol_record(tmp_path, mine, "softmax", 0, 0.40, experiment="quick")
    protocol_record(tmp_path, changed(mine, **{"task.max_steps": 7}), "softmax", 1, 0.41, experiment="quick")
    long, problems = collect([tmp_path])
    assert problems == [] and set(long["tag"]) == {"mine", "mine · task.max_steps=7"}
    assert set(long.drop_duplicates("path")["protocol"]) == {FROM_CONF}


def test_another_experiment_under_a_tag_is_never_averaged_with_the_tags_own(tmp_path, quick):
    """`run.py experiment=quick tag=default`: checked against quick's protocol (no drift), yet not default's runs."""
    default = compose_protocol("default", "listops")
    protocol_record(tmp_path, default, "softmax", 0, 0.40, experiment="")
    protocol_record(tmp_path, changed(quick, tag="default"), "softmax", 1, 0.30, experiment="quick")
    protocol_record(tmp_path, changed(quick, tag="default", **{"task.max_steps": 7}), "softmax", 2, 0.20,
                    experiment="quick")
    long, problems = collect([tmp_path])
    summary = summarize(long).set_index(["tag", "attention"])
    assert problems == [] and summary.loc[("default", "softmax"), "listops_mean"] == pytest.approx(40.0)
    assert summary.loc[("default · experiment=quick", "softmax"), "listops_mean"] == pytest.approx(30.0)
    assert summary.loc[("default · experiment=quick, task.max_steps=7", "softmax"), "listops_n"] == 1
    assert set(long.drop_duplicates("path")["protocol"]) == {FROM_CONF}
    markdown = to_markdown(summarize(long), problems, {}, long=long)
    assert "Pipeline check at reduced scale" in section(markdown, "default · experiment=quick")
    assert "Pipeline check" not in section(markdown, "default")
    line = protocol_line("default · experiment=quick", "listops", long)  # the HTML page's, once "no config for tag"
    assert line == "Protocol: `python run.py task=listops experiment=quick`."
    assert protocol_line("default · experiment=quick, task.max_steps=7", "listops", long) == \
        "Protocol: `python run.py task=listops experiment=quick`, with the settings the heading names."
    assert "the repo's defaults" in protocol_line("default", "listops", long)


def test_another_experiment_of_the_same_protocol_joins_the_tags_runs(tmp_path):
    """ListOps' `study_lr` is `default`'s protocol (its yaml says so): its runs filed under `default` are averaged."""
    default = compose_protocol("default", "listops")
    protocol_record(tmp_path, default, "softmax", 0, 0.40, experiment="")
    study = changed(compose_protocol("study_lr", "listops"), tag="default")
    protocol_record(tmp_path, study, "softmax", 1, 0.30, experiment="study_lr")
    long, problems = collect([tmp_path])
    assert problems == [] and set(long["tag"]) == {"default"}


def test_records_older_than_the_experiment_field_keep_their_tag_beside_a_run_of_another_experiment(tmp_path, quick):
    """Old `quick` records (no `experiment` field) are quick's protocol; a full-scale run filed as tag `quick`
    (`experiment=""`) is the one apart."""
    for seed in (0, 1):
        protocol_record(tmp_path, quick, "softmax", seed, 0.30)
    protocol_record(tmp_path, changed(compose_protocol("default", "listops"), tag="quick"), "softmax", 2, 0.40,
                    experiment="")
    long, _ = collect([tmp_path])
    runs = long.drop_duplicates("path").set_index("seed")["tag"]
    assert list(runs) == ["quick", "quick", "quick · experiment=none"]
    markdown = to_markdown(summarize(long), [], {}, long=long)  # the old records: quick by their tag
    assert "Pipeline check at reduced scale" in section(markdown, "quick")
    assert "Pipeline check" not in section(markdown, "quick · experiment=none")  # a full-scale run
    assert list(runs_table(long).drop_duplicates("path")["experiment"]) == ["quick", "quick", "none"]


def test_a_quick_section_of_failed_runs_only_is_still_a_pipeline_check(tmp_path, quick):
    protocol_record(tmp_path, quick, "softmax", 0, None, status="failed", experiment="quick")
    long, problems = collect([tmp_path])
    markdown = to_markdown(summarize(long), problems, {}, long=long)
    quick_section = section(markdown, "quick")
    assert "Pipeline check at reduced scale" in quick_section and "Runs (" not in quick_section


def test_the_tags_own_experiment_is_its_protocol_even_when_no_run_names_it(tmp_path, quick):
    """Only `run.py experiment=quick tag=study_port` runs: not study_port's protocol, so not its section (which is
    shown beside the Nystromformer port, with a delta)."""
    protocol_record(tmp_path, changed(quick, tag="study_port"), "softmax", 0, 0.30, experiment="quick")
    long, _ = collect([tmp_path])
    assert set(long["tag"]) == {"study_port · experiment=quick"}


def test_a_record_naming_no_experiment_is_checked_against_the_defaults(tmp_path, quick):
    default = compose_protocol("default", "listops")
    protocol_record(tmp_path, changed(default, tag="mine"), "softmax", 0, 0.40, experiment=None)
    long, problems = collect([tmp_path])
    assert problems == [] and set(long["protocol"]) == {FROM_CONF}


def test_old_records_without_the_field_are_still_judged_by_their_tag(tmp_path, quick):
    protocol_record(tmp_path, changed(quick, tag="mine"), "softmax", 0, 0.40)
    long, _ = collect([tmp_path])
    assert set(long["protocol"]) == {MOST_COMMON}  # no experiment named like the tag: as before the field


def test_your_runs_beside_committed_ones_get_a_section_of_their_own(tmp_path, quick):
    committed, yours = tmp_path / "results/runs", tmp_path / "outputs"
    protocol_record(committed, quick, "softmax", 0, 0.40, git_sha="a" * 40)
    protocol_record(committed, quick, "softmax", 1, 0.44, git_sha="b" * 40)
    protocol_record(yours, quick, "softmax", 0, 0.90, finished_at="2027-01-01T00:00:00")  # newer, same seed
    long, problems = collect([committed, yours], committed=committed)
    summary = summarize(long).set_index(["tag", "attention"])
    assert summary.loc[("quick", "softmax"), "listops_mean"] == pytest.approx(42.0)  # not replaced by yours
    assert summary.loc[("quick · yours", "softmax"), "listops_mean"] == pytest.approx(90.0)
    assert problems == []
    markdown = to_markdown(summarize(long), problems, {}, long=long)
    assert "## tag `quick · yours`" in markdown and "Your runs (outside `results/runs/`)" in markdown
    assert "`softmax` listops averages runs of 2 code versions (aaaaaaa, bbbbbbb)." in markdown
    alone, _ = collect([yours], committed=committed)
    assert set(alone["tag"]) == {"quick"}  # only your runs: nothing to keep apart


def test_a_committed_run_with_a_copy_among_yours_stays_committed_whatever_the_order_of_the_roots(tmp_path, quick):
    """`results.archive` copies a run of `outputs/` into `results/runs/`: read together, the one run counts once, as
    committed, whichever root comes first."""
    committed, yours = tmp_path / "results/runs", tmp_path / "outputs"
    for root in (committed, yours):
        protocol_record(root, quick, "softmax", 0, 0.30, finished_at="2026-01-01T00:00:00")  # the copy and its original
    protocol_record(committed, quick, "softmax", 1, 0.40)
    protocol_record(yours, quick, "softmax", 2, 0.20)
    for roots in ([committed, yours], [yours, committed]):
        long, _ = collect(roots, committed=committed)
        summary = summarize(long).set_index(["tag", "attention"])
        assert summary.loc[("quick", "softmax"), "listops_n"] == 2, roots
        assert summary.loc[("quick", "softmax"), "listops_mean"] == pytest.approx(35.0)
        assert summary.loc[("quick · yours", "softmax"), "listops_mean"] == pytest.approx(20.0)


def test_your_runs_never_outvote_the_committed_ones_for_the_most_common_config(tmp_path, quick):
    """A tag with no experiment of its own, in records older than the `experiment` field: each side is checked
    against its own most common config, so your two runs do not make the committed one look drifted."""
    committed, yours = tmp_path / "results/runs", tmp_path / "outputs"
    foo = changed(quick, tag="foo", **{"task.optim.lr": 1e-3})
    protocol_record(committed, foo, "softmax", 0, 0.40)
    for seed in (1, 2):
        protocol_record(yours, changed(foo, **{"task.optim.lr": 1e-4}), "softmax", seed, 0.20)
    long, _ = collect([committed, yours], committed=committed)
    assert set(long["tag"]) == {"foo", "foo · task.optim.lr=0.0001 · yours"}  # checked against the committed run's
    assert set(long.loc[long["tag"] == "foo", "seed"]) == {0}


def test_tags_whose_configs_compose_one_protocol_name_each_other(tmp_path, quick):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "experiment" / "alias.yaml").write_text("# @package _global_\nexperiment: alias\ntag: alias\n")
    alias = compose_protocol("alias", "listops", conf)
    assert alias is not None and config_drift(alias, quick)  # the defaults: the full protocol, not quick's
    runs = tmp_path / "runs"
    protocol_record(runs, compose_protocol("default", "listops", conf), "softmax", 0, 0.35, experiment=None)
    protocol_record(runs, alias, "linear", 0, 0.34, experiment="alias")
    protocol_record(runs, alias, "linear", 1, 0.36, experiment="alias")
    protocol_record(runs, changed(alias, **{"task.optim.lr": 0.5}), "linear", 2, 0.20, experiment="alias")
    protocol_record(runs, quick, "softmax", 0, 0.40, experiment="quick")
    long, problems = collect([runs], conf_dir=conf)
    assert problems == []
    shared = shared_protocols(long, conf)
    assert shared == {("alias", "listops"): ["default"], ("default", "listops"): ["alias"]}  # not quick, not drift
    notes = shared_protocol_notes(shared, summarize(long))
    assert notes["default"] == ["listops: the runs of tag `alias` follow this protocol too (its config differs in no "
                                "task, model or trainer setting); they are averaged in their own section, not here: "
                                "`linear` 35.00 ± 1.41 (n=2)."]
    assert "`softmax` 35.00 (n=1)" in notes["alias"][0]
    markdown = to_markdown(summarize(long), problems, {}, notes=notes, long=long)
    assert notes["default"][0] in markdown


def test_a_heading_names_the_settings_as_typed_not_the_ones_that_follow_them(tmp_path):
    """`task.eval_every=50 task.max_steps=100` also moves `trainer.val_check_interval` and `trainer.max_steps`
    (`${task...}` in conf/trainer): the heading names the two typed; a trainer key typed apart stays named."""
    typed = compose(["task=listops", "attention=softmax", "experiment=quick", "task.eval_every=50",
                     "task.max_steps=100"])
    assert typed["trainer"]["val_check_interval"] == 50 and typed["trainer"]["max_steps"] == 100
    protocol_record(tmp_path, typed, "softmax", 0, 0.40)
    own = compose(["task=listops", "attention=softmax", "experiment=quick", "trainer.val_check_interval=25"])
    protocol_record(tmp_path, own, "softmax", 1, 0.40)
    long, _ = collect([tmp_path])
    assert sorted(set(long["tag"])) == ["quick · task.eval_every=50, task.max_steps=100",
                                        "quick · trainer.val_check_interval=25"]
