"""Which runs follow their tag's protocol: the config a tag's runs should share, and how a run differs from it.

The protocol of a run is the repo's Hydra config composed for its task and its experiment: the `experiment` its
record names (null = none, the repo defaults), or for records older than that field the experiment named like
their tag (`default` = none; `conf/experiment/<tag>.yaml`). Only the settings that change what is measured
count: the run's identity (`lra.identity`) in the `task`, `model` and `trainer` sections; attention options
and the seed vary within a table, and where or how a run ran (data locations, loader workers, devices,
progress and logging) never counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from lra.config import CONF_DIR, compose
from lra.identity import identity
from lra.record_compat import IMPLICIT, experiment_for
from results.markdown_text import md_code, md_text

SECTIONS = ("task", "model", "trainer")
ABSENT = "<absent>"
SHOWN_DIFFERENCES = 6
# a section of runs apart from their tag's: "<tag> · <settings that differ from its protocol>" and/or "· yours"
SECTION_SEP, YOURS = " · ", "yours"
FROM_CONF, MOST_COMMON, UNCHECKED = "conf", "most common", "unchecked"


def base_tag(tag: str) -> str:
    """The tag a section's runs were made under (`"quick · task.max_steps=200"` -> `"quick"`)."""
    return str(tag).split(SECTION_SEP)[0]


def only_yours(tag: str) -> bool:
    """Whether a section differs from its tag's only by holding your runs (same protocol)."""
    return all(part == YOURS for part in str(tag).split(SECTION_SEP)[1:])


def compose_protocol(tag: str, task: str, conf_dir: Path = CONF_DIR, experiment: str | None = None) -> dict | None:
    """The resolved config `run.py task=<task> [experiment=...]` would use, or None when there is none.

    `experiment` is what the runs' records name ("" = none); without it, it is found from the tag
    (`experiment_for`) and the composed config must carry that tag.
    """
    recorded = experiment is not None
    if not recorded:
        experiment = experiment_for(tag, conf_dir)
        if experiment is None:
            return None
    if not (Path(conf_dir) / "config.yaml").is_file():
        return None
    overrides = [f"task={task}"] + ([f"experiment={experiment}"] if experiment else [])
    try:
        config = compose(overrides, conf_dir)
    except (HydraException, OmegaConfBaseException):
        return None
    return config if recorded or config.get("tag") == tag else None


def has_protocol(config: object) -> bool:
    """Whether a record's config holds any protocol section to check."""
    return isinstance(config, dict) and any(isinstance(config.get(section), dict) for section in SECTIONS)


def protocol_view(config: dict) -> dict[str, object]:
    """The protocol-relevant settings as {"task.optim.lr": 0.0001, ...}: the run's identity (``lra.identity``) in
    the protocol's sections; null settings count as absent."""
    view = {key: value for key, value in identity(config).items() if key.split(".", 1)[0] in SECTIONS}
    if view:  # a record with protocol settings
        view = {**IMPLICIT, **view}
    return view


def drift_pairs(config: dict, protocol: dict) -> list[tuple[str, object, object]]:
    """(key, ours, the protocol's) for every protocol setting where `config` differs from `protocol`, by key."""
    ours, theirs = protocol_view(config), protocol_view(protocol)
    pairs = [(key, ours.get(key, ABSENT), theirs.get(key, ABSENT)) for key in sorted(ours.keys() | theirs.keys())]
    return [(key, mine, reference) for key, mine, reference in pairs if mine != reference]


def config_drift(config: dict, protocol: dict) -> list[str]:
    """How `config` differs from `protocol`, one "key=ours (protocol theirs)" per setting, sorted by key."""
    return [f"{key}={mine} (protocol {reference})" for key, mine, reference in drift_pairs(config, protocol)]


def drift_message(differences: list[str]) -> str:
    """The first few differences joined; the rest counted."""
    shown = "; ".join(differences[:SHOWN_DIFFERENCES])
    hidden = len(differences) - SHOWN_DIFFERENCES
    return shown + (f"; and {hidden} more" if hidden > 0 else "")


def most_common_config(configs: list[dict]) -> dict:
    """The config whose protocol settings most runs share (ties: the first in sorted JSON order)."""
    views = pd.Series([json.dumps(protocol_view(config), sort_keys=True, default=str) for config in configs])
    return configs[int(views[views == views.mode().iloc[0]].index[0])]


def reference_config(tag: str, task: str, configs: list[dict], conf_dir: Path = CONF_DIR,
                     experiment: str | None = None) -> tuple[dict, str]:
    """The config runs of (tag, task) that name `experiment` (None: records without the field) are checked
    against, and where it came from (`FROM_CONF` or `MOST_COMMON`)."""
    composed = compose_protocol(tag, task, conf_dir, experiment)
    if composed is not None:
        return composed, FROM_CONF
    return most_common_config(configs), MOST_COMMON


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
        notes.setdefault(tag, []).append(f"{len(part)} completed run(s) record no config: not checked for drift.")
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
