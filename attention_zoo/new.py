"""Start an attention from an existing one: ``python -m attention_zoo.new NAME [--like linear] [--force]``.

Writes two files: ``attention_zoo/<NAME>.py``, the template's source (``--like``, default ``linear``) with its
registered name, its class name (``<Name>Attention``) and its module-level oracle (``naive_<like>`` ->
``naive_<NAME>``) renamed, and ``conf/attention/<NAME>.yaml``, the template's yaml under the new name. The copy is
then imported in a fresh interpreter to check that it registers as ``NAME``, and the next commands are printed.

``--dest DIR`` writes under ``DIR`` instead of the repository (``DIR/<package>/<NAME>.py`` and
``DIR/conf/attention/<NAME>.yaml``); outside the repository the module goes into a package of your own
(``--package``, e.g. ``myattn``) and its relative imports become imports from ``attention_zoo``.

Refused with one line and exit status 2: a NAME that is not a lower-case Python identifier, a name already
registered, and files that exist (unless ``--force``; even then a module that does not register NAME, such as
``kernel.py``, is never replaced).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import keyword
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "attention_zoo"
CONF_GROUP = Path("conf") / "attention"
RELATIVE_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from \.(?P<module>[\w.]*) import (?P<names>.*)$", flags=re.M)
LINE_LENGTH = 120  # the repo's ruff limit
DESCRIPTION = ("Start an attention from an existing one: write attention_zoo/NAME.py (a copy of --like, renamed) and "
               "conf/attention/NAME.yaml, check that it imports and registers, print the next commands.")
# run in a fresh interpreter: import the new module, then the registry, and name what NAME is registered as
IMPORT_CHECK = """\
import importlib, sys
module, name, class_name = sys.argv[1:4]
sys.path[:0] = sys.argv[4:]
importlib.import_module(module)
import attention_zoo
cls = attention_zoo.get(name)
if (cls.__module__, cls.__name__) != (module, class_name):
    sys.exit(f"{name!r} is registered by {cls.__module__}.{cls.__name__}, not {module}.{class_name}")
"""


class Refused(Exception):
    """A request the generator turns down: one line for the user, exit status 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m attention_zoo.new", description=DESCRIPTION)
    parser.add_argument("name", metavar="NAME", help="the new attention's registered name (lower-case identifier)")
    parser.add_argument("--like", default="linear", help="the registered attention to copy (default: linear)")
    parser.add_argument("--force", action="store_true", help="overwrite NAME's files when they exist")
    parser.add_argument("--dest", type=Path, default=REPO, help="root folder to write under (default: the repo)")
    parser.add_argument("--package", default=PACKAGE,
                        help=f"package folder under --dest for the module (default: {PACKAGE}; outside the repo, "
                             f"one of your own)")
    return parser.parse_args(argv)


def class_name(name: str) -> str:
    """The new class's name: ``my_attn`` -> ``MyAttnAttention``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_")) + "Attention"


def name_problem(name: str, what: str = "NAME") -> str | None:
    """Why ``name`` cannot name a module and a registered attention, or None."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return f"{what} {name!r} is not a valid Python identifier (letters, digits and '_', not a keyword)"
    if name != name.lower():
        return f"{what} {name!r} has upper-case letters; registered names are lower-case"
    if name.startswith("_"):
        return f"{what} {name!r} starts with '_': attention_zoo does not import private modules"
    return None


def registry():
    """The ``attention_zoo`` package (its first ``available()`` or ``get()`` loads every mechanism of the repo)."""
    import attention_zoo

    return attention_zoo


def template(like: str) -> tuple[type, Path, Path]:
    """The class registered as ``like``, its source file and its yaml in the repo's ``conf/attention/``."""
    zoo = registry()
    if like not in zoo.available():
        raise Refused(f"--like {like!r} is not a registered attention; registered: {', '.join(zoo.available())}")
    cls = zoo.get(like)
    yaml = REPO / CONF_GROUP / f"{like}.yaml"
    if not yaml.is_file():
        raise Refused(f"--like {like!r} has no {CONF_GROUP / yaml.name} to copy")
    return cls, Path(inspect.getsourcefile(cls)).resolve(), yaml


def registers(path: Path, name: str) -> bool:
    """Whether the Python file ``path`` parses and defines a class decorated ``@register("<name>")``."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return False
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    return any(is_register_call(decorator, name) for cls in classes for decorator in cls.decorator_list)


def is_register_call(node: ast.expr, name: str) -> bool:
    """Whether ``node`` is the decorator ``register("<name>")``."""
    return (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register" and bool(node.args)
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == name)


def check_target(args: argparse.Namespace, module: Path, yaml: Path) -> None:
    """Refuse a destination the request may not write: a name taken, files that exist, a package mix-up."""
    zoo = registry()
    if args.name in zoo.available():
        owner = Path(inspect.getsourcefile(zoo.get(args.name))).resolve()
        again = f"; delete it and {shown(yaml)} to generate it again" if owner == module.resolve() else ""
        raise Refused(f"attention {args.name!r} is already registered (by {shown(owner)}): choose another "
                      f"NAME{again}")
    if problem := name_problem(args.package, "--package"):
        raise Refused(problem)
    if args.package == PACKAGE and args.dest.resolve() != REPO:
        raise Refused(f"--dest {args.dest} is outside the repository: give --package NAME, a package of your own "
                      f"(the module cannot join the repo's {PACKAGE} from there)")
    existing = [path for path in (module, yaml) if path.exists()]
    if existing and not args.force:
        raise Refused(f"{', '.join(map(shown, existing))} already exist(s); add --force to overwrite")
    if module.exists() and not registers(module, args.name):
        raise Refused(f"{shown(module)} exists and does not register {args.name!r}: not overwritten, even with "
                      f"--force; choose another NAME")


def renamed_source(source: str, cls: type, like: str, name: str, absolute: bool) -> str:
    """The template's source with the registered name, the class name and the oracle's name changed to ``name``;
    with ``absolute``, its relative imports made imports from ``attention_zoo`` (for a package of your own)."""
    text, found = re.subn(rf"""@register\((["']){re.escape(like)}\1\)""", f'@register("{name}")', source)
    if found != 1:
        raise Refused(f"the template for {like!r} has {found} @register({like!r}) lines, not one")
    text = re.sub(rf"\b{re.escape(cls.__name__)}\b", class_name(name), text)
    text = re.sub(rf"\bnaive_{re.escape(like)}\b", f"naive_{name}", text)
    if absolute:
        text = RELATIVE_IMPORT.sub(absolute_import, text)
        if any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(ast.parse(text))):
            raise Refused(f"the template for {like!r} imports from outside {PACKAGE} relatively; copy it by hand")
    return text


def absolute_import(match: re.Match) -> str:
    """``from .kernel import a, b`` -> ``from attention_zoo.kernel import a, b`` (``from . import`` likewise),
    one name a line in parentheses when the line would pass ``LINE_LENGTH``."""
    module = f"{PACKAGE}.{match['module']}" if match["module"] else PACKAGE
    line = f"{match['indent']}from {module} import {match['names']}"
    if len(line) <= LINE_LENGTH or any(mark in match["names"] for mark in "(\\#"):
        return line  # short, already wrapped, or with a comment: left as it is
    names = "".join(f"{match['indent']}    {name.strip()},\n" for name in match["names"].split(","))
    return f"{match['indent']}from {module} import (\n{names}{match['indent']})"


def renamed_yaml(text: str, like: str, name: str) -> str:
    """The template's yaml with ``name: <like>`` changed to ``name: <name>`` (the rest, comments too, kept)."""
    text, found = re.subn(rf"^name:(\s*){re.escape(like)}\b", rf"name:\g<1>{name}", text, count=1, flags=re.M)
    if not found:
        raise Refused(f"conf/attention/{like}.yaml has no 'name: {like}' line to rename")
    return text


def shown(path: Path) -> str:
    """``path`` relative to the repository when inside it, else as it is."""
    path = Path(path).resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def import_problem(module: str, name: str, roots: list[Path]) -> str | None:
    """None when a fresh interpreter imports ``module`` and finds it registered as ``name``; else its last error
    line."""
    search = [str(root) for root in dict.fromkeys([*roots, REPO])]
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK, module, name, class_name(name), *search],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
    return lines[-1]


def write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (folders made)."""
    from lra_base.atomic import write_atomic  # standard library only; kept out of `import attention_zoo`

    write_atomic(path, text)


def next_steps(args: argparse.Namespace) -> list[str]:
    """The commands to run next (from the repository root): the tests that pick the new name up, a quick run, the
    tables."""
    name, dest = args.name, args.dest.resolve()
    if args.package == PACKAGE:
        return [f"python -m pytest tests/attention_zoo/test_contract.py tests/lra/test_heads.py "
                f"tests/lra/test_run.py tests/lra/test_configs.py -k {name}",
                f"python run.py task=listops attention={name} experiment=quick",
                "python -m results"]
    runner = f"import {args.package}.{name}, runpy; runpy.run_path('run.py', run_name='__main__')"
    searchpath = "" if dest == REPO else " " + shlex.quote(f"hydra.searchpath=[file://{dest / CONF_GROUP.parent}]")
    return [f"# outside attention_zoo nothing imports {args.package}.{name} by itself (the repo's tests do not see "
            f"it; tests/attention_zoo/test_new_attention.py shows each step)",
            f"PYTHONPATH={shlex.quote(str(dest))} python -c {shlex.quote(runner)} task=listops attention={name} "
            f"experiment=quick{searchpath}",
            "python -m results"]


def generate(args: argparse.Namespace) -> tuple[Path, Path]:
    """Write NAME's module and yaml from the template; returns their paths."""
    if problem := name_problem(args.name):
        raise Refused(problem)
    cls, source, yaml_source = template(args.like)
    module = args.dest / args.package / f"{args.name}.py"
    yaml = args.dest / CONF_GROUP / f"{args.name}.yaml"
    check_target(args, module, yaml)
    absolute = args.package != PACKAGE
    write(module, renamed_source(source.read_text(encoding="utf-8"), cls, args.like, args.name, absolute))
    write(yaml, renamed_yaml(yaml_source.read_text(encoding="utf-8"), args.like, args.name))
    return module, yaml


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        module, yaml = generate(args)
    except Refused as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {shown(module)}  (a copy of {args.like}: @register({args.name!r}), class {class_name(args.name)}, "
          f"oracle naive_{args.name})")
    print(f"wrote {shown(yaml)}")
    if problem := import_problem(f"{args.package}.{args.name}", args.name, [args.dest.resolve()]):
        print(f"error: the new module does not import and register as {args.name!r}: {problem}", file=sys.stderr)
        return 1
    print(f"{args.package}.{args.name} imports and registers as {args.name!r}. Next:")
    for line in next_steps(args):
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
