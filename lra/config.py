"""The repo's Hydra configs: where they live (``CONF_DIR``) and ``compose(overrides)``, the config ``run.py`` runs.

Benchmarks, analyses, the results collector and the tests compose through here, so every one of them sees
the config a ``python run.py <overrides>`` would train with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from .settings import complete

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose(overrides: Sequence[str] = (), conf_dir: str | Path = CONF_DIR) -> dict[str, Any]:
    """The resolved config ``python run.py <overrides>`` would use, as plain dicts and lists (no Hydra node),
    complete (``lra.settings.complete``: every optional setting it leaves out at its default).

    Raises Hydra's and OmegaConf's own errors on an unknown group, key or value.
    """
    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        config = hydra_compose(config_name="config", overrides=list(overrides))
    return complete(OmegaConf.to_container(config, resolve=True))
