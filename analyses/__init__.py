"""The seed papers' analyses that are not LRA training, one command each.

Each writes one record ``outputs/analyses/<name>/result.json`` (``kind: analysis``, one row per measured
cell), its table ``results/tables/<name>.{md,csv}`` with the published figures beside ours, and a PNG.
``python -m results`` rebuilds every analysis table from the records.
"""
