"""experiment=lra_original task=<task> composes the JAX protocol: its schedule, q/k/v width and attention dropout."""

import pytest
from lra.model import AttentionBlock
from lra.module import build_encoder
from lra_base.errors import UserError
from tests.lra.conftest import CONF, compose_config

TASKS = sorted(p.stem for p in (CONF / "experiment" / "lra_original").glob("*.yaml"))


def blocks(cfg, vocab=256):
    return [b for b in build_encoder(cfg, vocab).blocks if isinstance(b, AttentionBlock)]


def test_every_lra_original_yaml_composes_and_names_nothing_it_cannot_express():
    assert {"listops", "text", "retrieval", "image", "pathfinder", "pathx"} <= set(TASKS)
    for task in TASKS:
        cfg = compose_config([f"task={task}", "experiment=lra_original"])
        assert cfg["tag"] == "lra_original" and cfg["task"]["name"] == task
        assert cfg["task"]["optim"]["schedule"] in ("rsqrt", "cosine")
        assert cfg["model"]["attention_dropout"] > 0
        text = (CONF / "experiment" / "lra_original" / f"{task}.yaml").read_text()
        assert "Not expressible" not in text


def test_image_is_cosine_with_qkv_64_in_8_heads_and_attention_dropout_on_softmax():
    cfg = compose_config(["task=image", "experiment=lra_original", "attention=softmax"])
    assert cfg["task"]["optim"]["schedule"] == "cosine" and cfg["model"]["qkv_dim"] == 64
    (block,) = blocks(cfg)
    assert block.qkv.in_features == 128 and block.qkv.out_features == 3 * 64 and block.out.in_features == 64
    assert block.attention.dropout == pytest.approx(0.2)


def test_attention_dropout_is_ignored_by_mechanisms_without_attention_weights():
    cfg = compose_config(["task=image", "experiment=lra_original", "attention=llops"])
    (block,) = blocks(cfg)
    assert block.qkv.out_features == 3 * 64  # the q/k/v width applies to every mechanism


def test_listops_follows_the_released_jax_config():
    cfg = compose_config(["task=listops", "experiment=lra_original"])
    model, optim = cfg["model"], cfg["task"]["optim"]
    assert (model["depth"], model["heads"], model["dim"], model["ffn_dim"]) == (6, 8, 512, 2048)
    assert optim["schedule"] == "rsqrt" and optim["lr"] == pytest.approx(0.05 / 1000 ** 0.5, rel=1e-3)
    assert cfg["task"]["eval_every"] == 20 and cfg["task"]["data"]["limit"] == {"val": 640}


def test_a_qkv_width_the_heads_do_not_divide_is_refused():
    from lra.checks import check_model

    cfg = compose_config(["model.qkv_dim=30", "model.heads=4"])
    with pytest.raises(UserError, match="model.qkv_dim=30"):
        check_model(cfg["model"])


def test_a_qkv_width_frees_the_model_width_from_the_head_count():
    from lra.checks import check_model

    cfg = compose_config(["model.dim=66", "model.heads=4", "model.qkv_dim=64"])
    check_model(cfg["model"])
    (block, _) = build_encoder(cfg, 20).blocks[:2]
    assert block.qkv.out_features == 3 * 64 and block.out.out_features == 66
