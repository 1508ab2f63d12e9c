"""The package layout's rules: only ``results`` tabulates, and benchmarks stay out of the library packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ["lra", "attention_zoo", "data_prep", "analyses"])
def test_no_library_package_or_analysis_imports_results(package):
    offenders = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / package).rglob("*.py"))
                 if "results" in imported_modules(p)]
    assert offenders == [], f"these modules import results (only results tabulates): {offenders}"


def test_no_benchmark_module_inside_the_library_packages():
    found = [p.relative_to(ROOT).as_posix() for package in ("lra", "attention_zoo", "data_prep")
             for p in (ROOT / package).rglob("bench*")]
    assert found == []
