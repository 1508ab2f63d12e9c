"""Checks of a composed config that need nothing heavy (no torch): they run before the training stack loads.

Invalid model settings, keys that ``+task.x=...`` or ``+model.x=...`` add but nothing reads, sweeper or
launcher presets whose plugin is not installed, an experiment with no settings for the task and the old
``experiment=<name>/<task>`` spelling are each one error naming the key and the fix.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .config import CONF_DIR
from .errors import UserError

POOLINGS = ("mean", "cls", "none", "padded_mean")
# keys the code reads with a default: a task config may lack them, so `+task.<key>=...` may add them
OPTIONAL_KEYS = {
    "task": ("causal", "truncate"),
    "task.data": ("eval_batch_size", "limit", "num_workers", "pad_multiple"),
    "task.optim": ("cycle_momentum",),
}
# a preset of conf/hydra/ -> (the plugin module it needs, the pip extra that installs it)
PLUGIN_PRESETS = {
    "hydra/sweeper=optuna": ("hydra_plugins.hydra_optuna_sweeper", "optuna"),
    "hydra/launcher=joblib": ("hydra_plugins.hydra_joblib_launcher", "sweep"),
    "hydra/launcher=slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
}


def _integer(section: dict[str, Any], name: str, low: int) -> int:
    value = section.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"{name}={value!r}: must be an integer >= {low}")
    return value


def check_model(model: dict[str, Any]) -> None:
    """Refuse model settings that cannot build a model (or build a degenerate one)."""
    try:
        dim, heads = _integer(model, "dim", 1), _integer(model, "heads", 1)
        _integer(model, "depth", 1)
        _integer(model, "ffn_dim", 1)
    except UserError as err:
        raise UserError(f"model.{err}") from None
    if dim % heads and model.get("qkv_dim") is None:  # with qkv_dim set, only q/k/v are split into heads
        raise UserError(f"model.dim={dim} is not divisible by model.heads={heads}: each head takes dim / heads "
                        f"channels; use a model.dim that is a multiple of {heads}")
    dropout = model.get("dropout")
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise UserError(f"model.dropout={dropout!r}: must be a number in [0, 1)")
    qkv_dim = model.get("qkv_dim")
    if qkv_dim is not None and (isinstance(qkv_dim, bool) or not isinstance(qkv_dim, int) or qkv_dim < 1
                                or qkv_dim % heads):
        raise UserError(f"model.qkv_dim={qkv_dim!r}: must be null (= model.dim) or a positive multiple of "
                        f"model.heads={heads}")
    attention_dropout = model.get("attention_dropout", 0.0)
    if isinstance(attention_dropout, bool) or not isinstance(attention_dropout, (int, float)) \
            or not 0.0 <= attention_dropout < 1.0:
        raise UserError(f"model.attention_dropout={attention_dropout!r}: must be a number in [0, 1)")
    if not isinstance(model.get("checkpoint_blocks", False), bool):
        raise UserError(f"model.checkpoint_blocks={model.get('checkpoint_blocks')!r}: must be true or false")
    std = model.get("embed_init_std")
    if std is not None and (isinstance(std, bool) or not isinstance(std, (int, float)) or not std > 0):
        raise UserError(f"model.embed_init_std={std!r}: must be null (nn.Embedding's N(0, 1)) or a positive "
                        f"number (the PyTorch ports: 0.02)")
    if model.get("pooling") not in POOLINGS:
        raise UserError(f"model.pooling={model.get('pooling')!r}: must be one of {', '.join(POOLINGS)}")


def check_task(task: dict[str, Any]) -> None:
    """Refuse task sizes that cannot train."""
    for name in ("max_len", "batch_size", "max_steps", "eval_every"):
        try:
            _integer(task, name, 1)
        except UserError as err:
            raise UserError(f"task.{err}") from None
    micro = task.get("micro_batches", 1)
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1 or task["batch_size"] % micro:
        raise UserError(f"task.micro_batches={micro!r}: must be a positive integer that divides "
                        f"task.batch_size={task['batch_size']} (each batch runs as that many equal parts)")


def check_experiment(cfg: dict[str, Any], conf_dir: Path = CONF_DIR) -> None:
    """Refuse an experiment with per-task settings (``conf/experiment/<name>/``) that has none for this task:
    Hydra's optional include would skip them, and the run would be the full protocol under the experiment's tag."""
    name, task = cfg.get("experiment"), cfg["task"]["name"]
    folder = conf_dir / "experiment" / str(name)
    if not name or not folder.is_dir() or (folder / f"{task}.yaml").is_file():
        return
    covered = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
    raise UserError(f"experiment={name} has no settings for task={task} (no conf/experiment/{name}/{task}.yaml), "
                    f"so it would run task {task}'s full protocol tagged {name!r}. It covers: {covered}. Drop "
                    f"experiment={name}, or add that file (conf/experiment/README.md)")


def check_config(cfg: dict[str, Any]) -> None:
    """Every check of a resolved config that needs no data and no torch."""
    check_model(cfg["model"])
    check_task(cfg["task"])
    check_experiment(cfg)


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


def old_experiment_spelling(argv: Iterable[str]) -> str | None:
    """The fix for ``experiment=<name>/<task>``: an experiment is ``experiment=<name> task=<task>`` now, and
    ``conf/experiment/<name>/<task>.yaml`` holds only its settings for that task (selected alone, it would
    run without the experiment's tag and shared settings)."""
    for arg in argv:
        key, _, value = arg.partition("=")
        picked = value.split(",")
        if key.lstrip("+~") != "experiment" or not any("/" in v for v in picked):
            continue
        names = list(dict.fromkeys(v.split("/")[0] for v in picked))
        tasks = list(dict.fromkeys(v.split("/", 1)[1] for v in picked if "/" in v))
        return (f"{arg}: name the experiment and the task apart: experiment={','.join(names)} "
                f"task={','.join(tasks)} (conf/experiment/README.md lists the experiments)")
    return None


def _importable(module: str, find_spec: Callable) -> bool:
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package (hydra_plugins) is missing too
        return False
