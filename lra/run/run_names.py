"""The run folder's name: ``conf/config.yaml``'s ``run_name`` resolver, registered when this module is imported
(``lra.run.hydra_hooks`` imports it, and ``run.py`` imports that).

``outputs/<task>/<attention>/seed<N>/<tag>``, or ``<tag>,<overrides>`` for a run with other settings: the command
line's overrides that change what the run computes (``lra.identity``) and are not in the path already.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ..config import CONF_DIR
from ..identity import IN_THE_PATH, flatten, where_or_how
from .run_files import bounded_name


def names_the_folder(override: Any, conf_dir: Path = CONF_DIR) -> bool:
    """Whether a parsed command-line override changes what the run computes (``lra.identity``) and is not in the
    path already: a key outside ``WHERE_OR_HOW``, or a config group choice (``trainer=debug``) that sets one."""
    key = override.key_or_group
    if key in IN_THE_PATH or where_or_how(key):
        return False
    if "." in key or not (Path(conf_dir) / key).is_dir():
        return True
    if override.is_delete() or override.is_sweep_override():
        return True
    return any(not where_or_how(leaf) for leaf in group_leaves(key, str(override.value()), Path(conf_dir)))


def group_leaves(group: str, choice: str, conf_dir: Path) -> list[str]:
    """The dotted keys ``conf/<group>/<choice>.yaml`` sets, with those of the group's files it includes other than
    ``default`` (the baseline every choice starts from)."""
    path = conf_dir / group / f"{choice}.yaml"
    if choice == "default" or not path.is_file():
        return [group] if choice != "default" else []
    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    included = [entry for entry in node.pop("defaults", None) or [] if isinstance(entry, str)]
    leaves = [f"{group}.{key}" for key in flatten(node)]
    return leaves + [leaf for name in included if name != "_self_" for leaf in group_leaves(group, name, conf_dir)]


def run_name(tag: str, overrides: Any) -> str:
    """``<tag>``, or ``<tag>,<overrides>`` for a run with other settings (the overrides that name the folder,
    sorted, as typed): a sibling of the plain run's folder, never a folder inside it. A name that would not fit
    one folder name (over 255 bytes, a ``/`` in a value) ends in a digest of itself
    (``lra.run.run_files.bounded_name``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [str(line) for line in overrides or []]
    parsed = OverridesParser.create().parse_overrides(lines)
    named = sorted(o.input_line for o in parsed if names_the_folder(o))
    return bounded_name(",".join([str(tag), *named]))  # over 255 bytes: a prefix and a digest of the whole


if not OmegaConf.has_resolver("run_name"):
    OmegaConf.register_new_resolver("run_name", run_name)
