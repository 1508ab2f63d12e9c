"""Leaf utilities beneath both ``lra`` and ``data_prep``: the atomic writer, folder locks, leftover cleanup
and the one-line user error. Nothing here imports from the suite's other packages, so no import runs up.
"""
