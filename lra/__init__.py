"""LRA tasks and the encoder backbone, with a run's settings and build path; the training run behind ``run.py`` is
``lra.run``.

Two layers: ``lra`` holds the model (``model``, ``module``, its parts), the tasks (``tasks/``, ``data``), a run's
settings (``settings``, their checks, identity and composition: ``config``) and the one build path (``build``);
``lra.run`` manages runs (Hydra's hooks, training, checkpoints, records, run folders, the machine) on top of it.
No module of ``lra`` outside ``lra.run`` imports ``lra.run`` (``tests/test_layout.py``).

A run uses as many intra-op threads as there are cores that other processes leave free, re-checked while it
trains (``lra.run.threads``, docs/benchmarks.md "Threads"), unless ``OMP_NUM_THREADS`` is set.
"""
