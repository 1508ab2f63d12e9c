"""The registry loads the package's mechanisms when first asked (``attention_zoo.registry.load_mechanisms``): a file
that fails to load is named with its error, and a mechanism from outside the package that takes a name of the
package's is refused when it registers, not when the package's file loads later."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, path: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=path, capture_output=True, text=True, timeout=120)


def test_a_mechanism_file_that_fails_to_load_is_named_with_its_error(tmp_path):
    shutil.copytree(ROOT / "attention_zoo", tmp_path / "attention_zoo", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "attention_zoo" / "broken.py").write_text("raise ValueError('a typo in the file')\n")
    result = python("import attention_zoo; attention_zoo.available()", tmp_path)
    assert result.returncode != 0
    assert ("ImportError: attention_zoo/broken.py failed to load (ValueError: a typo in the file)"
            in result.stderr), result.stderr[-2000:]
    assert "Traceback" in result.stderr  # not a one-line refusal that a caller could take for a bad option


def test_an_outside_mechanism_under_a_name_of_the_package_is_refused_when_it_registers():
    code = ("from attention_zoo.registry import register\n"
            "class Mine:\n"
            "    pass\n"
            "Mine.__module__ = 'myattn.mine'\n"
            "try:\n"
            "    register('linear')(Mine)\n"
            "except ValueError as err:\n"
            "    print(err)\n"
            "import attention_zoo\n"
            "print('linear' in attention_zoo.available(), attention_zoo.get('linear').__name__)\n")
    result = python(code)
    assert result.stdout.splitlines() == [
        "attention 'linear' is already the name of a mechanism of attention_zoo (attention_zoo/linear.py): register "
        "Mine under another", "True LinearAttention"], result.stderr[-2000:]


def test_an_outside_mechanism_registered_first_has_its_options_checked_like_the_packages():
    """``python run.py`` imports an outside mechanism's module before it parses the run (README, "Outside the
    repository"): its options are then checked from its class, with the words used for the package's."""
    code = ("from attention_zoo.registry import option_problem, register\n"
            "class Mine:\n"
            "    option_ranges = {'eps': '> 0'}\n"
            "    def __init__(self, *, head_dim, num_heads, eps: float = 1e-6, causal: bool = False):\n"
            "        pass\n"
            "Mine.__module__ = 'myattn.mine'\n"
            "register('mine')(Mine)\n"
            "print(option_problem('mine', {'eps': -1.0}))\n"
            "print(option_problem('mine', {'causal': 3}))\n"
            "print(option_problem('mine', {'epss': 1.0}))\n"
            "print(option_problem('mine', {'eps': 1.0, 'causal': True}))\n"
            "import sys; print('attention_zoo.linear' in sys.modules)\n")
    result = python(code)
    assert result.stdout.splitlines() == [
        "attention.eps=-1.0: must be > 0 for attention=mine (default eps=1e-06)",
        "attention.causal=3: must be true or false like its default (causal=False) for attention=mine",
        "attention.epss: attention=mine has no option 'epss'; valid options: eps=1e-06, causal=False",
        "None", "False"], result.stderr[-2000:]
