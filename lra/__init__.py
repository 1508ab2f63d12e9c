"""LRA tasks, the encoder backbone, and the training run behind ``run.py``.

A run uses as many intra-op threads as there are cores that other processes leave free, re-checked while it
trains (``lra.threads``, docs/benchmarks.md "Threads"), unless ``OMP_NUM_THREADS`` is set.
"""
