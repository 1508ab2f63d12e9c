"""experiment=lra_original task=<task> composes the JAX protocol: its schedule, q/k/v width and attention dropout."""

import pytest

from lra.model import AttentionBlock
from lra.module import build_encoder
from lra_base.errors import UserError
from tests.lra.conftest import CONF, compose_run

TASKS = sorted(p.stem for p in (CONF / "experiment" / "lra_original").glob("*.yaml"))


def blocks(run, vocab=256):
    return [b for b in build_encoder(run, vocab).blocks if isinstance(b, AttentionBlock)]


def test_every_lra_original_yaml_composes_and_names_nothing_it_cannot_express():
    assert {"listops", "text", "retrieval", "image", "pathfinder", "pathx"} <= set(TASKS)
    for task in TASKS:
        run = compose_run([f"task={task}", "experiment=lra_original"])
        assert run.tag == "lra_original" and run.task.name == task
        assert run.task.optim.schedule in ("rsqrt", "cosine")
        assert run.model.attention_dropout > 0
        text = (CONF / "experiment" / "lra_original" / f"{task}.yaml").read_text()
        assert "Not expressible" not in text


def test_image_is_cosine_with_qkv_64_in_8_heads_and_attention_dropout_on_softmax():
    run = compose_run(["task=image", "experiment=lra_original", "attention=softmax"])
    assert run.task.optim.schedule == "cosine" and run.model.qkv_dim == 64
    (block,) = blocks(run)
    assert block.qkv.in_features == 128 and block.qkv.out_features == 3 * 64 and block.out.in_features == 64
    assert block.attention.dropout == pytest.approx(0.2)


def test_attention_dropout_is_ignored_by_mechanisms_without_attention_weights():
    (block,) = blocks(compose_run(["task=image", "experiment=lra_original", "attention=llops"]))
    assert block.qkv.out_features == 3 * 64  # the q/k/v width applies to every mechanism


def test_listops_follows_the_released_jax_config():
    run = compose_run(["task=listops", "experiment=lra_original"])
    model, optim = run.model, run.task.optim
    assert (model.depth, model.heads, model.dim, model.ffn_dim) == (6, 8, 512, 2048)
    assert optim.schedule == "rsqrt" and optim.lr == pytest.approx(0.05 / 1000 ** 0.5, rel=1e-3)
    assert run.task.eval_every == 20 and run.task.data.limit == {"val": 640}


def test_a_qkv_width_the_heads_do_not_divide_is_refused():
    with pytest.raises(UserError, match="model.qkv_dim=30"):
        compose_run(["model.qkv_dim=30", "model.heads=4"])


def test_a_qkv_width_frees_the_model_width_from_the_head_count():
    run = compose_run(["model.dim=66", "model.heads=4", "model.qkv_dim=64"])
    (block, _) = build_encoder(run, 20).blocks[:2]
    assert block.qkv.out_features == 3 * 64 and block.out.out_features == 66
