"""A zoo of attention mechanisms behind one registry and one call contract.

``available()`` lists the names, ``build(name, head_dim=..., num_heads=..., **options)`` makes a module
called as ``module(q, k, v, key_padding_mask=None)`` on ``(B, H, N, head_dim)`` tensors. The registry imports every
public module of this package but ``registry`` and the ``new`` command (``python -m attention_zoo.new NAME --like
linear`` writes a mechanism's two files) the first time it is asked, so a new mechanism is one new file that calls
``@register`` (and its yaml), and importing the package alone loads no torch (``option_problem`` checks options
from the source).
"""

import importlib

from .registry import available, build, extra_inputs, get, option_problem, options, register

__all__ = ["available", "build", "extra_inputs", "get", "option_problem", "options", "register"]


def __getattr__(name: str):
    """A mechanism's module as an attribute (``attention_zoo.llops``), loaded on first use."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
