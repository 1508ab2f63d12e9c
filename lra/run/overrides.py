"""The command line checked before Hydra composes it (no torch): each refusal is one line naming the fix.

``unknown_override``: a config group option that does not exist (``attention=lineer``: the closest options and
the list of valid ones) or ``key=value`` on a key the config lacks (``trainer.max_step=100``: the closest keys);
``check_added_keys``: ``+task.x=...`` or ``+model.x=...`` on a key nothing reads; ``missing_plugin``: a sweeper or
launcher preset whose Hydra plugin is not installed (and the pip extra that installs it).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from attention_zoo.registry import declared_options
from lra_base.errors import UserError

from ..config import CONF_DIR, compose
from ..setting_rules import optional_keys
from ..settings import Run

# keys with a default in the schema (lra.settings): a config may lack them, so `+task.<key>=...` may add them
OPTIONAL_KEYS = optional_keys(Run)
# a preset of conf/hydra/ -> (the plugin module it needs, the pip extra that installs it)
PLUGIN_PRESETS = {
    "hydra/sweeper=optuna": ("hydra_plugins.hydra_optuna_sweeper", "optuna"),
    "hydra/launcher=joblib": ("hydra_plugins.hydra_joblib_launcher", "sweep"),
    "hydra/launcher=slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
}


def check_added_keys(added: Iterable[str], reference: dict[str, Any]) -> None:
    """Refuse a key that an override adds under ``task`` or ``model`` unless the config (``reference``, composed
    without the adding overrides) has it or the code reads it as an optional key."""
    for key in added:
        parts = key.split(".")
        if parts[0] not in ("task", "model"):
            continue
        node: Any = reference
        for depth, part in enumerate(parts):
            where = ".".join(parts[:depth])
            if part in OPTIONAL_KEYS.get(where, ()):
                break  # what sits under an optional key is checked where it is read
            if isinstance(node, dict) and part in node:
                node = node[part]
                continue
            if not isinstance(node, dict):
                raise UserError(f"+{key}: {where} is a single value, not a group of keys")
            valid = sorted([*node, *OPTIONAL_KEYS.get(where, ())])
            raise UserError(f"+{key}: {where} has no key {part!r}, so this setting would be ignored. "
                            f"Valid keys under {where}: {', '.join(valid)}")


def missing_plugin(argv: Iterable[str], find_spec: Callable = importlib.util.find_spec) -> str | None:
    """What to install when ``argv`` picks a sweeper or launcher preset whose Hydra plugin is missing."""
    for arg in argv:
        for preset, (module, extra) in PLUGIN_PRESETS.items():
            if arg.startswith(preset) and not _importable(module, find_spec):
                return (f"{arg} needs the Hydra plugin {module.split('.')[-1]}, which is not installed. "
                        f"Install it with: pip install -e \".[{extra}]\"")
    return None


def unknown_override(argv: Iterable[str], conf_dir: Path = CONF_DIR) -> str | None:
    """The one-line fix for an override Hydra would refuse with its own message: a group option that does not
    exist (``attention=lineer``: the closest options and the list of valid ones) or ``key=value`` on a key the
    config lacks (``task.max_step=100``, ``trainer.max_step=100``, ``foo=1``: the closest valid keys; Hydra's hint
    ``+key=value`` would add a key nothing reads). Keys the code reads with a default (``OPTIONAL_KEYS``) pass, and
    so do Lightning Trainer arguments that ``conf/trainer`` does not set, named with their ``+trainer.`` spelling.
    A key of Hydra's own settings (``hydra.job.chdirr=true``) is named when Hydra refuses it; malformed overrides
    are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    try:
        parsed = OverridesParser.create().parse_overrides([a for a in argv if not a.startswith("-")])
    except HydraException:
        return None  # Hydra names a malformed override itself
    if problem := _unknown_trainer_argument(parsed):
        return problem
    # hydra.searchpath adds config folders (an attention of your own): composing without it would miss their options
    plain = [o for o in parsed if _sets_a_key(o, conf_dir) and o.key_or_group != "hydra.searchpath"]
    kept = [o.input_line for o in parsed if o not in plain and not o.is_sweep_override()]
    try:
        config = compose(kept, conf_dir)
        for overrides in _group_sweeps(parsed, kept, conf_dir):
            compose(overrides, conf_dir)
    except MissingConfigException as err:
        return _missing_option(err) if err.options else None
    except (HydraException, OmegaConfBaseException):
        return None  # another problem: Hydra's own message names it
    for override in (o for o in plain if not _is_hydras(o)):
        if problem := _missing_key(override.key_or_group, config):
            return f"{override.input_line}: {problem}"
    return _unknown_hydra_key([o for o in plain if _is_hydras(o) and not o.is_sweep_override()], kept, conf_dir)


def _unknown_trainer_argument(parsed: list[Any]) -> str | None:
    """``+trainer.max_stepz=1: ...``: an added ``trainer`` key that ``pytorch_lightning.Trainer`` does not take
    (it would fail only once torch has loaded), with the closest arguments."""
    arguments = lightning_trainer_arguments()
    for override in parsed:
        parts = override.key_or_group.split(".")
        if not (override.is_add() or override.is_force_add()) or len(parts) != 2 or parts[0] != "trainer":
            continue
        if arguments and parts[1] not in arguments:
            close = difflib.get_close_matches(parts[1], arguments, n=3, cutoff=0.6)
            guess = f"; did you mean {' or '.join(f'trainer.{c}' for c in close)}?" if close else ""
            return f"{override.input_line}: {parts[1]!r} is not an argument of Lightning's Trainer{guess}"
    return None


def _is_group(key: str, conf_dir: Path) -> bool:
    """Whether ``key`` (``attention``, ``hydra/launcher``) names a config group rather than a setting."""
    return "/" in key or (conf_dir / key).is_dir()


def _is_hydras(override: Any) -> bool:
    """Whether ``override`` sets one of Hydra's own settings (``hydra.run.dir=...``)."""
    return override.key_or_group.split(".")[0] == "hydra"


def _sets_a_key(override: Any, conf_dir: Path) -> bool:
    """Whether ``override`` is a plain ``key=value`` (not ``+``, ``++``, ``~``, a package or a group choice)."""
    return not (override.is_add() or override.is_force_add() or override.is_delete()) and override.package is None \
        and not _is_group(override.key_or_group, conf_dir)


def _group_sweeps(parsed: list[Any], kept: list[str], conf_dir: Path) -> Iterator[list[str]]:
    """``kept`` with each value of each group sweep in turn, so that each option of ``attention=linear,lineer`` is
    composed (``kept`` holds the plain group choices)."""
    from hydra.errors import HydraException

    for override in parsed:
        if not (override.is_sweep_override() and override.package is None and _is_group(override.key_or_group,
                                                                                           conf_dir)):
            continue
        try:
            values = list(override.sweep_string_iterator())
        except HydraException:
            continue  # a range or glob: Hydra expands and names it
        prefix = "+" if override.is_add() else ""
        yield from ([*kept, f"{prefix}{override.key_or_group}={value}"] for value in values)


def _missing_option(err: Any) -> str:
    """The line for Hydra's ``MissingConfigException``: the closest options of the group, then all of them."""
    group, _, option = str(err.missing_cfg_file).rpartition("/")
    options = sorted(map(str, err.options))
    close = difflib.get_close_matches(option, options, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(f'{group}={c}' for c in close)}? " if close else ""
    return f"{group}={option}: {group} has no option {option!r}; {guess}Valid options for {group}: {', '.join(options)}"


def _unknown_hydra_key(plain: list[Any], kept: list[str], conf_dir: Path) -> str | None:
    """``hydra.job.chdirr=true: ...``: the first of ``plain`` (overrides of Hydra's own settings) that Hydra refuses
    (composed to be sure: some of Hydra's sections take new keys), with the closest keys."""
    from hydra.errors import ConfigCompositionException, HydraException
    from omegaconf.errors import OmegaConfBaseException

    if not plain:
        return None
    try:
        settings = {"hydra": _hydra_settings(kept, conf_dir)}
    except (HydraException, OmegaConfBaseException):
        return None  # Hydra's own message names it
    for override in plain:
        if (problem := _missing_key(override.key_or_group, settings)) is None:
            continue
        try:
            _hydra_settings([*kept, override.input_line], conf_dir)
        except ConfigCompositionException:
            return f"{override.input_line}: {problem}"
    return None


def _hydra_settings(overrides: list[str], conf_dir: Path) -> dict[str, Any]:
    """Hydra's own settings (``hydra.*``) as ``run.py <overrides>`` would compose them, unresolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        config = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(config.hydra, resolve=False)


def _missing_key(key: str, config: dict[str, Any]) -> str | None:
    """Why ``key`` is not in ``config``, with the closest valid keys; None when it is there (or optional, or a
    Lightning Trainer argument that ``+trainer.<key>=...`` adds)."""
    parts, node = key.split("."), config
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth])
        if not isinstance(node, dict) or part in OPTIONAL_KEYS.get(where, ()):
            return None
        if part in node:
            node = node[part]
            continue
        if not node:  # a mapping that takes keys only with + (hydra.job.env_set)
            return f"{where} has no keys; add one with +{key}=..."
        if where == "attention" and (unlisted := _unlisted_option(node, part)) is not None:
            return unlisted
        extra = lightning_trainer_arguments() if where == "trainer" else ()
        if part in extra:
            return (f"trainer has no key {part!r} (conf/trainer does not set this Lightning Trainer argument); "
                    f"add it with +{key}=...")
        takes = (declared_options(str(node.get("name"))) or {}) if where == "attention" else {}
        candidates = dict.fromkeys([*map(str, node), *OPTIONAL_KEYS.get(where, ()), *extra, *takes])
        close = difflib.get_close_matches(part, list(candidates), n=3, cutoff=0.6)
        prefix = f"{where}." if where else ""
        guess = f"did you mean {' or '.join(prefix + c for c in close)}? " if close else ""
        why = "is not a Lightning Trainer argument" if extra else "would add a key nothing reads"
        return (f"{where or 'the config'} has no key {part!r}; {guess}Valid keys under {where or 'the config'}: "
                f"{', '.join(sorted(map(str, node)))} (+{key}=... {why})")
    return None


def _unlisted_option(attention: dict[str, Any], option: str) -> str | None:
    """The fix for an option the mechanism takes that its ``conf/attention`` yaml does not list (Hydra adds a key only
    with ``+``); None when the mechanism has no such option."""
    name = str(attention.get("name"))
    options = declared_options(name) or {}
    if option not in options:
        return None
    return (f"attention has no key {option!r}: {name}'s yaml does not list it, though {name} takes it "
            f"(default {options[option]!r}); set it with +attention.{option}=...")


@functools.cache
def lightning_trainer_arguments() -> tuple[str, ...]:
    """The keyword arguments of ``pytorch_lightning.Trainer``, read from its source (importing it loads torch);
    empty when Lightning is not installed."""
    spec = importlib.util.find_spec("pytorch_lightning")
    if spec is None or spec.origin is None:
        return ()
    source = Path(spec.origin).parent / "trainer" / "trainer.py"
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    return tuple(a.arg for a in [*args.args, *args.kwonlyargs] if a.arg != "self")
    return ()


def _importable(module: str, find_spec: Callable) -> bool:
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package (hydra_plugins) is missing too
        return False
