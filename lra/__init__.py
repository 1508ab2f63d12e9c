"""LRA tasks, the encoder backbone, and the training run behind ``run.py``.

Importing ``lra`` before torch makes OpenMP's idle threads sleep instead of spinning
(``OMP_WAIT_POLICY=PASSIVE`` unless set): with spinning threads a 2-thread job beside one other busy
process ran ~10x slower on 2 cores (README, "Threads").
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
