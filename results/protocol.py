"""Which runs follow their tag's protocol: the config a tag's runs should share, and how a run differs from it.

The protocol of a run is the repo's Hydra config composed for its task and its experiment: the `experiment` its
record names (null = none, the repo defaults), or for records older than that field the experiment named like
their tag (`default` = none; `conf/experiment/<tag>.yaml`). Only the settings that change what is measured
count: the run's identity (`lra.settings.Run.identity`, of the record's config made today's `Run` by
`lra.run.record_compat.upgrade`) in the `task`, `model` and `trainer` sections; attention options
and the seed vary within a table, and where or how a run ran (data locations, loader workers, devices,
progress and logging) never counts.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from lra.config import CONF_DIR, compose, copied_settings
from lra.identity import joined
from lra.run.record_compat import experiment_for, upgrade
from results.markdown_text import md_code, md_text

SECTIONS = ("task", "model", "trainer")
SHOWN_DIFFERENCES = 6
# a section of runs apart from their tag's: "<tag> · <settings that differ from its protocol>" and/or "· yours"
SECTION_SEP, YOURS = " · ", "yours"
QUICK = "quick"  # the pipeline check's experiment: its sections say so and get no runs table
FROM_CONF, MOST_COMMON, UNCHECKED = "conf", "most common", "unchecked"


def base_tag(tag: str) -> str:
    """The tag a section's runs were made under (`"quick · task.max_steps=200"` -> `"quick"`)."""
    return str(tag).split(SECTION_SEP)[0]


def run_experiment(recorded: object, tag: str) -> str | None:
    """The experiment a run was composed with ("" for none): its record's field, else (a record older than it) its
    tag's (``experiment_for``); None when unknown."""
    return recorded if isinstance(recorded, str) else experiment_for(base_tag(tag))


def section_experiments(long: pd.DataFrame, tag: str) -> set[str]:
    """The known experiments the completed runs of section ``tag`` were composed with ("" for none)."""
    done = long[(long["tag"] == tag) & (long["status"] == "completed")]
    return {found for value in done["experiment"] if (found := run_experiment(value, tag)) is not None}


def quick_scale(tag: str, experiments: set[str] | None = None) -> bool:
    """Whether a section's runs are ``experiment=quick``'s pipeline check: ``experiments`` its completed runs were
    composed with (``section_experiments``), else (none given, or none completed) its tag says so."""
    return QUICK in experiments if experiments else base_tag(tag) == QUICK


def only_yours(tag: str) -> bool:
    """Whether a section differs from its tag's only by holding your runs (same protocol)."""
    return all(part == YOURS for part in str(tag).split(SECTION_SEP)[1:])


def compose_protocol(tag: str, task: str, conf_dir: Path = CONF_DIR, experiment: str | None = None) -> dict | None:
    """The resolved config `run.py task=<task> [experiment=...]` would use, or None when there is none.

    `experiment` is what the runs' records name ("" = none); without it, it is found from the tag
    (`experiment_for`) and the composed config must carry that tag.
    """
    overrides = protocol_overrides(tag, task, conf_dir, experiment)
    if overrides is None:
        return None
    try:
        config = compose(overrides, conf_dir)
    except (HydraException, OmegaConfBaseException):
        return None
    return config if experiment is not None or config.get("tag") == tag else None


def protocol_overrides(tag: str, task: str, conf_dir: Path = CONF_DIR,
                       experiment: str | None = None) -> list[str] | None:
    """The command line of `compose_protocol`'s config (`task=<task> [experiment=...]`), or None when there is none."""
    if experiment is None:
        experiment = experiment_for(tag, conf_dir)
        if experiment is None:
            return None
    if not (Path(conf_dir) / "config.yaml").is_file():
        return None
    return [f"task={task}"] + ([f"experiment={experiment}"] if experiment else [])


@functools.cache
def _copied(overrides: tuple[str, ...], conf_dir: Path) -> dict[str, str]:
    try:
        return copied_settings(overrides, conf_dir)
    except (HydraException, OmegaConfBaseException):
        return {}


def as_typed(pairs: list[tuple[str, object, object]], tag: str, task: str, conf_dir: Path = CONF_DIR,
             experiment: str | None = None) -> list[tuple[str, object, object]]:
    """`drift_pairs` as a user typed them: a setting the config copies from another listed one with the same value
    (`trainer.val_check_interval` follows `task.eval_every`) is left out, so a heading names what was typed."""
    overrides = protocol_overrides(tag, task, conf_dir, experiment)
    copies = {} if overrides is None else _copied(tuple(overrides), Path(conf_dir))
    listed = {key: mine for key, mine, _ in pairs}
    return [(key, mine, reference) for key, mine, reference in pairs
            if not (copies.get(key) in listed and listed[copies[key]] == mine)]


def has_protocol(config: object) -> bool:
    """Whether a record's config holds any protocol section to check."""
    return isinstance(config, dict) and any(isinstance(config.get(section), dict) for section in SECTIONS)


def in_sections(key: str) -> bool:
    return key.split(".", 1)[0] in SECTIONS


def protocol_view(config: dict) -> dict[str, object]:
    """The protocol-relevant settings as {"task.optim.lr": 0.0001, ...}: the run's identity in the protocol's
    sections, a setting added later at the value the run used (``upgrade``); null settings count as absent."""
    return {key: value for key, value in upgrade(config).identity().items() if in_sections(key)}


def drift_pairs(config: dict, protocol: dict) -> list[tuple[str, object, object]]:
    """(key, ours, the protocol's) for every protocol setting where `config` differs from `protocol`, by key
    (``Run.differences``; ``lra.identity.ABSENT`` for a setting one of them lacks)."""
    return [change for change in upgrade(config).differences(upgrade(protocol)) if in_sections(change[0])]


def config_drift(config: dict, protocol: dict) -> list[str]:
    """How `config` differs from `protocol`, one "key=ours (protocol theirs)" per setting, sorted by key."""
    return [f"{key}={mine} (protocol {reference})" for key, mine, reference in drift_pairs(config, protocol)]


def drift_message(differences: list[str]) -> str:
    """The first few differences joined; the rest counted."""
    return joined(differences, SHOWN_DIFFERENCES)


def most_common_config(configs: list[dict]) -> dict:
    """The config whose protocol settings most runs share (ties: the first in sorted JSON order)."""
    views = pd.Series([json.dumps(protocol_view(config), sort_keys=True, default=str) for config in configs])
    return configs[int(views[views == views.mode().iloc[0]].index[0])]


def tag_protocol(tag: str, task: str, named: dict[str | None, dict], conf_dir: Path = CONF_DIR) -> dict | None:
    """The protocol of the tag itself, which runs of another experiment filed under it (`run.py experiment=X tag=Y`)
    are compared with: the repo's config for the experiment named like the tag (none for `default`), whether or not
    any run names it; for a tag of no experiment, the reference of the experiment most of its runs name (`named`:
    experiment -> (reference, how many runs), committed runs' when there are any; None: records older than the
    field; a tie: the first in sorted order)."""
    own = experiment_for(tag, conf_dir)
    if own is not None:
        return compose_protocol(tag, task, conf_dir, own)
    if not named:
        return None
    return named[min(named, key=lambda e: (-named[e][1], str(e)))][0]


def reference_config(tag: str, task: str, configs: list[dict], conf_dir: Path = CONF_DIR,
                     experiment: str | None = None) -> tuple[dict, str]:
    """The config runs of (tag, task) that name `experiment` (None: records without the field) are checked
    against, and where it came from (`FROM_CONF` or `MOST_COMMON`)."""
    composed = compose_protocol(tag, task, conf_dir, experiment)
    if composed is not None:
        return composed, FROM_CONF
    return most_common_config(configs), MOST_COMMON


# what a peer's-code section says of its runs, in place of the drift check (they record the port's settings, not ours)
PEER_CODE_NOTES = {
    "nystromformer_code": "These runs are the Nystromformer port's own code (`python -m analyses.nystromformer_code`) "
    "with only the edits a CPU needs (each run's `port.json` lists them as a patch): their settings are the port's, so "
    "no config of ours is checked for drift. Of the differences the `(Nystromformer port)` note lists, two remain: "
    "fp32 here against its fp16 autocast, and our test split against the official one; the padding to 2,048 is the "
    "port's own here.",
}


def protocol_notes(long: pd.DataFrame) -> dict[str, list[str]]:
    """Per tag, a note for each task checked against its runs' most common config and for unchecked runs."""
    runs = long.drop_duplicates("path")
    runs = runs.assign(tag=runs["tag"].map(base_tag))
    notes: dict[str, list[str]] = {}
    for (tag, task), part in runs[runs["protocol"] == MOST_COMMON].groupby(["tag", "task"], sort=True):
        notes.setdefault(tag, []).append(
            f"{md_text(task)}: no experiment config for tag `{md_code(tag)}` in `conf/`, so config drift is judged "
            f"against the most common config among its {len(part)} checked run(s).")
    for tag, part in runs[runs["protocol"] == UNCHECKED].groupby("tag", sort=True):
        notes.setdefault(tag, []).append(PEER_CODE_NOTES.get(tag) or
                                         f"{len(part)} completed run(s) record no config: not checked for drift.")
    return notes


def shared_protocols(long: pd.DataFrame, conf_dir: Path = CONF_DIR) -> dict[tuple[str, str], list[str]]:
    """{(tag, task): the other tags whose config composes the same protocol for `task`}, among the tags whose
    completed runs were checked against `conf/` and kept their tag's section.

    Two experiments that set nothing different for a task are one protocol under two names (`study_lr` sets
    ListOps' peak lr to 1e-3, which `default` has too). Their runs stay in their own sections; this only finds them.
    Tags without an experiment config of their own name (`conf/experiment/<tag>.yaml`, or `default`) are left out.
    """
    done = long[(long["status"] == "completed") & (long["protocol"] == FROM_CONF)]
    views: dict[tuple[str, str], str] = {}
    for tag, task in sorted(set(zip(done["tag"], done["task"]))):
        protocol = None if SECTION_SEP in tag else compose_protocol(tag, task, conf_dir)
        if protocol is not None:
            views[(tag, task)] = json.dumps(protocol_view(protocol), sort_keys=True, default=str)
    shared = {}
    for (tag, task), view in views.items():
        others = [other for (other, its_task), its_view in views.items()
                  if its_task == task and other != tag and its_view == view]
        if others:
            shared[(tag, task)] = others
    return shared
