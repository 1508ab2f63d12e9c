"""Checks of a composed config that need nothing heavy (no torch): they run before the training stack loads.

Invalid model, optimizer, seed, batching, ``task.data.limit`` and attention settings (types and the ranges a
mechanism declares, read from its source by ``lra.attention_options``), names that are not one plain folder name, a
model too large for the machine's memory, an experiment with no settings for the task and Lightning settings that
train no step are each one error naming the key and the fix. The command line itself (keys and group options that
do not exist, keys added that nothing reads, missing plugins) is checked before composing, in ``lra.overrides``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from lra_base.errors import UserError

from .attention_options import check_attention_options
from .config import CONF_DIR
from .run_files import folder_name_problem
from .settings import SCHEDULES, check_types, micro_batch_size, missing_settings

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
