"""The package layout's rules: only ``results`` tabulates, benchmarks stay out of the library packages, and every
document the project cites (``docs/*.md``, by section) is in the repository."""

from __future__ import annotations

import ast
import re
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


# Documents the project cites must ship with it: `docs/<name>.md` (and the section numbers cited in it), and no
# citation of the old design or protocol notes, which lived outside the repository.
CITING = ("README.md", "conf/**/*.yaml", "conf/**/*.md", "tests/**/*.py", "tests/**/*.md", "results/reference/*",
          "docs/*.md")
DOC_CITATION = re.compile(r"(docs/[A-Za-z0-9_.-]+\.md)(?:`)?(?: (sections?) (\d+(?:, \d+)*))?")
OLD_CITATION = re.compile(r"[\w./-]*(?:LRA_PROTOCOL(?:\.md)?|DESIGN\.md)")


def citing_files() -> list[Path]:
    this = Path(__file__).resolve()
    found = {p for pattern in CITING for p in ROOT.glob(pattern) if p.is_file() and p.resolve() != this}
    return sorted(found)


def in_repo(relative: str) -> Path | None:
    """The file ``relative`` names inside the repository, or None (missing, or a link leading out of it)."""
    path = (ROOT / relative).resolve()
    return path if path.is_file() and path.is_relative_to(ROOT) else None


def section_numbers(document: Path) -> set[str]:
    return set(re.findall(r"^## (\d+)\.", document.read_text(encoding="utf-8"), flags=re.M))


def citations() -> list[tuple[str, int, str, str, str | None]]:
    """(file, line, kind, cited path, cited sections) for every document citation in ``CITING``."""
    found = []
    for path in citing_files():
        name = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            found += [(name, number, "docs", m[1], m[3]) for m in DOC_CITATION.finditer(line)]
            found += [(name, number, "old", m[0], None) for m in OLD_CITATION.finditer(line)]
    return found


def test_every_cited_document_and_section_is_in_the_repo():
    problems = []
    for name, number, kind, cited, sections in citations():
        document = in_repo(cited if kind == "docs" or cited.endswith(".md") else f"{cited}.md")
        if document is None:
            problems.append(f"{name}:{number}: cites {cited}, which the repository does not have")
        elif sections:
            missing = sorted(set(sections.split(", ")) - section_numbers(document), key=int)
            if missing:
                problems.append(f"{name}:{number}: cites {cited} section(s) {', '.join(missing)}, which it lacks")
    assert problems == [], "\n".join(problems)


def test_the_configs_and_published_tables_cite_the_protocol_document():
    """The scan above sees the citations (it is not vacuous): the task configs and the port tables cite
    docs/protocol.md by section, the README and the contract test cite docs/design.md."""
    cited = {(name, path) for name, _, kind, path, _ in citations() if kind == "docs"}
    for name in ("conf/task/listops.yaml", "conf/experiment/lra_original.yaml",
                 "results/reference/nystromformer_port.csv", "results/reference/skyformer_port.csv"):
        assert (name, "docs/protocol.md") in cited, name
    for name in ("README.md", "tests/attention_zoo/test_contract.py"):
        assert (name, "docs/design.md") in cited, name
