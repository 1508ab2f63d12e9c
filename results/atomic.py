"""Kept for modules that still import ``results.atomic``; the writer is ``data_prep.atomic.write_atomic``."""

from data_prep.atomic import write_atomic

__all__ = ["write_atomic"]
