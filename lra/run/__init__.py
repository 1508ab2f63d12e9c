"""Run management: how a run is started, kept and recorded, above the model and tasks it trains (``lra``).

``run.py`` and Hydra (``hydra_hooks``, ``overrides``), the training run itself (``train``, its ``callbacks``,
``checkpoints`` and ``loggers``), one run per folder (``same_run``, ``run_files``, ``outputs``), records
(``record``, ``record_compat``) and the machine (``machine``, ``threads``, ``allocator``, ``subnormals``,
``disk``). These modules import the model and task layer (``lra.settings``, ``lra.build``, ...); no module of that
layer imports them (``tests/test_layout.py``).
"""
