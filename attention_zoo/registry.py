"""Registry of attention mechanisms: ``register``, ``build``, ``available``.

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
"""

from __future__ import annotations

import fnmatch
import inspect
import operator

from torch import nn

_REGISTRY: dict[str, type[nn.Module]] = {}
_BUILD_ARGS = ("head_dim", "num_heads", "max_len")
_COMPARISONS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


def register(name: str):
    """Class decorator: add an attention module under a short, lower-case, stable ``name``."""

    def decorator(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _REGISTRY:
            raise ValueError(f"attention {name!r} is already registered by {_REGISTRY[name].__qualname__}")
        if name != name.lower():
            raise ValueError(f"attention names are lower-case, got {name!r}")
        cls.registry_name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def refuse_out_of_range(cls: type[nn.Module], **values: float) -> None:
    """A ``ValueError`` naming the first of ``values`` outside the range the class declares in ``option_ranges``
    (``{"eps": "> 0", "p": ">= 0 and < 1"}``): its constructor calls this, so the one declaration is both what it
    refuses and what ``lra.attention_options`` reads from the source to refuse before torch loads."""
    for key, value in values.items():
        spec = cls.option_ranges[key]
        parts = [part.split() for part in spec.split(" and ")]
        if not all(_COMPARISONS[symbol](value, float(bound)) for symbol, bound in parts):
            raise ValueError(f"{cls.registry_name} needs {key} {spec}, got {key}={value!r}")


def available(pattern: str = "*") -> list[str]:
    """Registered names matching a glob ``pattern``, sorted."""
    return sorted(n for n in _REGISTRY if fnmatch.fnmatch(n, pattern))


def get(name: str) -> type[nn.Module]:
    """The class registered as ``name``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown attention {name!r}; valid names: {', '.join(available())}") from None


def options(name: str) -> dict[str, object]:
    """Keyword options of ``name`` with their defaults (excluding head_dim, num_heads, max_len)."""
    params = inspect.signature(get(name).__init__).parameters
    return {
        p.name: p.default
        for p in params.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in _BUILD_ARGS
    }


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
