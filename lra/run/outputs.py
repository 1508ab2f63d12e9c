"""Where a command writes its files: under ``outputs/`` (git-ignored) unless it is told ``--committed``.

The committed tables and figures under ``results/`` change only when someone means to commit new ones, so every
analysis (``python -m analyses.<name>``) and benchmark (``python -m benchmarks.<name>``) writes by default to the
same path under ``outputs/`` as it would under ``results/`` (``results/tables/bench`` -> ``outputs/tables/bench``),
and to ``results/`` only with ``--committed``. One ``Destination`` per folder option keeps that rule in one place::

    TABLES = Destination("--tables", "results/tables", "the tables and PNGs")
    TABLES.add_to(parser)
    args = parser.parse_args(argv)
    args.tables = TABLES.choose(parser, args)

A folder given explicitly (``--tables DIR``) is used as given; with ``--committed`` as well it is refused.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

COMMITTED_ROOT = Path("results")
OWN_ROOT = Path("outputs")


def own_folder(committed: str | Path) -> Path:
    """The folder under ``outputs/`` that stands for ``committed`` (a folder under ``results/``)."""
    committed = Path(committed)
    try:
        return OWN_ROOT / committed.relative_to(COMMITTED_ROOT)
    except ValueError:
        raise ValueError(f"{committed} is not under {COMMITTED_ROOT}/: a committed destination must be") from None


@dataclass(frozen=True)
class Destination:
    """A folder option (``option``) whose default is ``own_folder(committed)``, or ``committed`` with --committed.

    ``what`` names the files written there, for ``--help``.
    """

    option: str
    committed: str
    what: str

    @property
    def own(self) -> Path:
        return own_folder(self.committed)

    @property
    def dest(self) -> str:
        """The option's attribute name on argparse's namespace (``--tables`` -> ``tables``)."""
        return self.option.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add ``option`` and ``--committed`` to ``parser``."""
        parser.add_argument(self.option, default=None, metavar="DIR",
                            help=f"folder for {self.what} (default: {self.own}; with --committed: {self.committed})")
        parser.add_argument("--committed", action="store_true",
                            help=f"write {self.what} to {self.committed}, the committed copy, instead of {self.own}")

    def folder(self, given: str | Path | None, committed: bool) -> Path:
        """``given`` if set, else ``committed`` with ``committed=True``, else the folder under ``outputs/``.

        Raises ``ValueError`` when both a folder and ``committed`` are given.
        """
        if given is not None and committed:
            raise ValueError(f"{self.option} {given} and --committed both say where {self.what} go: give one "
                             f"(--committed alone writes {self.committed})")
        if given is not None:
            return Path(given)
        return Path(self.committed) if committed else self.own

    def choose(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
        """The folder for parsed ``args`` (``parser.error`` when both a folder and --committed were given)."""
        try:
            return self.folder(getattr(args, self.dest), args.committed)
        except ValueError as err:
            parser.error(str(err))


TABLES = Destination("--tables", "results/tables", "the tables and PNGs")  # every analysis's
BENCH = Destination("--out", "results/tables/bench", "the CSV (and PNG)")  # every benchmark's that writes one
