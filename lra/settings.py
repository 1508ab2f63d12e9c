"""The run configuration's schema: every setting's type, the default of each optional one (written here once), the
checks a type implies, and the values derived from the settings.

``conf/`` holds the values: the protocol's, per task and per experiment. A setting that some configs leave out has
its default here (a field with a default: ``task.causal``, ``task.truncate``, ``task.data.limit``,
``task.data.num_workers``, ``task.data.pad_multiple``, ``task.data.eval_batch_size``, ``task.optim.cycle_momentum``,
``model.short_conv``),
and ``complete(config)`` fills it in: the composed
config (``lra.config.compose``), ``run.py``'s job and ``lra.train.run`` are complete, so code reads every
setting as ``cfg[...]`` with no default of its own, and records and checkpoints carry every setting. A field
without a default is set by every config in ``conf/``. Sections that are open by design stay mappings:
``attention`` (the mechanism's constructor options, checked from its source by ``lra.attention_options``),
``trainer`` (any Lightning ``Trainer`` argument) and a task's own keys (``ar``'s ``seq_len``, ``data.generate``).
Why dataclasses that the composed config is checked against, not a Hydra structured config: docs/design.md,
section 5. No torch here: ``run.py`` checks settings before torch loads.
"""

from __future__ import annotations

import logging
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any

from lra_base.errors import UserError

log = logging.getLogger(__name__)


SCHEDULES = ("linear", "constant", "rsqrt", "cosine", "onecycle")  # task.optim.schedule (lra/schedules.py)


def at_least(low: int) -> dict[str, int]:
    return {"min": low}


@dataclass(frozen=True)
class Optim:
    """``task.optim``: AdamW and its per-step schedule (``lra/schedules.py``)."""

    lr: float
    weight_decay: float
    betas: list
    eps: float
    warmup_steps: int
    schedule: str  # linear | constant | rsqrt | cosine | onecycle
    cycle_steps: int | None  # cosine: the cycle; null = max_steps
    cycle_momentum: bool = True  # onecycle: beta1 cycles against the lr (the PyTorch ports); false: fixed beta1


@dataclass(frozen=True)
class Data:
    """``task.data``: where the prepared data lives and how it is loaded (generator options: the task's own)."""

    root: str
    num_workers: int = field(default=0, metadata=at_least(0))  # DataLoader worker processes
    pad_multiple: int = field(default=1, metadata=at_least(1))  # pad each batch to a multiple of this length
    limit: dict | None = None  # {split: count}: a fixed random subset of those splits
    eval_batch_size: int | None = field(default=None, metadata=at_least(1))  # null: the training micro-batch


@dataclass(frozen=True)
class Task:
    """``task``: one LRA task's data, sizes, steps and optimizer (``conf/task/<name>.yaml``)."""

    name: str
    max_len: int
    num_classes: int = field(metadata=at_least(2))  # one class is nothing to learn (and cross-entropy is 0)
    batch_size: int  # the optimizer step's examples over all processes (DDP ranks split it)
    micro_batches: int  # each batch as that many accumulated parts: less memory, the same gradient
    batching: str  # random | length_grouped (lra/sampling.py)
    batching_pool: int
    max_steps: int
    eval_every: int  # validation (and last.ckpt) every this many optimizer steps
    optim: Optim
    data: Data
    causal: bool = False  # queries read only the past (ar)
    truncate: bool = False  # cut sequences longer than max_len (Text, Retrieval: as LRA does); else refuse them


@dataclass(frozen=True)
class Model:
    """``model``: the encoder (``lra/model.py``)."""

    dim: int
    depth: int
    heads: int
    ffn_dim: int
    dropout: float
    pooling: str
    qkv_dim: int | None
    attention_dropout: float
    embed_init_std: float | None
    checkpoint_blocks: bool
    short_conv: int | None = field(default=None, metadata=at_least(2))  # kernel on q, k, v (lra/short_conv.py)


@dataclass(frozen=True)
class Run:
    """The whole run config (``conf/config.yaml`` and its groups)."""

    seed: int
    experiment: str | None
    tag: str | int
    data_dir: str
    rerun: bool
    reuse_freed_memory: bool
    checkpoint: dict
    model: Model
    task: Task
    attention: dict
    trainer: dict
    flush_subnormals: bool = False  # records made before it existed did not flush (lra.subnormals)


def _schema_fields(schema: type) -> dict[str, Any]:
    hints = typing.get_type_hints(schema)
    return {f.name: (f, hints[f.name]) for f in fields(schema)}


def optional_keys(schema: type = Run, where: str = "") -> dict[str, tuple[str, ...]]:
    """``{"task": ("causal", "truncate"), ...}``: per section, the keys a config may leave out (they have a
    default here), so ``+task.truncate=...`` may add them (``lra.overrides``)."""
    found: dict[str, tuple[str, ...]] = {}
    optional = tuple(f.name for f, _ in _schema_fields(schema).values()
                     if f.default is not MISSING or f.default_factory is not MISSING)
    if optional:
        found[where] = optional
    for name, (_, hint) in _schema_fields(schema).items():
        if is_dataclass(hint):
            found.update(optional_keys(hint, f"{where}.{name}" if where else name))
    return found


def complete(config: dict[str, Any], schema: type = Run) -> dict[str, Any]:
    """``config`` with every optional setting it leaves out set to its default, in the sections it has (a copy;
    other keys as they are)."""
    done = dict(config)
    for name, (spec, hint) in _schema_fields(schema).items():
        if is_dataclass(hint):
            if isinstance(done.get(name), dict):
                done[name] = complete(done[name], hint)
        elif name not in done and spec.default is not MISSING:
            done[name] = spec.default
    return done


def _kind(hint: Any) -> tuple[tuple[type, ...], bool]:
    """The Python types a setting's annotation admits, and whether null is one of them."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    return tuple(a for a in args if a is not type(None)), type(None) in args


def _fits(value: Any, allowed: tuple[type, ...], low: int | None) -> bool:
    for kind in allowed:
        if kind is bool and isinstance(value, bool):
            return True
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return low is None or value >= low
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if kind in (str, list, dict) and isinstance(value, kind):
            return True
    return False


def _wanted(allowed: tuple[type, ...], nullable: bool, low: int | None) -> str:
    words = {bool: "true or false", int: "an integer" + (f" >= {low}" if low is not None else ""),
             float: "a number", str: "a string", list: "a list", dict: "a group of keys"}
    text = " or ".join(words[kind] for kind in allowed)
    return f"null or {text}" if nullable else text


def missing_settings(config: dict[str, Any], schema: type = Run, where: str = "") -> None:
    """A UserError naming the first setting without a default that ``config`` lacks (every file in ``conf/``
    sets it: a ``~key`` override or a hand-written config dropped it)."""
    for name, (spec, hint) in _schema_fields(schema).items():
        key = f"{where}{name}"
        if name not in config and spec.default is MISSING:
            raise UserError(f"{key} is missing: every config in conf/ sets it; set it (+{key}=...)")
        if is_dataclass(hint) and isinstance(config.get(name), dict):
            missing_settings(config[name], hint, key + ".")


def check_types(config: dict[str, Any], schema: type = Run, where: str = "") -> None:
    """A UserError naming the first setting whose value is not of its declared type (or below its declared
    minimum)."""
    for name, (spec, hint) in _schema_fields(schema).items():
        key = f"{where}{name}"
        if name not in config:
            continue
        value = config[name]
        if is_dataclass(hint):
            if not isinstance(value, dict):
                raise UserError(f"{key}={value!r}: must be a group of keys")
            check_types(value, hint, key + ".")
            continue
        allowed, nullable = _kind(hint)
        low = spec.metadata.get("min")
        if not (value is None and nullable) and not _fits(value, allowed, low):
            raise UserError(f"{key}={value!r}: must be {_wanted(allowed, nullable, low)}")


def micro_batch_size(task: dict[str, Any], processes: int = 1) -> int:
    """Examples per forward pass: ``task.batch_size`` split into ``task.micro_batches`` equal parts on each of
    ``processes`` DDP ranks, so an optimizer step sees ``task.batch_size`` examples however many devices run it."""
    batch, micro = int(task["batch_size"]), int(task["micro_batches"])
    if batch % (micro * processes):
        raise UserError(f"task.batch_size={batch} is the batch of one optimizer step over all processes: it must "
                        f"split into {processes} process(es) x task.micro_batches={micro} equal parts; pick a "
                        f"batch size that {micro * processes} divides, or another trainer.devices / num_nodes")
    return batch // (micro * processes)


def eval_batch_size(task: dict[str, Any]) -> int:
    """Examples per validation or test batch of a process: ``task.data.eval_batch_size``, else the training
    micro-batch of one process (``task.batch_size / task.micro_batches``)."""
    return int(task["data"]["eval_batch_size"] or micro_batch_size(task))


def refuse_ddp_without_gpu(trainer: dict[str, Any]) -> None:
    """``trainer=ddp`` (accelerator ``auto``, ``bf16-mixed``) where torch sees no GPU is refused: Lightning would run
    one process on the CPU in bf16 autocast, neither DDP nor the CPU's float32, without a word."""
    import torch

    if trainer.get("accelerator") == "auto" and str(trainer.get("strategy", "")).startswith("ddp") \
            and not torch.cuda.is_available():
        raise UserError(f"trainer.strategy={trainer['strategy']} with trainer.accelerator=auto found no GPU (torch "
                        f"sees none), so it would run one {trainer.get('precision')} process on the CPU: on a CPU use "
                        f"trainer=ddp_cpu (float32 processes, trainer.devices of them), or set trainer.accelerator=cpu "
                        f"to choose the rest yourself")


def trainer_arguments(cfg: dict[str, Any]) -> dict[str, Any]:
    """Lightning ``Trainer`` arguments: ``cfg['trainer']`` with the validation interval counted in optimizer steps.

    A run shorter than its validation interval validates once, at its last step. ``task.micro_batches`` n > 1
    accumulates n micro-batches into each optimizer step; Lightning counts the interval in micro-batches, so it
    is scaled to stay ``task.eval_every`` optimizer steps."""
    args = dict(cfg["trainer"])
    refuse_ddp_without_gpu(args)
    args["use_distributed_sampler"] = False  # under DDP the data module shards its own orders: exact resume
    every, steps = args.get("val_check_interval"), args.get("max_steps")
    if not args.get("fast_dev_run") and type(every) is int and type(steps) is int and 0 < steps < every:
        log.warning("max_steps=%d ends before the first validation (every %d steps, task.eval_every): validating "
                    "once, at step %d, so the run has a checkpoint to test. To shorten a run set task.max_steps "
                    "and task.eval_every.", steps, every, steps)
        args["val_check_interval"] = every = steps
    micro = int(cfg["task"]["micro_batches"])
    if micro > 1:
        if type(every) is not int:
            raise UserError(f"trainer.val_check_interval={every!r} (a fraction of an epoch) with task.micro_batches="
                            f"{micro} could validate between the parts of a step: validate every N steps with "
                            f"task.eval_every=N instead")
        args["accumulate_grad_batches"] = micro
        args["val_check_interval"] = every * micro
    return args
