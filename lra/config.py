"""The repo's Hydra configs: where they live (``CONF_DIR``), ``compose(overrides)``, the config ``run.py`` composes,
and ``compose_run(overrides)``, the ``Run`` it trains.

Benchmarks, analyses, the results collector and the tests compose through here, so every one of them sees
the config a ``python run.py <overrides>`` would train with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .settings import Run

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose(overrides: Sequence[str] = (), conf_dir: str | Path = CONF_DIR) -> dict[str, Any]:
    """The resolved config ``python run.py <overrides>`` would compose, as plain dicts and lists (no Hydra node), as
    ``conf/`` writes it: ``lra.settings.Run.parse`` completes and checks it.

    Raises Hydra's and OmegaConf's own errors on an unknown group, key or value.
    """
    return composed(overrides, conf_dir, resolve=True)


def composed(overrides: Sequence[str], conf_dir: str | Path, resolve: bool) -> dict[str, Any]:
    """Hydra's composition of ``conf_dir/config.yaml`` with ``overrides`` as plain containers, interpolations
    ``resolve``d or kept as written (``${task.eval_every}``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(Path(conf_dir).resolve()), version_base="1.3"):
        config = hydra_compose(config_name="config", overrides=list(overrides))
    return OmegaConf.to_container(config, resolve=resolve)


def compose_run(overrides: Sequence[str] = (), conf_dir: str | Path = CONF_DIR) -> Run:
    """The ``Run`` that ``python run.py <overrides>`` would train: composed, completed and checked (a ``UserError``
    names a setting out of its range)."""
    from .settings import Run

    return Run.parse(compose(overrides, conf_dir))


def copied_settings(overrides: Sequence[str] = (), conf_dir: str | Path = CONF_DIR) -> dict[str, str]:
    """``{dotted key: the dotted key it copies}`` for every setting that ``conf/`` sets to another one's value
    (``trainer.val_check_interval: ${task.eval_every}``; a relative ``${.seq_len}`` named in full), in the config
    ``python run.py <overrides>`` would compose. Raises Hydra's and OmegaConf's own errors, as ``compose``."""
    copies: dict[str, str] = {}

    def walk(node: Any, where: list[str]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, [*where, str(key)])
        elif isinstance(node, str) and (found := re.fullmatch(r"\$\{([A-Za-z0-9_.]+)\}", node)):
            source = found[1]
            if source.startswith("."):
                dots = len(source) - len(source.lstrip("."))
                source = ".".join([*where[: len(where) - dots], source.lstrip(".")])
            copies[".".join(where)] = source

    walk(composed(overrides, conf_dir, resolve=False), [])
    return copies
