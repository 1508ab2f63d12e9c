"""Config and code agree: a conf/attention/<name>.yaml value that differs from the mechanism's own default
(the keyword default of its class in attention_zoo/<name>.py) must say why on its line, in a comment that
names the code's default; an option the class does not have is an error."""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

import attention_zoo
from tests.lra.conftest import CONF

CONFIGS = sorted((CONF / "attention").glob("*.yaml"))
LINE = re.compile(r"^(?P<key>\w+):[^#]*(?:#(?P<comment>.*))?$")


def line_comments(text: str) -> dict[str, str]:
    """Top-level key -> the comment on its line ("" when none)."""
    found = {}
    for line in text.splitlines():
        if (match := LINE.match(line)) is not None:
            found[match["key"]] = (match["comment"] or "").strip()
    return found


def undocumented_differences(name: str, values: dict, comments: dict[str, str]) -> list[str]:
    """``key=conf (code default)`` for each conf value that differs from the class default without a reason."""
    defaults = attention_zoo.options(name)
    unknown = sorted(set(values) - set(defaults))
    assert not unknown, f"{name}: conf sets options the class does not have: {unknown}"
    return [f"{key}={value!r} (code default {defaults[key]!r})" for key, value in values.items()
            if value != defaults[key] and "default" not in comments.get(key, "")]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_conf_values_are_the_code_defaults_or_say_why(path):
    values = OmegaConf.to_container(OmegaConf.load(path))
    name = values.pop("name")
    assert name == path.stem
    assert undocumented_differences(name, values, line_comments(path.read_text())) == []


def test_a_silent_difference_is_caught_and_a_documented_one_is_not():
    values = {"features": 128, "seed": 0}
    silent = undocumented_differences("performer", values, {"features": "m", "seed": "base seed"})
    assert silent == ["features=128 (code default 256)", "seed=0 (code default None)"]
    assert undocumented_differences("performer", values, {"features": "half the default 256", "seed": "default"}) == []
