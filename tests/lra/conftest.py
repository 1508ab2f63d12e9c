"""Fixtures for end-to-end tests: composed configs and a tiny generated ListOps."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import lra.hydra_hooks  # noqa: F401  (registers the run-folder resolver that hydra.run.dir uses)

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
TINY = ["task.data.generate.train=160", "task.data.generate.val=64", "task.data.generate.test=64",
        "task.data.generate.min_length=20", "task.data.generate.max_length=60"]


def compose_config(overrides: list[str]) -> dict:
    """The resolved config ``run.py`` would see for these overrides, as a plain dict."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory) -> Path:
    """A data root shared by the session; ListOps is generated into it on first use."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture()
def tiny_overrides(tiny_data_dir) -> list[str]:
    return ["experiment=quick", f"data_dir={tiny_data_dir}", *TINY]
