"""The seed papers' analyses that are not LRA training, one command each: ``python -m analyses.<name>``.

Each writes one record ``outputs/analyses/<name>/result.json`` (``kind: analysis``, one row per measured
cell) and a PNG, then asks ``python -m results`` for its table ``outputs/tables/<name>.{md,csv}`` with the
published figures beside ours (``analyses.record.tabulate``); nothing here imports ``results``. Only with
``--committed`` do the table and PNG go to ``results/tables/``, the committed copy (``lra.run.outputs``). The
training runs an analysis needs are reused or trained by ``analyses._runs``.
"""
