"""``--help`` of the analysis and benchmark commands prints their usage under the name a user types."""

from __future__ import annotations

import pytest

from analyses.microscope import parse
from benchmarks.parity import main as parity_main


def test_microscope_help_prints_its_usage_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(["task=listops", "--help"])
    assert exit_.value.code == 0
    assert "python -m analyses.microscope task=listops attention=" in capsys.readouterr().out


def test_parity_help_names_the_module_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        parity_main(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m benchmarks.parity")
