"""Benchmarks (not tests): whole-run estimates, the PyTorch LRA port's step beside ours, step memory.

Run them on a quiet machine, e.g. ``python -m benchmarks.run_estimate``; each that writes a CSV writes it under
``outputs/tables/bench/``, or under ``results/tables/bench/`` (the committed copy) with ``--committed``
(``lra.outputs``).
"""

import argparse


def attention_name(value: str) -> str:
    """argparse ``type`` of ``--attentions``: a registered name; a Hydra override there is named as one (``nargs='+'``
    takes every word after the option, so overrides go before it or after ``--``)."""
    import attention_zoo

    if "=" in value:
        raise argparse.ArgumentTypeError(f"{value!r} is a Hydra override, not an attention: give overrides before "
                                         "--attentions or after `--` (e.g. --attentions softmax -- model.dim=128)")
    if value not in attention_zoo.available():
        raise argparse.ArgumentTypeError(f"unknown attention {value!r}; valid: {', '.join(attention_zoo.available())}")
    return value
