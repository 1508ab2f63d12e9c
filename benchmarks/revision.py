"""A git revision's files in a folder, for the benchmarks that compare this tree with another version."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

from lra_base.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def unpack(rev: str, folder: Path, paths: list[str]) -> list[str]:
    """Write ``paths`` (folders or files of this repository) as they are at ``rev`` under ``folder``
    (``git archive``); returns the paths that exist there (a path absent at ``rev`` is left out)."""
    known = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                           capture_output=True)
    if known.returncode != 0:
        raise UserError(f"--against {rev}: not a revision git knows here; give a commit of this repository")
    present = [p for p in paths if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{p}"],
                                                   capture_output=True).returncode == 0]
    if not present:
        raise UserError(f"--against {rev}: it has none of {', '.join(paths)}; give a commit of this repository")
    done = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *present], capture_output=True)
    if done.returncode != 0:
        raise UserError(f"--against {rev}: git archive failed ({done.stderr.decode().strip()}); give a commit of "
                        f"this repository")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python's own check, where it has one
        archive.extractall(folder, **safe)
    return present


def import_at(rev: str, folder: Path, package: str) -> ModuleType:
    """``package`` (a folder of this repository) as it is at ``rev``: unpacked under ``folder`` and imported as
    ``<package>_at_<rev>``, beside this tree's own, its relative imports resolving inside the unpacked copy."""
    unpack(rev, folder, [package])
    name = f"{package}_at_" + "".join(c if c.isalnum() else "_" for c in rev)
    for stale in [m for m in sys.modules if m == name or m.startswith(name + ".")]:  # an earlier call's
        del sys.modules[stale]
    spec = importlib.util.spec_from_file_location(name, folder / package / "__init__.py",
                                                  submodule_search_locations=[str(folder / package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
