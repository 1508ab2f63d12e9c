"""Checks of a composed config that need nothing heavy (no torch): they run before the training stack loads.

Invalid model, optimizer, seed, batching, ``task.data.limit`` and attention settings (types and the ranges a
mechanism declares, read from its source by ``lra.attention_options``), keys that ``+task.x=...`` or ``+model.x=...``
add but nothing reads, ``key=value`` on a key the config lacks, a config group option that does not exist, sweeper
or launcher presets whose plugin is not installed, an experiment with no settings for the task, Lightning settings
that train no step and the old ``experiment=<name>/<task>`` spelling are each one error naming the key and the fix.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import math
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from .attention_options import check_attention_options
from .config import CONF_DIR, compose
from .errors import UserError
from .run_files import folder_name_problem
from .settings import SCHEDULES, check_types, micro_batch_size, missing_settings, optional_keys

POOLINGS = ("mean", "cls", "none", "padded_mean")
SPLITS = ("train", "val", "test")
BATCHINGS = ("random", "length_grouped")
LENGTH_VARYING_TASKS = ("listops", "text", "retrieval")  # the others' sequences all have one length
NAME_KEYS = ("task.name", "attention.name", "tag", "experiment")  # settings that name a run folder's parts
MAX_SEED = 2**32 - 1  # numpy's and Lightning's largest seed
# Lightning's `precision` values (lightning_fabric's _PRECISION_INPUT)
PRECISIONS = (64, 32, 16, "64", "32", "16", "bf16", "16-true", "16-mixed", "bf16-true", "bf16-mixed", "32-true",
              "64-true", "transformer-engine", "transformer-engine-float16")
CLIP_ALGORITHMS = ("norm", "value")
TRAINED_COPIES = 4  # a parameter's float32 copies while training: itself, its gradient, AdamW's two moments
NO_STEP_KEYS = ("max_epochs", "limit_train_batches", "max_steps")  # Lightning settings whose 0 trains no step
# keys with a default in the schema (lra.settings): a config may lack them, so `+task.<key>=...` may add them
OPTIONAL_KEYS = optional_keys()
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
    attention_dropout = model["attention_dropout"]
    if isinstance(attention_dropout, bool) or not isinstance(attention_dropout, (int, float)) \
            or not 0.0 <= attention_dropout < 1.0:
        raise UserError(f"model.attention_dropout={attention_dropout!r}: must be a number in [0, 1)")
    if not isinstance(model["checkpoint_blocks"], bool):
        raise UserError(f"model.checkpoint_blocks={model['checkpoint_blocks']!r}: must be true or false")
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
    data = task["data"]
    sizes = [("task.data.generate", data.get("generate") or {}, name, low)
             for name, low in (("train", 1), ("val", 1), ("test", 1), ("count", 10))]
    sizes += [("task.data", data, split, 1) for split in SPLITS]  # tasks made in memory (ar)
    for where, section, name, low in sizes:
        if name in section:
            try:
                _integer(section, name, low)
            except UserError as err:
                what = "examples in that split" if low == 1 else "examples, split 80/10/10"
                raise UserError(f"{where}.{err} ({what})") from None
    micro = task["micro_batches"]
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1 or task["batch_size"] % micro:
        raise UserError(f"task.micro_batches={micro!r}: must be a positive integer that divides "
                        f"task.batch_size={task['batch_size']} (each batch runs as that many equal parts)")
    check_batching(task)


def check_batching(task: dict[str, Any]) -> None:
    """``task.batching``: ``random`` or ``length_grouped`` (only where lengths vary), with ``task.batching_pool``
    batches a pool (``lra.sampling``)."""
    batching = task["batching"]
    if batching not in BATCHINGS:
        raise UserError(f"task.batching={batching!r}: must be one of {', '.join(BATCHINGS)}")
    pool = task["batching_pool"]
    if isinstance(pool, bool) or not isinstance(pool, int) or pool < 1:
        raise UserError(f"task.batching_pool={pool!r}: must be an integer >= 1 (batches sorted by length together)")
    if batching == "length_grouped" and task["name"] not in LENGTH_VARYING_TASKS:
        raise UserError(f"task.batching=length_grouped: every {task['name']} sequence has the same length, so "
                        f"there is no padding to save; it applies to {', '.join(LENGTH_VARYING_TASKS)}. Drop the "
                        f"setting (task.batching=random)")


def _number(section: dict[str, Any], name: str, low: float, *, strict: bool) -> float:
    value = section.get(name)
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < low or (strict and value == low):
        raise UserError(f"{name}={value!r}: must be a finite number {'>' if strict else '>='} {low:g}")
    return value


def check_optim(optim: dict[str, Any]) -> None:
    """Refuse optimizer settings AdamW or the schedule would reject or silently change (a negative warmup)."""
    try:
        _number(optim, "lr", 0, strict=True)
        _number(optim, "weight_decay", 0, strict=False)
        _number(optim, "eps", 0, strict=True)
        _integer(optim, "warmup_steps", 0)
        if optim.get("cycle_steps") is not None:
            _integer(optim, "cycle_steps", 1)
    except UserError as err:
        raise UserError(f"task.optim.{err}") from None
    if optim.get("schedule") not in SCHEDULES:
        raise UserError(f"task.optim.schedule={optim.get('schedule')!r}: must be one of {', '.join(SCHEDULES)}")
    betas = optim.get("betas")
    if not (isinstance(betas, (list, tuple)) and len(betas) == 2
            and all(not isinstance(b, bool) and isinstance(b, (int, float)) and 0 <= b < 1 for b in betas)):
        raise UserError(f"task.optim.betas={betas!r}: must be two numbers in [0, 1), e.g. [0.9, 0.999]")


def check_trainer(trainer: dict[str, Any]) -> None:
    """Refuse the Lightning ``Trainer`` arguments that Lightning would reject only after the data loads, or take
    without a word (a NaN clipping threshold clips nothing)."""
    precision = trainer.get("precision")
    if precision is not None and (isinstance(precision, bool) or precision not in PRECISIONS):
        names = ", ".join(dict.fromkeys(map(str, PRECISIONS)))
        raise UserError(f"trainer.precision={precision!r}: must be one of {names} (32-true on a CPU, bf16-mixed on "
                        f"a GPU: trainer=cpu or trainer=gpu)")
    clip = trainer.get("gradient_clip_val")
    if clip is not None:
        try:
            _number(trainer, "gradient_clip_val", 0, strict=False)
        except UserError as err:
            raise UserError(f"trainer.{err} (or null: no clipping)") from None
    algorithm = trainer.get("gradient_clip_algorithm")
    if algorithm is not None and algorithm not in CLIP_ALGORITHMS:
        raise UserError(f"trainer.gradient_clip_algorithm={algorithm!r}: must be null (norm), "
                        f"{' or '.join(CLIP_ALGORITHMS)}")
    if "accumulate_grad_batches" in trainer:
        try:
            _integer(trainer, "accumulate_grad_batches", 1)
        except UserError as err:
            raise UserError(f"trainer.{err}; to run each batch in parts use task.micro_batches=N instead, which "
                            f"keeps task.batch_size the optimizer step's batch") from None


def physical_memory() -> int | None:
    """Bytes of memory this machine has, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(cfg: dict[str, Any], memory: int | None = None) -> None:
    """Refuse a ``task.max_len`` whose learned position embedding alone (``max_len x model.dim`` float32 values,
    with its gradient and AdamW's two moments) needs more memory than the machine has: the model would fail to
    build, out of memory."""
    memory = physical_memory() if memory is None else memory
    max_len, dim = cfg["task"]["max_len"], cfg["model"]["dim"]
    needed = TRAINED_COPIES * 4 * max_len * dim
    if memory is not None and needed > memory:
        raise UserError(f"task.max_len={max_len}: its position embedding alone (max_len x model.dim={dim} float32 "
                        f"values, with gradient and AdamW moments) needs {needed / 2**30:,.0f} GiB, more than this "
                        f"machine's {memory / 2**30:,.0f} GiB of memory; the task's file in conf/task/ has its length")


def check_data_limit(limit: object) -> None:
    """``task.data.limit``: null, or ``{split: count}`` with splits among train, val, test and counts >= 1."""
    if limit is None:
        return
    if not isinstance(limit, dict):
        raise UserError(f"task.data.limit={limit!r}: must be null or {{split: count}}, e.g. {{val: 1000}}")
    for split, count in limit.items():
        if split not in SPLITS:
            raise UserError(f"task.data.limit.{split}: not a split; splits are {', '.join(SPLITS)}")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise UserError(f"task.data.limit.{split}={count!r}: must be null (the whole split) or an integer "
                            f">= 1 (examples kept)")


def setting(cfg: dict[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in ``cfg`` (None where a section or the key is absent)."""
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def check_name(key: str, value: object) -> None:
    """A UserError when ``value`` of the setting ``key`` (one of ``NAME_KEYS``) is not one plain folder name."""
    if value is None and key == "experiment":
        return
    if problem := folder_name_problem(str(value)):
        raise UserError(f"{key}={str(value)!r} is not one plain folder name ({problem}); it names a part of the run "
                        f"folder outputs/<task>/<attention>/seed<N>/<tag>, which must stay one folder there: use "
                        f"letters, digits, '_', '-' and '.' (e.g. tag=my_study), or hydra.run.dir=DIR to choose the "
                        f"folder")


def check_names(cfg: dict[str, Any]) -> None:
    """Refuse a task, attention, tag or experiment name that is not one plain folder name (``..``, a ``/``, a line
    break, an escape character): the run folder would land outside ``outputs/`` or its name would not be one line."""
    for key in NAME_KEYS:
        check_name(key, setting(cfg, key))


def check_seed(seed: object) -> None:
    """The run seed: an integer numpy and Lightning accept."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise UserError(f"seed={seed!r}: must be an integer in [0, {MAX_SEED}]")


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


def check_processes(cfg: dict[str, Any]) -> None:
    """A batch that the run's DDP ranks cannot share is refused before any process starts, where the config
    names the count (``trainer.devices`` as a number or a list, times ``trainer.num_nodes``)."""
    devices, nodes = cfg["trainer"].get("devices", 1), cfg["trainer"].get("num_nodes", 1)
    if isinstance(devices, (list, tuple)):
        devices = len(devices)
    known = [n for n in (devices, nodes) if isinstance(n, int) and not isinstance(n, bool) and n >= 1]
    if len(known) == 2:
        micro_batch_size(cfg["task"], devices * nodes)


def check_training_steps(cfg: dict[str, Any]) -> None:
    """Lightning settings that train no step at all (``+trainer.max_epochs=0``, ``+trainer.limit_train_batches=0``,
    ``trainer.max_steps=0``) are refused: the run would test an untrained model and, but for the check after
    fitting (``lra.train.refuse_short_fit``), record it completed. A run is as long as ``task.max_steps``."""
    for key in NO_STEP_KEYS:
        value = cfg["trainer"].get(key)
        if not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0:
            raise UserError(f"trainer.{key}={value!r} trains no step, so the run would only test an untrained model: "
                            f"drop it; a run trains task.max_steps={cfg['task']['max_steps']} optimizer steps, and "
                            f"task.max_steps=N (with task.eval_every) shortens it")


def check_config(cfg: dict[str, Any]) -> None:
    """Every check of a resolved, complete config (``lra.settings.complete``) that needs no data and no torch:
    a setting every config sets and this one lacks, then each setting's range and relations, then the type the
    schema declares for the settings no range covers."""
    missing_settings(cfg)
    check_names(cfg)
    check_seed(cfg["seed"])
    check_model(cfg["model"])
    check_task(cfg["task"])
    check_optim(cfg["task"]["optim"])
    check_trainer(cfg["trainer"])
    check_data_limit(cfg["task"]["data"]["limit"])
    check_attention_options(cfg["attention"])
    check_experiment(cfg)
    check_types(cfg)
    check_memory(cfg)
    check_processes(cfg)
    check_training_steps(cfg)


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
        extra = lightning_trainer_arguments() if where == "trainer" else ()
        if part in extra:
            return (f"trainer has no key {part!r} (conf/trainer does not set this Lightning Trainer argument); "
                    f"add it with +{key}=...")
        candidates = dict.fromkeys([*map(str, node), *OPTIONAL_KEYS.get(where, ()), *extra])
        close = difflib.get_close_matches(part, list(candidates), n=3, cutoff=0.6)
        prefix = f"{where}." if where else ""
        guess = f"did you mean {' or '.join(prefix + c for c in close)}? " if close else ""
        why = "is not a Lightning Trainer argument" if extra else "would add a key nothing reads"
        return (f"{where or 'the config'} has no key {part!r}; {guess}Valid keys under {where or 'the config'}: "
                f"{', '.join(sorted(map(str, node)))} (+{key}=... {why})")
    return None


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
