"""Attention options checked without importing torch: each mechanism's options, defaults and declared ranges are
read from the source of ``attention_zoo`` (``ast``), so a bad ``attention.<option>=...`` is refused in about a
second instead of after the training stack loads.

A mechanism declares ranges in its class body as ``option_ranges = {"eps": "> 0", "degree": ">= 1"}`` (each a
comparison, or several joined by `` and ``); its constructor refuses the same values (tests check they agree).
"""

from __future__ import annotations

import ast
import math
import operator
from functools import cache
from pathlib import Path
from typing import Any

from lra_base.errors import UserError

ZOO_DIR = Path(__file__).resolve().parents[1] / "attention_zoo"
BUILD_ARGS = ("head_dim", "num_heads", "max_len")
NO_DEFAULT = object()  # a default that is not a literal: its type is not checked
COMPARISONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
KINDS = ((bool, "true or false"), (int, "an integer"), (float, "a number"), (str, "a string"))  # bool before int


@cache
def declared(zoo_dir: Path = ZOO_DIR) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """``{name: (options with defaults, option_ranges)}`` of every ``@register("name")`` class in ``zoo_dir``."""
    found = {}
    for path in sorted(zoo_dir.glob("*.py")):
        if path.name.startswith("_") or path.name == "registry.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            name = registered_name(node)
            if name is not None:
                found[name] = (init_options(node), class_ranges(node))
    return found


def registered_name(node: ast.stmt) -> str | None:
    """The name of a ``@register("name")`` class definition, else None."""
    if not isinstance(node, ast.ClassDef):
        return None
    for decorator in node.decorator_list:
        if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register"
                and decorator.args and isinstance(decorator.args[0], ast.Constant)):
            return str(decorator.args[0].value)
    return None


def init_options(cls: ast.ClassDef) -> dict[str, Any]:
    """The keyword-only options of the class's ``__init__`` and their literal defaults."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            options = {}
            for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
                if arg.arg not in BUILD_ARGS:
                    options[arg.arg] = literal(default)
            return options
    return {}


def literal(node: ast.expr | None) -> Any:
    try:
        return NO_DEFAULT if node is None else ast.literal_eval(node)
    except ValueError:
        return NO_DEFAULT


def class_ranges(cls: ast.ClassDef) -> dict[str, str]:
    """The class's ``option_ranges`` literal, or none."""
    for node in cls.body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "option_ranges" for t in node.targets)):
            return dict(ast.literal_eval(node.value))
    return {}


def in_range(value: float, spec: str) -> bool:
    """Whether ``value`` meets every comparison of ``spec`` (``"> 0"``, ``">= 0 and < 1"``)."""
    for part in spec.split(" and "):
        symbol, bound = part.split()
        if not COMPARISONS[symbol](value, float(bound)):
            return False
    return True


def check_attention_options(attention: dict[str, Any], zoo_dir: Path = ZOO_DIR) -> None:
    """Refuse an unknown option, an option not of its default's type and one outside its declared range."""
    name = attention.get("name")
    mechanisms = declared(zoo_dir)
    if name not in mechanisms:
        return  # an unknown name is refused where the registry is loaded, with the valid names
    defaults, ranges = mechanisms[name]
    for key, value in attention.items():
        if key == "name":
            continue
        if key not in defaults:
            valid = ", ".join(f"{k}={v!r}" for k, v in defaults.items() if v is not NO_DEFAULT)
            raise UserError(f"attention.{key}: attention={name} has no option {key!r}; valid options: {valid}")
        check_type(name, key, value, defaults[key])
        spec = ranges.get(key)
        if spec and isinstance(value, (int, float)) and not (math.isfinite(value) and in_range(value, spec)):
            raise UserError(f"attention.{key}={value!r}: must be {spec} for attention={name} "
                            f"(default {key}={defaults[key]!r})")


def check_type(name: str, key: str, value: Any, default: Any) -> None:
    """An option must have its default's type (an int is a float too); a null or non-literal default is free."""
    kind, words = next(((k, w) for k, w in KINDS if isinstance(default, k)), (None, ""))
    if kind is None:
        return
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    ok = ok or (kind is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise UserError(f"attention.{key}={value!r}: must be {words} like its default ({key}={default!r}) "
                        f"for attention={name}")
