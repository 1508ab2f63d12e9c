"""Data preparation for the LRA tasks: generators, importers of the official formats, and the compact
prepared-data format (:mod:`data_prep.compact`) that the training code loads.

Run ``python -m data_prep <task> --out DIR`` to prepare one task under ``DIR/<task>/``, or
``python -m data_prep fetch <task>|all --out DIR`` to download its official files and import them.
"""

from data_prep.compact import CompactSplit, DataError, load_manifest, load_split

__all__ = ["CompactSplit", "DataError", "load_manifest", "load_split"]
