"""The writers of ``data_prep.atomic`` for ``results`` (one implementation), and the check of an output folder."""

from pathlib import Path

from data_prep.atomic import LinkRefused, NotWritable, check_writable, copy_atomic, refuse_link, write_atomic

__all__ = ["LinkRefused", "NotWritable", "check_output_folder", "copy_atomic", "write_atomic"]


def check_output_folder(out: str | Path) -> None:
    """``NotWritable`` when tables cannot be written under ``out``; ``LinkRefused`` naming a symbolic link among
    its files or its page's images (a plot drawn over one would be written through it)."""
    out = Path(out)
    check_writable(out, "give another --out DIR")
    for folder in (out, out / "index_files"):
        if folder.is_dir() and not folder.is_symlink():
            for entry in sorted(folder.iterdir()):
                refuse_link(entry)
