"""What older records and checkpoints mean by what they leave out.

``IMPLICIT``: settings added to ``conf/`` after runs were recorded, with the value those runs used without naming
it. A record or checkpoint that lacks one of these keys ran with that value: the protocol check of ``results``
and the run-identity comparison (``lra.identity.differences``) read it so, and a setting added later gets its
line here, with the value that reproduces the runs before it.
"""

from __future__ import annotations

IMPLICIT = {"task.optim.schedule": "linear", "model.attention_dropout": 0.0,
            "task.data.generate.contour_length": 14, "task.data.generate.close_brackets": True,
            "task.batching": "random", "task.batching_pool": 50}
