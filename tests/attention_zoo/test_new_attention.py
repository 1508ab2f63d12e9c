"""Your attention in two files (issue 59), with no edit to the repository.

``python -m attention_zoo.new`` copies linear attention under a new registered name into a package of a temporary
folder (``myattn/<NAME>.py``) and a yaml beside it (``conf/attention/<NAME>.yaml``). Then, without touching the
repo: importing the module registers it; the contract checks of ``test_contract.py`` hold for it (outputs and
gradients equal its ``naive`` oracle, ...); ``run.py`` trains it a few steps when the module is imported first
and Hydra is given the folder (``hydra.searchpath``); ``python -m results`` tabulates its record and the page
(``--html``) shows it.

What outside-the-repo mechanisms do not get: the suite imports only ``attention_zoo``'s own modules, so the
repo's parametrized tests (collected from ``attention_zoo.available()``) and a plain ``python run.py`` never see
it; the module here is registered for this file's tests only and taken out of the registry afterwards (the
repo's tests check that the registry and ``conf/attention/`` list the same names).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import MissingConfigException

import attention_zoo
from attention_zoo import new
from attention_zoo.registry import _REGISTRY
from lra.config import compose
from results.__main__ import main as results_main
from tests.attention_zoo import test_contract as contract

ROOT = Path(__file__).resolve().parents[2]
NAME, PACKAGE = "mylinear", "myattn"
TINY = ["task.data.generate.train=160", "task.data.generate.val=64", "task.data.generate.test=64",
        "task.data.generate.min_length=20", "task.data.generate.max_length=60"]


def generate(*argv: str) -> tuple[int, str, str]:
    """``python -m attention_zoo.new *argv`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = new.main(list(argv))
    return status, out.getvalue(), err.getvalue()


def searchpath(root: Path) -> str:
    """The Hydra override that adds ``root/conf`` (its ``attention/<NAME>.yaml``) to the repo's config."""
    return f"hydra.searchpath=[file://{root / 'conf'}]"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> tuple[Path, str]:
    """A folder outside the repo holding ``myattn/mylinear.py`` and ``conf/attention/mylinear.yaml``, and what the
    generator printed."""
    folder = tmp_path_factory.mktemp("mine")
    status, out, err = generate(NAME, "--like", "linear", "--dest", str(folder), "--package", PACKAGE)
    assert status == 0, err
    assert f"{PACKAGE}.{NAME} imports and registers as {NAME!r}" in out
    return folder, out


@pytest.fixture(scope="module")
def root(generated) -> Path:
    """The folder the generator wrote into."""
    return generated[0]


@pytest.fixture(scope="module")
def registered(root):
    """The module imported (so registered) from ``root`` for this file's tests; taken out again afterwards."""
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(f"{PACKAGE}.{NAME}")
    finally:
        sys.path.remove(str(root))
        _REGISTRY.pop(NAME, None)
        for module in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[module]


def test_the_two_files_are_linear_attention_renamed(root):
    source = (root / PACKAGE / f"{NAME}.py").read_text()
    linear = (ROOT / "attention_zoo" / "linear.py").read_text()
    assert f'@register("{NAME}")' in source and "class MylinearAttention(nn.Module)" in source
    assert f"def naive_{NAME}(" in source and f"return naive_{NAME}(q, k, v" in source
    assert "from attention_zoo.kernel import" in source and "from ." not in source  # importable from outside
    assert "naive_linear" not in source and "LinearAttention" not in source
    assert len(source.splitlines()) == len(linear.splitlines())  # a copy, renamed
    yaml = (root / "conf" / "attention" / f"{NAME}.yaml").read_text()
    assert yaml == (ROOT / "conf" / "attention" / "linear.yaml").read_text().replace("name: linear", f"name: {NAME}")


@pytest.mark.parametrize("argv, message", [
    (["my-attn"], "'my-attn' is not a valid Python identifier"),
    (["class"], "'class' is not a valid Python identifier"),
    (["MyAttn"], "upper-case"),
    (["softmax"], "'softmax' is already registered (by attention_zoo/softmax.py)"),
    (["kernel"], "attention_zoo/kernel.py already exist(s); add --force"),
    (["kernel", "--force"], "attention_zoo/kernel.py exists and does not register 'kernel'"),
    (["other", "--like", "nope"], "--like 'nope' is not a registered attention"),
])
def test_bad_requests_are_one_line_and_exit_2(argv, message):
    status, out, err = generate(*argv)
    assert status == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_existing_files_need_force_and_force_replaces_only_that_attention(tmp_path):
    args = ["theirs", "--dest", str(tmp_path), "--package", PACKAGE]
    module, yaml = new.generate(new.parse_args(args))  # the files, without the import check
    status, _, err = generate(*args)
    assert status == 2 and f"{module}, {yaml} already exist(s); add --force" in err
    module.write_text('@register("theirs")\nclass Old:\n    pass\n')
    new.generate(new.parse_args([*args, "--force"]))
    assert "class TheirsAttention(nn.Module)" in module.read_text()
    module.write_text("helper = 1\n")
    status, _, err = generate(*args, "--force")
    assert status == 2 and "does not register 'theirs': not overwritten, even with --force" in err
    status, _, err = generate("theirs", "--dest", str(tmp_path / "elsewhere"))
    assert status == 2 and "outside the repository: give --package NAME" in err


def test_the_registry_lists_it(registered):
    assert NAME in attention_zoo.available()
    assert attention_zoo.get(NAME) is registered.MylinearAttention
    assert attention_zoo.options(NAME) == attention_zoo.options("linear")
    assert registered.MylinearAttention.supports_causal and registered.MylinearAttention.quadratic is False


def grid(mark) -> tuple[str, list]:
    """A ``parametrize`` mark's argument names (one string) and values."""
    names = mark.args[0] if mark.args else mark.kwargs["argnames"]
    values = mark.args[1] if len(mark.args) > 1 else mark.kwargs["argvalues"]
    return names if isinstance(names, str) else ",".join(names), list(values)


def contract_cases() -> list:
    """Each test of ``test_contract.py`` parametrized by ``name`` (and only by parameters), once per combination of
    its other parameters: ``(test, keyword arguments)``."""
    cases = []
    for test_name, test in sorted(vars(contract).items()):
        grids = [grid(mark) for mark in getattr(test, "pytestmark", []) if mark.name == "parametrize"]
        if not test_name.startswith("test_") or "name" not in [argnames for argnames, _ in grids]:
            continue
        others = [(argnames.replace(" ", "").split(","), values) for argnames, values in grids if argnames != "name"]
        if set(inspect.signature(test).parameters) != {"name", *(n for names, _ in others for n in names)}:
            continue  # a test that needs fixtures: not called here
        for combination in itertools.product(*(values for _, values in others)):
            kwargs = {}
            for (names, _), value in zip(others, combination):
                kwargs.update(zip(names, value if len(names) > 1 else [value]))
            label = "-".join([test_name, *(str(v).removeprefix("torch.") for v in kwargs.values())])
            cases.append(pytest.param(test, kwargs, id=label))
    return cases


CONTRACT_CASES = contract_cases()


def test_the_contract_checks_are_all_found():
    found = {case.id.split("-")[0] for case in CONTRACT_CASES}
    assert {"test_fast_matches_naive_oracle", "test_padding_invariance", "test_causal_matches_masked_oracle_or_refuses",
            "test_second_derivatives_match_the_oracle_or_are_refused"} <= found


@pytest.mark.parametrize("test, kwargs", CONTRACT_CASES)
def test_the_contract_holds(registered, test, kwargs):
    """The checks every registered mechanism gets, outputs and gradients against the ``naive`` oracle among them."""
    test(name=NAME, **kwargs)


def test_hydra_finds_the_yaml_through_the_searchpath(root):
    with pytest.raises(MissingConfigException, match=f"Could not find 'attention/{NAME}'"):
        compose([f"attention={NAME}"])
    assert compose([f"attention={NAME}", searchpath(root)])["attention"] == {"name": NAME, "eps": 1e-6, "causal": False}


def printed_command(printed: str) -> tuple[dict[str, str], list[str]]:
    """The generator's printed run command: (its environment, ``python -c <runner> <overrides>`` as a list)."""
    line = next(line for line in printed.splitlines() if line.strip().startswith("PYTHONPATH="))
    assignment, *argv = shlex.split(line)
    variable, value = assignment.split("=", 1)
    return {variable: value}, argv


def train(printed: str, run_dir: Path, data_dir: Path, *more: str) -> subprocess.CompletedProcess:
    """The printed ``python -c "import myattn.mylinear, runpy; ..." task=listops attention=NAME experiment=quick
    hydra.searchpath=...`` in a fresh interpreter (its module import is all that registers NAME there), in two
    batches a split of a tiny ListOps (``trainer=debug``), run.py given by its path."""
    env, (python, flag, runner, *overrides) = printed_command(printed)
    assert (python, flag) == ("python", "-c") and "hydra.searchpath=[file://" in overrides[-1]
    runner = runner.replace("'run.py'", repr(str(ROOT / "run.py")))
    extra = ["trainer=debug", f"data_dir={data_dir}", *TINY, f"hydra.run.dir={run_dir}", *more]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([env["PYTHONPATH"], str(ROOT)]), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-c", runner, *overrides, *extra], cwd=run_dir.parent, env=env,
                          capture_output=True, text=True, timeout=300)


def test_run_py_refuses_its_bad_option_in_one_line_before_any_data(generated, tmp_path):
    """Imported before ``run.py`` parses the run, its options are checked as the repository's are (from its class:
    ``attention_zoo.option_problem``): one line, exit 2, no data prepared and no folder made."""
    run_dir = tmp_path / "runs" / "listops" / NAME / "seed0" / "quick"
    run_dir.parent.mkdir(parents=True)
    result = train(generated[1], run_dir, tmp_path / "data", "attention.causal=3")
    assert result.returncode == 2, result.stderr[-3000:]
    assert (f"error: attention.causal=3: must be true or false like its default (causal=False) for attention={NAME}"
            in result.stderr) and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists() and not run_dir.exists()


def test_run_py_trains_it_and_results_tabulate_it(generated, tmp_path):
    run_dir = tmp_path / "runs" / "listops" / NAME / "seed0" / "quick"
    run_dir.parent.mkdir(parents=True)
    result = train(generated[1], run_dir, tmp_path / "data")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"listops / {NAME} / seed 0" in result.stdout and "test_acc=" in result.stdout
    record = json.loads((run_dir / "result.json").read_text())
    assert record["status"] == "completed" and record["attention"] == NAME
    assert record["config"]["attention"] == {"name": NAME, "eps": 1e-6, "causal": False}
    out = tmp_path / "tables"
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()):
        assert results_main([str(tmp_path / "runs"), "--out", str(out), "--html"]) == 0
    assert "Runs: 1 completed" in printed.getvalue() and f"| {NAME} " in (out / "lra.md").read_text()
    assert f",{NAME}," in (out / "runs.csv").read_text()
    assert f"<tr><td>{NAME}</td>" in (out / "index.html").read_text()  # its row in the page's table
