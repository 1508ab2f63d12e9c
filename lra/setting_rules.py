"""How a setting's range, and its relation to the settings beside it, is declared once on its field of the schema
(``lra.settings``), and how a composed config is checked against it.

A field's metadata holds its ``Rule`` s: ``integer(1)``, ``number(0, strict=True)``, ``fraction()``, or a
``relation`` with a message of its own. A rule sees the value and the section that holds it (``model`` for
``model.dim``), so ``task.micro_batches`` can name ``task.batch_size`` in one rule. A field's default is what a config
that leaves the setting out means (``lra.settings.Run.read`` fills it in). A field without rules is checked
against its annotation: a ``Literal`` lists its values (``must be one of mean, cls, none, padded_mean``), ``bool``
says ``true or false``. Every message is one line, ``<key>=<value>: must be ...`` unless the rule words its own.
Standard library only: ``run.py`` checks before torch loads.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from lra_base.errors import UserError


@dataclass(frozen=True)
class Rule:
    """``ok(value, section)``: whether the value may stand; ``says(key, value, section)``: the refusal's line."""

    ok: Callable[[Any, Mapping[str, Any]], bool]
    says: Callable[[str, Any, Mapping[str, Any]], str]


def rules(*declared: Rule) -> dict[str, tuple[Rule, ...]]:
    """A field's metadata: its rules, checked in order (the first is its type and range)."""
    return {"rules": declared}


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def must(wants: str | Callable[[Mapping[str, Any]], str], ok: Callable[[Any, Mapping[str, Any]], bool]) -> Rule:
    """``<key>=<value>: must be <wants>`` unless ``ok``; ``wants`` may read the section (``task.batch_size``)."""
    return Rule(ok, lambda key, value, section: f"{key}={value!r}: must be "
                                                 f"{wants(section) if callable(wants) else wants}")


def integer(low: int, high: int | None = None, *, null: bool = False, wants: str | None = None) -> Rule:
    """An integer in ``[low, high]`` (or null, with ``null``); says ``an integer >= low`` unless ``wants``."""
    if wants is None:
        wants = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}"
        wants = f"null or {wants}" if null else wants
    return must(wants, lambda value, _: (value is None and null)
                or (is_integer(value) and value >= low and (high is None or value <= high)))


def number(low: float, *, strict: bool, null: bool = False, wants: str | None = None) -> Rule:
    """A finite number above ``low`` (``strict``) or at least ``low``."""
    wants = wants or f"a finite number {'>' if strict else '>='} {low:g}"

    def ok(value: Any, _: Mapping[str, Any]) -> bool:
        if value is None:
            return null
        return is_number(value) and math.isfinite(value) and (value > low if strict else value >= low)

    return must(wants, ok)


def fraction() -> Rule:
    """A number in ``[0, 1)``: a dropout rate."""
    return must("a number in [0, 1)", lambda value, _: is_number(value) and 0.0 <= value < 1.0)


def relation(ok: Callable[[Any, Mapping[str, Any]], bool],
             says: Callable[[str, Any, Mapping[str, Any]], str]) -> Rule:
    """A rule with a message of its own (``model.dim=65 is not divisible by model.heads=2: ...``)."""
    return Rule(ok, says)


def schema_fields(schema: type) -> dict[str, tuple[Any, Any]]:
    """``{name: (field, annotation)}`` of a dataclass, annotations resolved."""
    hints = typing.get_type_hints(schema)
    return {f.name: (f, hints[f.name]) for f in fields(schema) if f.init}


def has_default(spec: Any) -> bool:
    return spec.default is not MISSING or spec.default_factory is not MISSING


def default_of(spec: Any) -> Any:
    return spec.default_factory() if spec.default_factory is not MISSING else spec.default


def section_schema(hint: Any) -> type | None:
    """The dataclass a field's annotation names (a section of the config), else None."""
    return hint if is_dataclass(hint) else None


def optional_keys(schema: type, where: str = "") -> dict[str, tuple[str, ...]]:
    """``{"task": ("causal", "truncate"), ...}``: per section, the keys a config may leave out (they have a default),
    so ``+task.truncate=...`` may add them (``lra.run.overrides``)."""
    found: dict[str, tuple[str, ...]] = {}
    declared = schema_fields(schema)
    optional = tuple(name for name, (spec, hint) in declared.items()
                     if has_default(spec) and not spec.metadata.get("own") and section_schema(hint) is None)
    if optional:
        found[where] = optional
    for name, (_, hint) in declared.items():
        if (inner := section_schema(hint)) is not None:
            found.update(optional_keys(inner, f"{where}.{name}" if where else name))
    return found


def check_missing(config: Mapping[str, Any], schema: type, where: str = "") -> None:
    """A UserError naming the first setting without a default that ``config`` lacks (every file in ``conf/`` sets
    it: a ``~key`` override or a hand-written config dropped it)."""
    for name, (spec, hint) in schema_fields(schema).items():
        if spec.metadata.get("own"):
            continue
        key = f"{where}{name}"
        if name not in config and not has_default(spec):
            raise UserError(f"{key} is missing: every config in conf/ sets it; set it (+{key}=...)")
        if (inner := section_schema(hint)) is not None and isinstance(config.get(name), Mapping):
            check_missing(config[name], inner, key + ".")


def check_fields(config: Mapping[str, Any], schema: type, where: str = "") -> None:
    """A UserError naming the first setting that breaks its rules (or, without rules, its annotation), in the
    schema's order, each section's fields before the sections below it."""
    declared = schema_fields(schema)
    for name, (spec, hint) in declared.items():
        if spec.metadata.get("own") or name not in config:
            continue
        key, value = f"{where}{name}", config[name]
        if section_schema(hint) is not None:
            if not isinstance(value, Mapping):
                raise UserError(f"{key}={value!r}: must be a group of keys")
            continue
        declared_rules = spec.metadata.get("rules", ())
        typed = declared_rules and not is_literal(hint)  # a range rule says its type too ("an integer >= 1")
        for rule in declared_rules if typed else (annotation_rule(hint), *declared_rules):
            if not rule.ok(value, config):
                raise UserError(rule.says(key, value, config))
    for name, (_, hint) in declared.items():
        if (inner := section_schema(hint)) is not None and name in config:
            check_fields(config[name], inner, f"{where}{name}.")


def is_literal(hint: Any) -> bool:
    return typing.get_origin(hint) is typing.Literal


def annotation_rule(hint: Any) -> Rule:
    """The rule an annotation implies: one of a ``Literal`` 's values, or a value of one of its types."""
    args = typing.get_args(hint) if _is_union(hint) else (hint,)
    nullable = type(None) in args
    kinds = [a for a in args if a is not type(None)]
    if len(kinds) == 1 and is_literal(kinds[0]):
        values = typing.get_args(kinds[0])
        names = ", ".join(map(str, values))
        return must(f"null or one of {names}" if nullable else f"one of {names}",
                    lambda value, _: (value is None and nullable) or (not isinstance(value, bool) and value in values))
    words = " or ".join(KIND_WORDS[kind] for kind in kinds)
    return must(f"null or {words}" if nullable else words,
                lambda value, _: (value is None and nullable) or any(fits(value, kind) for kind in kinds))


KIND_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
              dict: "a group of keys"}


def fits(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return is_integer(value)
    if kind is float:
        return is_number(value)
    if kind is dict:
        return isinstance(value, Mapping)
    return isinstance(value, kind)


def _is_union(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
