"""A zoo of attention mechanisms behind one registry and one call contract.

``available()`` lists the names, ``build(name, head_dim=..., num_heads=..., **options)`` makes a module
called as ``module(q, k, v, key_padding_mask=None)`` on ``(B, H, N, head_dim)`` tensors. Every public
module of this package but the ``new`` command (``python -m attention_zoo.new NAME --like linear`` writes a
mechanism's two files) is imported here, so a new mechanism is one new file that calls ``@register`` (and its yaml).
"""

import importlib
import pkgutil

from .registry import available, build, extra_inputs, get, options, register

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_") and _info.name != "new":
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["available", "build", "extra_inputs", "get", "options", "register"]
