"""Benchmarks (not tests): whole-run estimates, the PyTorch LRA port's step beside ours, step memory.

Run them on a quiet machine, e.g. ``python -m benchmarks.run_estimate``; each that writes a CSV writes it under
``outputs/tables/bench/``, or under ``results/tables/bench/`` (the committed copy) with ``--committed``
(``lra.outputs``).
"""
