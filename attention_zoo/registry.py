"""Registry of attention mechanisms: ``register``, ``build``, ``available``, and ``option_problem``, which checks a
mechanism's options against its class's declaration read from the source, without torch.

Every mechanism is an ``nn.Module`` called as ``module(q, k, v, key_padding_mask=None)`` with
``q, k, v`` of shape ``(B, H, N, head_dim)`` and ``key_padding_mask`` ``(B, N)`` bool, True for real
tokens. Constructors take ``head_dim``, ``num_heads`` and ``max_len`` plus keyword-only options; an
unknown name or option is a ``ValueError`` that lists what is valid.

Block-level parts: a mechanism whose paper projects the block input more than three times (PolaFormer's
output gate ``g``) lists the extra projections' names in its instance attribute ``extra_inputs`` (a tuple
of keyword names, default none). The block then projects its normalised input ``3 + len(extra_inputs)``
times and passes each extra projection, shaped like ``q`` ``(B, H, N, head_dim)``, as that keyword:
``module(q, k, v, key_padding_mask=mask, gate=g)``. ``extra_inputs(module)`` reads the declaration; a
mechanism called without its extra inputs (benchmarks, analyses) must still work (the part is then left
out), so the block needs no special case for any mechanism.

Importing this module loads no torch and no mechanism: the first question about what is registered imports every
public module of the package (``load_mechanisms``), so that ``run.py`` checks options in about a second.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
import math
import operator
import pkgutil
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # no torch at import: lra.settings asks ``option_problem`` before torch loads
    from torch import nn

_REGISTRY: dict[str, type[nn.Module]] = {}
_BUILD_ARGS = ("head_dim", "num_heads", "max_len")
_COMPARISONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_ZOO_DIR = Path(__file__).resolve().parent
_NOT_MECHANISMS = ("registry", "new")  # public modules of the package that register nothing
NO_DEFAULT = object()  # a default that is not a literal: its type is not checked
_KINDS = ((bool, "true or false"), (int, "an integer"), (float, "a number"), (str, "a string"))  # bool before int


def register(name: str):
    """Class decorator: add an attention module under a short, lower-case, stable ``name``; a class from outside the
    package may not take a name of the package's, even before the registry loaded it."""

    def decorator(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _REGISTRY:
            raise ValueError(f"attention {name!r} is already registered by {_REGISTRY[name].__qualname__}")
        if not cls.__module__.startswith(f"{__package__}.") and name in declared():
            raise ValueError(f"attention {name!r} is already the name of a mechanism of {__package__} "
                             f"({_ZOO_DIR.name}/{declared_in()[name]}.py): register {cls.__qualname__} under another")
        if name != name.lower():
            raise ValueError(f"attention names are lower-case, got {name!r}")
        cls.registry_name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def in_range(value: float, spec: str) -> bool:
    """Whether ``value`` meets every comparison of a range ``spec`` (``"> 0"``, ``">= 0 and < 1"``)."""
    return all(_COMPARISONS[symbol](value, float(bound)) for symbol, bound in (p.split() for p in spec.split(" and ")))


def refuse_out_of_range(cls: type[nn.Module], **values: float) -> None:
    """A ``ValueError`` naming the first of ``values`` outside the range the class declares in ``option_ranges``
    (``{"eps": "> 0", "p": ">= 0 and < 1"}``): its constructor calls this, so the one declaration is both what it
    refuses and what ``option_problem`` reads from the source to refuse before torch loads."""
    for key, value in values.items():
        spec = cls.option_ranges[key]
        if not in_range(value, spec):
            raise ValueError(f"{cls.registry_name} needs {key} {spec}, got {key}={value!r}")


@cache
def load_mechanisms() -> None:
    """Import every public module of the package once, each registering its classes: the first question to the
    registry does it, so that importing ``attention_zoo.registry`` alone loads no torch."""
    for name in _mechanism_modules():
        try:
            importlib.import_module(f"{__package__}.{name}")
        except Exception as err:  # not a ValueError a caller takes for a refused option: the file is broken
            raise ImportError(f"{_ZOO_DIR.name}/{name}.py failed to load ({type(err).__name__}: {err})") from err


def _mechanism_modules() -> list[str]:
    """The package's public modules but ``registry`` and ``new``: one or more mechanisms each."""
    return [info.name for info in pkgutil.iter_modules([str(_ZOO_DIR)])
            if not info.name.startswith("_") and info.name not in _NOT_MECHANISMS]


def available(pattern: str = "*") -> list[str]:
    """Registered names matching a glob ``pattern``, sorted."""
    load_mechanisms()
    return sorted(n for n in _REGISTRY if fnmatch.fnmatch(n, pattern))


def get(name: str) -> type[nn.Module]:
    """The class registered as ``name``."""
    load_mechanisms()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown attention {name!r}; valid names: {', '.join(available())}") from None


def options(name: str) -> dict[str, object]:
    """Keyword options of ``name`` with their defaults (excluding head_dim, num_heads, max_len)."""
    return _class_options(get(name))


def _class_options(cls: type[nn.Module]) -> dict[str, object]:
    """The keyword-only options of ``cls``'s constructor with their defaults (``inspect.Parameter.empty``: none)."""
    params = inspect.signature(cls.__init__).parameters
    return {p.name: p.default for p in params.values() if p.kind is p.KEYWORD_ONLY and p.name not in _BUILD_ARGS}


@cache
def declared() -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """``{name: (options with their literal defaults, option_ranges)}`` of every ``@register("name")`` class of the
    package, read from its source (``ast``) without importing it: what ``options`` and ``refuse_out_of_range`` see
    once torch loads (tests check they agree)."""
    return {name: (_init_options(node), _class_ranges(node)) for name, (_, node) in sorted(_declarations().items())}


def declared_in() -> dict[str, str]:
    """``{name: the module that registers it}`` for the package's mechanisms, from the source."""
    return {name: module for name, (module, _) in _declarations().items()}


@cache
def _declarations() -> dict[str, tuple[str, ast.ClassDef]]:
    found = {}
    for module in _mechanism_modules():
        for node in ast.parse((_ZOO_DIR / f"{module}.py").read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and (name := _registered_name(node)) is not None:
                found[name] = (module, node)
    return found


def _registered_name(cls: ast.ClassDef) -> str | None:
    for decorator in cls.decorator_list:
        if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register"
                and decorator.args and isinstance(decorator.args[0], ast.Constant)):
            return str(decorator.args[0].value)
    return None


def _init_options(cls: ast.ClassDef) -> dict[str, Any]:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return {arg.arg: _literal(default) for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults)
                    if arg.arg not in _BUILD_ARGS}
    return {}


def _literal(node: ast.expr | None) -> Any:
    try:
        return NO_DEFAULT if node is None else ast.literal_eval(node)
    except ValueError:
        return NO_DEFAULT


def _class_ranges(cls: ast.ClassDef) -> dict[str, str]:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "option_ranges" for t in node.targets):
            return dict(ast.literal_eval(node.value))
    return {}


def option_problem(name: str, given: dict[str, Any]) -> str | None:
    """What is wrong with the options ``given`` to the mechanism ``name`` as its class declares them (an unknown
    option, one not of its default's type, one outside its ``option_ranges``), as one line starting
    ``attention.<option>``; None when nothing is, or when ``name`` is unknown (refused where it is built, after torch
    loads, with the valid names). The package's mechanisms are read from the source, without importing them; one
    from outside the package that registered already (its module imported first) is read from its class."""
    declaration = _declaration(name)
    if declaration is None:
        return None
    defaults, ranges = declaration
    for key, value in given.items():
        if key not in defaults:
            valid = ", ".join(f"{k}={v!r}" for k, v in defaults.items() if v is not NO_DEFAULT)
            return f"attention.{key}: attention={name} has no option {key!r}; valid options: {valid}"
        if (problem := _type_problem(name, key, value, defaults[key])) is not None:
            return problem
        spec = ranges.get(key)
        if spec and isinstance(value, (int, float)) and not (math.isfinite(value) and in_range(value, spec)):
            return f"attention.{key}={value!r}: must be {spec} for attention={name} (default {key}={defaults[key]!r})"
    return None


def declared_options(name: str) -> dict[str, Any] | None:
    """The options ``name`` takes, with their defaults, read without torch (an outside mechanism's from its registered
    class); None for an unknown name."""
    found = _declaration(name)
    return None if found is None else found[0]


def _declaration(name: str) -> tuple[dict[str, Any], dict[str, str]] | None:
    """``(options with defaults, option_ranges)`` of ``name``: the package's from the source, an outside mechanism's
    from its registered class (no mechanism of the package is loaded for it); None for an unknown name."""
    if name in declared():
        return declared()[name]
    cls = _REGISTRY.get(name)
    if cls is None:
        return None
    options = {key: NO_DEFAULT if default is inspect.Parameter.empty else default
               for key, default in _class_options(cls).items()}
    return options, dict(getattr(cls, "option_ranges", {}))


def _type_problem(name: str, key: str, value: Any, default: Any) -> str | None:
    """An option must have its default's type (an int is a float too); a null or non-literal default is free."""
    kind, words = next(((k, w) for k, w in _KINDS if isinstance(default, k)), (None, ""))
    if kind is None:
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    ok = ok or (kind is float and isinstance(value, int) and not isinstance(value, bool))
    return None if ok else (f"attention.{key}={value!r}: must be {words} like its default ({key}={default!r}) "
                            f"for attention={name}")


RESERVED_INPUTS = ("q", "k", "v", "key_padding_mask")


def extra_inputs(module: nn.Module) -> tuple[str, ...]:
    """The extra per-head inputs ``module`` takes besides ``q, k, v`` (projections of the block input).

    Raises ``ValueError`` on a declaration that is not a tuple of keyword names distinct from q, k, v and the
    mask.
    """
    names = tuple(getattr(module, "extra_inputs", ()))
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or name in RESERVED_INPUTS:
            raise ValueError(f"{type(module).__qualname__}.extra_inputs must name keyword inputs other than "
                             f"{', '.join(RESERVED_INPUTS)}; got {names!r}")
    return names


def build(name: str, *, head_dim: int, num_heads: int, max_len: int | None = None, **opts) -> nn.Module:
    """Construct the attention ``name``; raises ``ValueError`` on an unknown name or option."""
    cls = get(name)
    valid = options(name)
    unknown = sorted(set(opts) - set(valid))
    if unknown:
        listing = ", ".join(f"{k}={v!r}" for k, v in valid.items()) or "(none)"
        raise ValueError(f"attention {name!r} has no option {', '.join(unknown)}; valid options: {listing}")
    accepted = inspect.signature(cls.__init__).parameters
    base = {"head_dim": head_dim, "num_heads": num_heads, "max_len": max_len}
    return cls(**{k: v for k, v in base.items() if k in accepted}, **opts)
