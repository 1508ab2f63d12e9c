"""One run's settings as one frozen, typed value: ``Run``, parsed once from the composed config.

``Run.parse(config)`` completes the config (an optional setting left out takes its default, declared here once:
records and checkpoints then carry every setting), checks it (every setting's type, range and relations, declared
on its field with ``lra.setting_rules``; the attention's options against what its class declares; the experiment's
coverage of the task; the machine's memory) and returns the ``Run`` that ``lra.run.train``, ``lra.build``, the data
and task modules, the schedules, the analyses and the benchmarks take. A refusal is one line naming the key and the
fix. The values derived from the settings (batch sizes, Lightning's ``Trainer`` arguments) and the run's identity
are its properties and methods. ``Run.read(config)`` builds one without the checks, from a config written earlier
(a record's, a checkpoint's: ``lra.run.record_compat.upgrade``) or composed only to compare with.

``conf/`` holds the values: the protocol's, per task and per experiment. Keys a section does not declare stay in
its ``own`` mapping (a task's own keys such as ``ar``'s ``seq_len``, the generator options ``data.generate``); the
attention's ``options`` are the mechanism's constructor options; ``trainer`` is any Lightning ``Trainer`` argument.
Why dataclasses that the composed config is checked against, not a Hydra structured config: docs/design.md,
section 5. No torch here: ``run.py`` checks before torch loads.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

from attention_zoo.registry import option_problem
from lra_base.errors import UserError

from . import checks, identity
from .setting_rules import (
    check_fields,
    check_missing,
    default_of,
    fraction,
    has_default,
    integer,
    is_number,
    must,
    number,
    relation,
    rules,
    schema_fields,
    section_schema,
)

Schedule = Literal["linear", "constant", "rsqrt", "cosine", "onecycle"]  # task.optim.schedule (lra/schedules.py)
Pooling = Literal["mean", "cls", "none", "padded_mean"]  # model.pooling (lra/model.py)
Batching = Literal["random", "length_grouped"]  # task.batching (lra/sampling.py)
MAX_SEED = checks.MAX_SEED


def own() -> Any:
    """The field that keeps a section's keys the schema does not declare."""
    return field(default_factory=dict, metadata={"own": True})


@dataclass(frozen=True)
class Optim:
    """``task.optim``: AdamW and its per-step schedule (``lra/schedules.py``)."""

    lr: float = field(metadata=rules(number(0, strict=True)))
    weight_decay: float = field(metadata=rules(number(0, strict=False)))
    betas: list = field(metadata=rules(must("two numbers in [0, 1), e.g. [0.9, 0.999]", checks.two_betas)))
    eps: float = field(metadata=rules(number(0, strict=True)))
    warmup_steps: int = field(metadata=rules(integer(0)))
    schedule: Schedule
    cycle_steps: int | None = field(metadata=rules(integer(1, null=True, wants="an integer >= 1")))  # null: max_steps
    cycle_momentum: bool = True  # onecycle: beta1 cycles against the lr (the PyTorch ports); false: fixed beta1
    own: dict = own()


@dataclass(frozen=True)
class Data:
    """``task.data``: where the prepared data lives and how it is loaded; ``own``: the generator's options
    (``generate``) or, for data made in memory (``ar``), its split sizes and seed."""

    root: str
    num_workers: int = field(default=0, metadata=rules(integer(0)))  # DataLoader worker processes
    pad_multiple: int = field(default=1, metadata=rules(integer(1)))  # pad each batch to a multiple of this length
    limit: dict | None = field(default=None, metadata=rules(relation(  # {split: count}: a fixed random subset
        lambda value, _: checks.limit_problem(value) is None, lambda key, value, _: checks.limit_problem(value))))
    eval_batch_size: int | None = field(default=None, metadata=rules(integer(1, null=True)))  # null: the micro-batch
    own: dict = own()

    @property
    def generate(self) -> dict[str, Any]:
        """The generator's options (``task.data.generate``), empty for a task that is not generated."""
        return dict(self.own.get("generate") or {})


@dataclass(frozen=True)
class Task:
    """``task``: one task's data, sizes, steps and optimizer (``conf/task/<name>.yaml``)."""

    name: str
    max_len: int = field(metadata=rules(integer(1)))
    num_classes: int = field(metadata=rules(integer(2)))  # one class is nothing to learn (cross-entropy is 0)
    batch_size: int = field(metadata=rules(integer(1)))  # the optimizer step's examples over all processes
    micro_batches: int = field(metadata=rules(must(  # each batch as that many accumulated parts: the same gradient
        lambda task: f"a positive integer that divides task.batch_size={task['batch_size']} (each batch runs as that "
                     f"many equal parts)",
        lambda value, task: checks.is_count(value, 1) and task["batch_size"] % value == 0)))
    batching: Batching = field(metadata=rules(relation(checks.groups_lengths_it_has, checks.no_lengths_to_group)))
    batching_pool: int = field(metadata=rules(integer(1, wants="an integer >= 1 (batches sorted by length together)")))
    max_steps: int = field(metadata=rules(integer(1)))
    eval_every: int = field(metadata=rules(integer(1)))  # validation (and last.ckpt) every this many optimizer steps
    optim: Optim
    data: Data
    causal: bool = False  # queries read only the past (ar)
    truncate: bool = False  # cut sequences longer than max_len (Text, Retrieval: as LRA does); else refuse them
    own: dict = own()  # a task's own keys (ar: seq_len, num_pairs, vocab_size)


@dataclass(frozen=True)
class Model:
    """``model``: the encoder (``lra/model.py``)."""

    dim: int = field(metadata=rules(integer(1)))
    depth: int = field(metadata=rules(integer(1)))
    heads: int = field(metadata=rules(integer(1), relation(checks.heads_split_dim, checks.dim_not_divisible)))
    ffn_dim: int = field(metadata=rules(integer(1)))
    dropout: float = field(metadata=rules(fraction()))
    pooling: Pooling
    qkv_dim: int | None = field(metadata=rules(must(  # the width of q/k/v apart from dim (LRA's JAX configs)
        lambda model: f"null (= model.dim) or a positive multiple of model.heads={model['heads']}",
        lambda value, model: value is None or (checks.is_count(value, 1) and value % model["heads"] == 0))))
    attention_dropout: float = field(metadata=rules(fraction()))
    embed_init_std: float | None = field(metadata=rules(must(
        "null (nn.Embedding's N(0, 1)) or a positive number (the PyTorch ports: 0.02)",
        lambda value, _: value is None or (is_number(value) and value > 0))))
    checkpoint_blocks: bool
    short_conv: int | None = field(default=None, metadata=rules(integer(2, null=True)))  # lra/short_conv.py
    own: dict = own()


@dataclass(frozen=True)
class Attention:
    """``attention``: the mechanism's registered name and its constructor options (``attention_zoo``)."""

    name: str
    options: dict = own()  # checked against what the class declares (attention_zoo.option_problem)


@dataclass(frozen=True)
class Checkpoint:
    """``checkpoint``: what the run saves besides its best checkpoint."""

    save_last: bool  # last.ckpt at every validation, for resuming an interrupted run
    own: dict = own()


@dataclass(frozen=True)
class Run:
    """The whole run (``conf/config.yaml`` and its groups). Build one with ``Run.parse``."""

    seed: int = field(metadata=rules(integer(0, MAX_SEED)))
    experiment: str | None  # the experiment that set the other values; null: none
    tag: str | int  # names the run folder's last part
    data_dir: str
    rerun: bool
    reuse_freed_memory: bool
    checkpoint: Checkpoint
    model: Model
    task: Task
    attention: Attention
    trainer: dict = field(metadata=rules(relation(  # any Lightning Trainer argument (checks.trainer_problem)
        lambda value, _: checks.trainer_problem(value) is None, lambda key, value, _: checks.trainer_problem(value))))
    flush_subnormals: bool  # numbers below 1.18e-38 as 0 on x86 CPUs (lra.run.subnormals)
    own: dict = own()  # e.g. ``analysis``: the analysis that asked for the run

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> Run:
        """The checked ``Run`` of a resolved config (``lra.config.compose``): a ``UserError`` naming the first setting
        that is missing or breaks its type, range or relations. Each optional setting the config leaves out takes
        its default."""
        check_missing(config, cls)
        run = _section(cls, config)
        complete = run.config()
        checks.check_names(complete)
        check_fields(complete, cls)
        if (problem := option_problem(run.attention.name, run.attention.options)) is not None:
            raise UserError(problem)
        checks.check_relations(complete)
        return run

    @classmethod
    def read(cls, config: Mapping[str, Any]) -> Run:
        """The ``Run`` a config describes, unchecked: one written earlier or composed to compare with. An optional
        setting it leaves out takes its default, a required one None (``lra.run.record_compat.upgrade`` fills what
        older layouts left out)."""
        return _section(cls, config)

    def asked_by(self, analysis: str) -> Run:
        """This run marked as an analysis's (``config.analysis``, where-or-how): ``results`` leaves its record to the
        analysis's own table."""
        return replace(self, own={**self.own, "analysis": analysis})

    def config(self) -> dict[str, Any]:
        """The settings as the config's nested plain mapping: what records and checkpoints keep."""
        return _layout(self)

    # derived values

    def micro_batch_size_on(self, processes: int) -> int:
        """Examples per forward pass: ``task.batch_size`` split into ``task.micro_batches`` equal parts on each of
        ``processes`` DDP ranks, so an optimizer step sees ``task.batch_size`` examples however many run it."""
        return checks.split_batch(self.task.batch_size, self.task.micro_batches, processes)

    @property
    def micro_batch_size(self) -> int:
        return self.micro_batch_size_on(1)

    @property
    def eval_batch_size(self) -> int:
        """Examples per validation or test batch of a process: ``task.data.eval_batch_size``, else the training
        micro-batch of one process."""
        return self.task.data.eval_batch_size or self.micro_batch_size

    @property
    def validation_interval(self) -> Any:
        """Optimizer steps between validations: ``trainer.val_check_interval`` (``task.eval_every``), except that a run
        shorter than it validates once, at its last step (``trainer.max_steps``), so it has a checkpoint to test."""
        every, steps = self.trainer.get("val_check_interval"), self.trainer.get("max_steps")
        if not self.trainer.get("fast_dev_run") and type(every) is int and type(steps) is int and 0 < steps < every:
            return steps
        return every

    @property
    def trainer_arguments(self) -> dict[str, Any]:
        """Lightning ``Trainer`` arguments: ``trainer`` with the validation interval counted in optimizer steps
        (``validation_interval``). A computation only: ``lra.build`` refuses what the machine cannot run and
        ``lra.run.train`` says when the interval was shortened.

        ``task.micro_batches`` n > 1 accumulates n micro-batches into each optimizer step; Lightning counts the
        interval in micro-batches, so it is scaled to stay ``task.eval_every`` optimizer steps."""
        args = dict(self.trainer)
        args["use_distributed_sampler"] = False  # under DDP the data module shards its own orders: exact resume
        every = self.validation_interval
        if every != args.get("val_check_interval"):
            args["val_check_interval"] = every
        if self.task.micro_batches > 1:
            args["accumulate_grad_batches"] = self.task.micro_batches
            args["val_check_interval"] = every * self.task.micro_batches
        return args

    # which run this is (lra.identity)

    def identity(self) -> dict[str, Any]:
        """The settings that change what the run computes, as ``{"task.optim.lr": 0.001, ...}`` sorted by key:
        everything but ``lra.identity.WHERE_OR_HOW``, null values and ``ABSENT_AT`` 's."""
        return identity.settings_identity(self.config())

    def digest(self) -> str:
        """12 hex digits naming the identity: two runs with one digest compute the same run."""
        return identity.digest(self.identity())

    def differences(self, other: Run) -> list[tuple[str, Any, Any]]:
        """``(key, this run's value, the other's)`` for every identity setting where the two differ, by key
        (``lra.identity.ABSENT`` for a missing one). A run recorded before a setting existed is compared as
        ``lra.run.record_compat.upgrade`` reads its config: at the value it ran with."""
        return identity.compare(self.identity(), other.identity())


def _section(schema: type, config: Mapping[str, Any]) -> Any:
    """The ``schema`` dataclass of one section of a config, its sections below it too: each setting the config leaves
    out at its default (None without one), each key the schema does not declare in ``own``."""
    values, declared = {}, schema_fields(schema)
    for name, (spec, hint) in declared.items():
        if spec.metadata.get("own"):
            values[name] = {key: copy.deepcopy(value) for key, value in config.items() if key not in declared}
        elif name not in config:
            values[name] = default_of(spec) if has_default(spec) else None
        elif (inner := section_schema(hint)) is not None and isinstance(config[name], Mapping):
            values[name] = _section(inner, config[name])
        else:
            values[name] = copy.deepcopy(config[name])
    return schema(**values)


def _layout(section: Any) -> dict[str, Any]:
    """A section (a dataclass of the schema) as the config's plain mapping, its ``own`` keys beside the declared."""
    plain: dict[str, Any] = {}
    for spec in fields(section):
        value = getattr(section, spec.name)
        if spec.metadata.get("own"):
            plain.update(copy.deepcopy(value))
        else:
            plain[spec.name] = _layout(value) if is_dataclass(value) else copy.deepcopy(value)
    return plain

