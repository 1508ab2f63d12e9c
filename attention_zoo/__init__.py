"""A zoo of attention mechanisms behind one registry and one call contract.

``available()`` lists the names, ``build(name, head_dim=..., num_heads=..., **options)`` makes a module
called as ``module(q, k, v, key_padding_mask=None)`` on ``(B, H, N, head_dim)`` tensors.
"""

from . import based, linear, llops, softmax  # noqa: F401  (registration side effects)
from .registry import available, build, get, options, register

__all__ = ["available", "build", "get", "options", "register"]
