"""The package layout's rules: only ``results`` tabulates, benchmarks stay out of the library packages, and every
document the project cites (``docs/*.md``, by section) is in the repository."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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


def test_test_module_names_are_unique():
    """pytest's default (rootdir-relative, no ``__init__.py``) import mode stops collection when two test files
    share a basename; the clean-clone run then fails before any test runs."""
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(path.relative_to(ROOT).as_posix())
    clashes = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each pair (pytest cannot import both): {clashes}"


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


# Every file the suite writes goes through the one atomic writer, lra_base/atomic.py: no module calls savefig, a pandas
# writer, write_text/write_bytes, or open/os.open for writing on a path itself (inside `with atomic_output(...)`,
# writing to the temporary file it gives is the writer's use). The exceptions are files that are not replaced
# whole, each with its reason.
WRITING_PACKAGES = ("lra", "lra_base", "attention_zoo", "data_prep", "results", "analyses", "benchmarks")
WRITER = "lra_base/atomic.py"
PANDAS_WRITERS = {"to_csv", "to_json", "to_parquet", "to_pickle", "to_excel", "to_html", "to_latex", "to_markdown",
                  "to_feather"}
SAVERS = {"save", "savez", "savez_compressed", "savetxt", "dump"}  # torch/numpy/PIL/json writers given a file
COPIERS = {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree"}  # copy_atomic instead
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
NOT_REPLACED_WHOLE = {
    ("lra_base/lock.py", "os.open"): "run.lock is held with flock; a replaced lock file would lock nothing",
    ("lra/run/hydra_hooks.py", "os.open"): "a sweep's jobs.tsv is appended one line per write by parallel jobs",
    ("results/browser.py", "open"): "chromium's own log, streamed by the child process into its temporary profile",
    ("benchmarks/step_memory.py", "write_text"): "/proc/self/clear_refs is a kernel control file, not an output",
    ("data_prep/_download.py", "open"): "a download's <file>.part is appended across runs (HTTP Range resume); it "
                                        "takes the archive's name by one rename, only once its checks pass",
    ("data_prep/_safe_extract.py", "open"): "archive members are written into a fresh staging folder that is renamed "
                                            "into place whole, or removed (data_prep/_unpack.py)",
}


def writing_modules() -> list[Path]:
    return sorted([p for package in WRITING_PACKAGES for p in (ROOT / package).rglob("*.py")] + [ROOT / "run.py"])


def inside_atomic_output(tree: ast.AST) -> set[int]:
    """ids of the nodes in the body of a ``with atomic_output(...)`` block."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
                isinstance(item.context_expr, ast.Call) and ast.unparse(item.context_expr.func).endswith(
                    "atomic_output") for item in node.items):
            inside |= {id(child) for statement in node.body for child in ast.walk(statement)}
    return inside


def open_mode(call: ast.Call, name: str) -> str:
    """The mode string an ``open(path, mode)``, ``Path.open(mode)`` or ``zipfile.open(name, mode)`` call gives."""
    keywords = {k.arg: k.value for k in call.keywords}
    position = 0 if name != "open" and len(call.args) == 1 else 1
    mode = keywords.get("mode", call.args[position] if len(call.args) > position else None)
    text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else ""
    return text if re.fullmatch(r"[rwaxbt+]+", text) else ""


def direct_write(call: ast.Call) -> str | None:
    """The name of the writing call ``call`` makes on a path of its own, else None."""
    if not isinstance(call.func, (ast.Attribute, ast.Name)):
        return None
    name = ast.unparse(call.func)
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    keywords = {k.arg for k in call.keywords}
    if method in ("savefig", "write_text", "write_bytes"):
        return method
    if method in PANDAS_WRITERS and (call.args or keywords & {"path_or_buf", "buf", "path", "excel_writer"}):
        return method
    if method in SAVERS and call.args or name in COPIERS:
        return name
    if name == "os.open":
        flags = ast.unparse(call.args[1]) if len(call.args) > 1 else ""
        return name if any(flag in flags for flag in WRITE_FLAGS) else None
    if (name == "open" or method == "open") and set(open_mode(call, name)) & set("wax+"):
        return "open"
    return None


def direct_writes() -> list[tuple[str, int, str]]:
    found = []
    for path in writing_modules():
        name = path.relative_to(ROOT).as_posix()
        if name == WRITER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        allowed = inside_atomic_output(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in allowed and (call := direct_write(node)):
                found.append((name, node.lineno, call))
    return found


def test_every_file_is_written_through_the_atomic_writer():
    offenders = [f"{name}:{line}: {call}" for name, line, call in direct_writes()
                 if (name, call) not in NOT_REPLACED_WHOLE]
    assert offenders == [], ("write these through lra_base.atomic (write_atomic, save_figure, atomic_output):\n"
                             + "\n".join(offenders))


def test_the_write_scan_sees_writes_and_its_exceptions_are_still_there():
    """Not vacuous: the scan finds a direct savefig/to_csv/open('w') in code, and each listed exception exists."""
    probe = ast.parse("fig.savefig(p)\nframe.to_csv(out / 'x.csv', index=False)\nopen(p, 'w')\nPath(p).open('a')\n"
                      "frame.to_csv(index=False)\nopen(p)\nshutil.copy(a, b)\n"
                      "Image.open('data.png')\nwith atomic_output(p) as f:\n    torch.save(x, f)\n")
    allowed = inside_atomic_output(probe)
    calls = [direct_write(n) for n in ast.walk(probe) if isinstance(n, ast.Call) and id(n) not in allowed]
    assert sorted(c for c in calls if c) == ["open", "open", "savefig", "shutil.copy", "to_csv"]
    assert {(name, call) for name, _, call in direct_writes()} == set(NOT_REPLACED_WHOLE)


ROOT_ENTRIES = {".ci", ".gitignore", "README.md", "analyses", "attention_zoo", "benchmarks", "conf", "data_prep",
                "docs", "lra", "lra_base", "pyproject.toml", "results", "run.py", "tests"}


def test_the_repository_root_holds_only_the_project_files():
    """A stray log (``queue0.out``) or scratch file committed at the top level fails here; the ignore rules keep
    the usual ones out of ``git add``."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.fail(f"git ls-files failed in {ROOT}: {listed.stderr.strip()}")
    tops = {line.split("/", 1)[0] for line in listed.stdout.splitlines() if line}
    assert tops <= ROOT_ENTRIES, f"unexpected files at the repository root: {sorted(tops - ROOT_ENTRIES)}"
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", "queue0.out"], cwd=ROOT)
    assert ignored.returncode == 0, "a root *.out log is not ignored (.gitignore)"


# The floors, lowest first: a package imports only from its own floor or those below it (issue 61).
FLOORS = {"lra_base": set(), "data_prep": {"lra_base"}}
SUITE_PACKAGES = {"lra", "lra_base", "data_prep", "attention_zoo", "results", "analyses", "benchmarks"}


def imported_packages(package: str) -> dict[str, set[str]]:
    """Each suite package that ``package``'s modules import (any level of nesting), with the files that do."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".", 1)[0]
                if top in SUITE_PACKAGES and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_no_import_runs_up_from_the_lower_floors(package):
    """``lra_base`` imports no suite package and ``data_prep`` only ``lra_base``: the data tools and the leaf
    utilities load without the model, the run machinery or torch's Lightning stack."""
    upward = {top: files for top, files in imported_packages(package).items() if top not in FLOORS[package]}
    assert upward == {}, f"{package} imports from a higher floor: {upward}"


def test_the_import_scan_sees_an_upward_import(tmp_path, monkeypatch):
    """Not vacuous: a module of a lower floor that imports ``lra`` is reported."""
    (tmp_path / "data_prep").mkdir()
    (tmp_path / "data_prep" / "x.py").write_text("import os\nfrom lra.build import build\nfrom . import y\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert imported_packages("data_prep") == {"lra": {"data_prep/x.py"}}


def private_imports(package: str) -> list[str]:
    """``file: module`` for every module of another suite package whose name starts with ``_`` that ``package``
    imports: a helper shared across packages is public by name (``attention_zoo.first_order``)."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] in SUITE_PACKAGES and parts[0] != package and any(p.startswith("_") for p in parts[1:2]):
                    found.append(f"{path.relative_to(ROOT)}: {name}")
    return found


@pytest.mark.parametrize("package", ["lra", "lra_base", "data_prep", "results"])
def test_no_library_package_imports_another_packages_private_module(package):
    assert private_imports(package) == []


# The two layers of `lra` (issue 61): the model and tasks, with a run's settings and its one build path (`lra/`), below
# run management (`lra/run/`: Hydra's hooks, training, checkpoints, records, run folders, the machine). `lra.run`
# imports the layer below it; no module of that layer imports `lra.run`, absolutely, relatively or inside a function.
RUN_LAYER = "lra.run"


def module_name(path: Path, root: Path) -> str:
    """``lra.tasks.ar`` for ``<root>/lra/tasks/ar.py``, ``lra.tasks`` for its ``__init__.py``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, root: Path) -> set[str]:
    """The dotted name of every module ``path`` imports and of every name it imports from one, relative imports
    resolved: ``from ..run import record`` in ``lra/tasks/ar.py`` gives ``lra.run`` and ``lra.run.record``."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return names


def run_layer_imports(root: Path = ROOT) -> list[str]:
    """``file: module`` for every import of ``lra.run`` by a module of ``lra`` outside ``lra/run/``."""
    found = []
    for path in sorted((root / "lra").rglob("*.py")):
        if path.relative_to(root / "lra").parts[0] == "run":
            continue
        hits = sorted(n for n in imported_names(path, root) if n == RUN_LAYER or n.startswith(f"{RUN_LAYER}."))
        found += [f"{path.relative_to(root).as_posix()}: {name}" for name in hits]
    return found


def test_the_model_and_task_layer_imports_nothing_of_run_management():
    found = run_layer_imports()
    assert found == [], ("the model and task layer imports run management; move the helper down into lra/ or the hook "
                         "up into an lra.run callback:\n" + "\n".join(found))


def test_the_layer_scan_sees_absolute_relative_and_nested_imports(tmp_path):
    """Not vacuous: each way of importing ``lra.run`` from below is reported, and ``lra/run/`` itself, a module whose
    name only starts with ``run`` and the layer's own imports are not."""
    (tmp_path / "lra" / "tasks").mkdir(parents=True)
    (tmp_path / "lra" / "run").mkdir()
    files = {"lra/a.py": "from .run.train import run\n", "lra/b.py": "import lra.run.machine\n",
             "lra/c.py": "def f():\n    from lra import run\n", "lra/d.py": "from . import rng_state, run\n",
             "lra/tasks/e.py": "from ..run import record\nfrom ..data import CompactDataModule\n",
             "lra/f.py": "from .runner import x\nfrom . import settings\n",
             "lra/run/g.py": "from ..settings import Run\nfrom .record import RECORD_NAME\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert run_layer_imports(tmp_path) == [
        "lra/a.py: lra.run.train", "lra/a.py: lra.run.train.run", "lra/b.py: lra.run.machine", "lra/c.py: lra.run",
        "lra/d.py: lra.run", "lra/tasks/e.py: lra.run", "lra/tasks/e.py: lra.run.record"]
