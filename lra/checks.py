"""The checks of a run's settings that a single field's range cannot say: relations between sections, the names
that make a run folder, the machine (its memory) and ``conf/`` (an experiment's coverage of the task).

``lra.settings.Run.parse`` runs them once, with the rules declared on the schema's fields (``lra.setting_rules``):
names first, then every field, then the attention's options (``attention_zoo.option_problem``), then
``check_relations``. The field rules that need more words than a range call the
predicates and problems here. No torch: ``run.py`` checks before torch loads (a DDP trainer on a machine without a
GPU, which needs torch to tell, ``lra.build`` refuses before any data work). The command line itself (keys and group
options that do not exist, keys added that nothing reads, missing plugins) is checked before composing, in
``lra.run.overrides``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_prep.compact import SPLITS
from lra_base.errors import UserError

from .config import CONF_DIR
from .setting_rules import is_integer, is_number
from .task_facts import length_varying_tasks

NAME_KEYS = ("task.name", "attention.name", "tag", "experiment")  # settings that name a run folder's parts
NAME_MAX = 255  # bytes in one file or folder name (Linux, macOS)
MAX_SEED = 2**32 - 1  # numpy's and Lightning's largest seed
# Lightning's `precision` values (lightning_fabric's _PRECISION_INPUT)
PRECISIONS = (64, 32, 16, "64", "32", "16", "bf16", "16-true", "16-mixed", "bf16-true", "bf16-mixed", "32-true",
              "64-true", "transformer-engine", "transformer-engine-float16")
CLIP_ALGORITHMS = ("norm", "value")
TRAINED_COPIES = 4  # a parameter's float32 copies while training: itself, its gradient, AdamW's two moments
NO_STEP_KEYS = ("max_epochs", "limit_train_batches", "max_steps")  # Lightning settings whose 0 trains no step
GENERATED_SIZES = (("train", 1), ("val", 1), ("test", 1), ("count", 10))  # task.data.generate: examples


def is_count(value: Any, low: int) -> bool:
    return is_integer(value) and value >= low


def two_betas(value: Any, _: Mapping[str, Any]) -> bool:
    """``task.optim.betas``: two numbers in ``[0, 1)``."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(is_number(b) and 0 <= b < 1 for b in value)


def limit_problem(limit: object) -> str | None:
    """Why ``task.data.limit`` is not null or ``{split: count}`` with splits among train, val, test and counts >= 1."""
    if limit is None:
        return None
    if not isinstance(limit, Mapping):
        return f"task.data.limit={limit!r}: must be null or {{split: count}}, e.g. {{val: 1000}}"
    for split, count in limit.items():
        if split not in SPLITS:
            return f"task.data.limit.{split}: not a split; splits are {', '.join(SPLITS)}"
        if count is not None and not is_count(count, 1):
            return (f"task.data.limit.{split}={count!r}: must be null (the whole split) or an integer >= 1 "
                    f"(examples kept)")
    return None


def groups_lengths_it_has(batching: str, task: Mapping[str, Any]) -> bool:
    """``task.batching=length_grouped`` only where sequences have many lengths (``lra.task_facts``)."""
    return batching != "length_grouped" or task["name"] in length_varying_tasks()


def no_lengths_to_group(key: str, value: str, task: Mapping[str, Any]) -> str:
    return (f"task.batching=length_grouped: every {task['name']} sequence has the same length, so there is no padding "
            f"to save; it applies to {', '.join(length_varying_tasks())}. Drop the setting (task.batching=random)")


def heads_split_dim(heads: int, model: Mapping[str, Any]) -> bool:
    """Each head takes ``dim / heads`` channels, unless ``model.qkv_dim`` sets the q/k/v width apart."""
    return model.get("qkv_dim") is not None or model["dim"] % heads == 0


def dim_not_divisible(key: str, heads: int, model: Mapping[str, Any]) -> str:
    return (f"model.dim={model['dim']} is not divisible by model.heads={heads}: each head takes dim / heads "
            f"channels; use a model.dim that is a multiple of {heads}")


def trainer_problem(trainer: object) -> str | None:
    """Why Lightning would reject a ``Trainer`` argument only after the data loads, or take it without a word (a NaN
    clipping threshold clips nothing); None when it would not."""
    if not isinstance(trainer, Mapping):
        return f"trainer={trainer!r}: must be a group of keys"
    precision = trainer.get("precision")
    if precision is not None and (isinstance(precision, bool) or precision not in PRECISIONS):
        names = ", ".join(dict.fromkeys(map(str, PRECISIONS)))
        return (f"trainer.precision={precision!r}: must be one of {names} (32-true on a CPU, bf16-mixed on a GPU: "
                f"trainer=cpu or trainer=gpu)")
    clip = trainer.get("gradient_clip_val")
    if clip is not None and not (is_number(clip) and math.isfinite(clip) and clip >= 0):
        return f"trainer.gradient_clip_val={clip!r}: must be a finite number >= 0 (or null: no clipping)"
    algorithm = trainer.get("gradient_clip_algorithm")
    if algorithm is not None and algorithm not in CLIP_ALGORITHMS:
        return f"trainer.gradient_clip_algorithm={algorithm!r}: must be null (norm), {' or '.join(CLIP_ALGORITHMS)}"
    if "accumulate_grad_batches" in trainer and not is_count(accumulated := trainer["accumulate_grad_batches"], 1):
        return (f"trainer.accumulate_grad_batches={accumulated!r}: must be an integer >= 1; to run each batch in parts "
                f"use task.micro_batches=N instead, which keeps task.batch_size the optimizer step's batch")
    for key, split in (("limit_val_batches", "val"), ("limit_test_batches", "test")):
        limit = trainer.get(key)
        if limit is not None and not (isinstance(limit, float) and limit == 1.0):
            return (f"trainer.{key}={limit!r}: evaluation goes longest example first, so a limit would score only "
                    f"the longest examples (and majority_acc the whole split); score a fixed random subset with "
                    f"task.data.limit={{{split}: N}} instead")
    return None


def setting(cfg: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in ``cfg`` (None where a section or the key is absent)."""
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def folder_name_problem(text: str) -> str | None:
    """Why ``text`` is not one plain file or folder name (empty, ``.`` or ``..``, a ``/``, a line break or other
    control character, over ``NAME_MAX`` bytes), else None."""
    if text in ("", ".", ".."):
        return "empty" if not text else f"{text!r} names a folder that exists already (this one or its parent)"
    if "/" in text or (os.sep != "/" and os.sep in text):
        return "it holds a '/', so it would be several folders"
    if not text.isprintable():
        return "it holds a character that is not printable (a line break, an escape, a control character)"
    if len(text.encode("utf-8", "surrogatepass")) > NAME_MAX:
        return f"{len(text.encode('utf-8', 'surrogatepass'))} bytes, over the {NAME_MAX} a file system takes"
    return None


def check_name(key: str, value: object) -> None:
    """A UserError when ``value`` of the setting ``key`` (one of ``NAME_KEYS``) is not one plain folder name."""
    if value is None and key == "experiment":
        return
    if problem := folder_name_problem(str(value)):
        raise UserError(f"{key}={str(value)!r} is not one plain folder name ({problem}); it names a part of the run "
                        f"folder outputs/<task>/<attention>/seed<N>/<tag>, which must stay one folder there: use "
                        f"letters, digits, '_', '-' and '.' (e.g. tag=my_study), or hydra.run.dir=DIR to choose the "
                        f"folder")


def check_names(cfg: Mapping[str, Any]) -> None:
    """Refuse a task, attention, tag or experiment name that is not one plain folder name (``..``, a ``/``, a line
    break, an escape character): the run folder would land outside ``outputs/`` or its name would not be one line."""
    for key in NAME_KEYS:
        check_name(key, setting(cfg, key))


def check_relations(cfg: Mapping[str, Any]) -> None:
    """The checks of a complete config whose fields each passed their rules and whose attention options passed the
    registry's (``attention_zoo.option_problem``): the task's own sizes, settings of two sections, the experiment's
    coverage, the machine's memory."""
    check_own_sizes(cfg["task"])
    check_schedule_fits(cfg["task"])
    check_validation_interval(cfg)
    check_experiment(cfg)
    check_memory(cfg)
    check_processes(cfg)
    check_training_steps(cfg)


def check_own_sizes(task: Mapping[str, Any]) -> None:
    """The example counts a task's own keys set: a generator's (``task.data.generate``) and those of data made in
    memory (``ar``'s ``task.data.train``, ...)."""
    data = task["data"]
    generate = data.get("generate") or {}
    sizes = [("task.data.generate", generate, name, low) for name, low in GENERATED_SIZES]
    sizes += [("task.data", data, split, 1) for split in SPLITS]
    for where, section, name, low in sizes:
        if name in section and not is_count(section[name], low):
            what = "examples in that split" if low == 1 else "examples, split 80/10/10"
            raise UserError(f"{where}.{name}={section[name]!r}: must be an integer >= {low} ({what})")


def check_schedule_fits(task: Mapping[str, Any]) -> None:
    """``onecycle`` (torch's OneCycleLR) climbs for the warmup and falls for the rest: it needs steps after it."""
    warmup, steps = max(1, task["optim"]["warmup_steps"]), task["max_steps"]
    if task["optim"]["schedule"] == "onecycle" and warmup >= steps:
        raise UserError(f"task.optim.schedule=onecycle needs warmup_steps ({warmup}) < max_steps ({steps})")


def check_validation_interval(cfg: Mapping[str, Any]) -> None:
    """A run in parts (``task.micro_batches`` > 1) validates every N optimizer steps, never within one."""
    every, micro = cfg["trainer"].get("val_check_interval"), cfg["task"]["micro_batches"]
    if micro > 1 and type(every) is not int:
        raise UserError(f"trainer.val_check_interval={every!r} (a fraction of an epoch) with task.micro_batches="
                        f"{micro} could validate between the parts of a step: validate every N steps with "
                        f"task.eval_every=N instead")


def physical_memory() -> int | None:
    """Bytes of memory this machine has, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(cfg: Mapping[str, Any], memory: int | None = None) -> None:
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


def check_experiment(cfg: Mapping[str, Any], conf_dir: Path | None = None) -> None:
    """Refuse an experiment with per-task settings (``conf/experiment/<name>/``) that has none for this task:
    Hydra's optional include would skip them, and the run would be the full protocol under the experiment's tag."""
    name, task = cfg.get("experiment"), cfg["task"]["name"]
    folder = Path(conf_dir or CONF_DIR) / "experiment" / str(name)
    if not name or not folder.is_dir() or (folder / f"{task}.yaml").is_file():
        return
    covered = ", ".join(sorted(p.stem for p in folder.glob("*.yaml")))
    raise UserError(f"experiment={name} has no settings for task={task} (no conf/experiment/{name}/{task}.yaml), "
                    f"so it would run task {task}'s full protocol tagged {name!r}. It covers: {covered}. Drop "
                    f"experiment={name}, or add that file (conf/experiment/README.md)")


def split_batch(batch_size: int, micro_batches: int, processes: int) -> int:
    """Examples per forward pass: ``task.batch_size`` split into ``task.micro_batches`` equal parts on each of
    ``processes`` DDP ranks; a UserError when they do not split it."""
    if batch_size % (micro_batches * processes):
        raise UserError(f"task.batch_size={batch_size} is the batch of one optimizer step over all processes: it must "
                        f"split into {processes} process(es) x task.micro_batches={micro_batches} equal parts; pick a "
                        f"batch size that {micro_batches * processes} divides, or another trainer.devices / num_nodes")
    return batch_size // (micro_batches * processes)


def check_processes(cfg: Mapping[str, Any]) -> None:
    """A batch that the run's DDP ranks cannot share is refused before any process starts, where the config
    names the count (``trainer.devices`` as a number or a list, times ``trainer.num_nodes``)."""
    devices, nodes = cfg["trainer"].get("devices", 1), cfg["trainer"].get("num_nodes", 1)
    if isinstance(devices, (list, tuple)):
        devices = len(devices)
    if is_count(devices, 1) and is_count(nodes, 1):
        split_batch(cfg["task"]["batch_size"], cfg["task"]["micro_batches"], devices * nodes)


def check_training_steps(cfg: Mapping[str, Any]) -> None:
    """Lightning settings that train no step at all (``+trainer.max_epochs=0``, ``+trainer.limit_train_batches=0``,
    ``trainer.max_steps=0``) are refused: the run would test an untrained model and, but for the check after
    fitting (``lra.run.train.refuse_short_fit``), record it completed. A run is as long as ``task.max_steps``."""
    for key in NO_STEP_KEYS:
        value = cfg["trainer"].get(key)
        if is_number(value) and value == 0:
            raise UserError(f"trainer.{key}={value!r} trains no step, so the run would only test an untrained model: "
                            f"drop it; a run trains task.max_steps={cfg['task']['max_steps']} optimizer steps, and "
                            f"task.max_steps=N (with task.eval_every) shortens it")
