"""Benchmarks (not tests): whole-run estimates, the PyTorch LRA port's step beside ours, step memory.

Run them on a quiet machine, e.g. ``python -m benchmarks.run_estimate``; each writes a CSV under
``results/tables/bench/``.
"""
