"""The PyTorch ports' settings as named options: embedding init, padded-mean pooling, OneCycleLR with beta1
cycling, and the ListOps-study experiments that switch them on."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lra.model import Encoder, masked_mean, padded_mean
from lra.module import attention_factory
from lra.schedules import scheduler
from lra.settings import Optim, Run
from lra_base.errors import UserError
from tests.conftest import assert_close
from tests.lra.conftest import compose_config, compose_run


def flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def onecycle(**settings) -> Optim:
    """``task.optim`` of the default run on the onecycle schedule, ``settings`` over it."""
    return replace(compose_run([]).task.optim, schedule="onecycle", **settings)


def test_onecycle_is_torchs_with_the_ports_arguments():
    """Nystromformer LRA run_tasks.py: OneCycleLR(max_lr=lr, pct_start=warmup/steps, linear) from lr/25 to a peak
    at step warmup-1, then down to lr/25/1e4; Adam's beta1 0.95 -> 0.85 -> 0.95."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=1e-4, betas=(0.9, 0.999))
    schedule = scheduler(optimizer, onecycle(warmup_steps=100, lr=1e-4), 500)
    rates, beta1 = [], []
    for _ in range(500):
        rates.append(optimizer.param_groups[0]["lr"])
        beta1.append(optimizer.param_groups[0]["betas"][0])
        optimizer.step()
        schedule.step()
    assert rates[0] == pytest.approx(1e-4 / 25)
    assert max(rates) == pytest.approx(1e-4) and rates.index(max(rates)) == 99
    assert rates[-1] == pytest.approx(1e-4 / 25 / 1e4, rel=1e-3)
    assert beta1[0] == pytest.approx(0.95) and beta1[99] == pytest.approx(0.85) and beta1[-1] == pytest.approx(0.95)
    assert all(b == 0.999 for b in (g["betas"][1] for g in optimizer.param_groups))


def test_onecycle_without_momentum_cycling_keeps_the_betas():
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([weight], lr=1e-3, betas=(0.9, 0.999))
    schedule = scheduler(optimizer, onecycle(warmup_steps=5, lr=1e-3, cycle_momentum=False), 20)
    for _ in range(10):
        optimizer.step()
        schedule.step()
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.999)


def test_onecycle_needs_a_warmup_shorter_than_the_run(tiny_overrides):
    with pytest.raises(UserError, match="warmup_steps .10. < max_steps .10."):
        compose_run(["attention=linear", "task.optim.schedule=onecycle", *tiny_overrides, "task.max_steps=10",
                     "task.optim.warmup_steps=10"])


@pytest.mark.parametrize("std", [None, 0.02])
def test_embedding_init_std(std):
    run = compose_run(["model.dim=32", "task.max_len=512"])
    torch.manual_seed(0)
    enc = Encoder(vocab_size=300, max_len=512, dim=32, depth=1, num_heads=2, ffn_dim=64, dropout=0.0,
                  make_attention=attention_factory(run), embed_init_std=std)
    expected = 1.0 if std is None else std
    for table in (enc.tokens.weight, enc.positions.weight):
        # 9,600+ draws: the sample std is within ~1% of the drawing std
        assert float(table.detach().std()) == pytest.approx(expected, rel=0.05)


def test_padded_mean_is_the_masked_sum_over_max_len_and_ignores_padding():
    x = torch.randn(2, 5, 3)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert_close(padded_mean(x, mask, 8), masked_mean(x, mask) * torch.tensor([[3 / 8], [5 / 8]]), ratio=1e-6)
    run = compose_run(["attention=softmax", "model.dim=32", "task.max_len=64"])
    enc = Encoder(vocab_size=16, max_len=64, dim=32, depth=2, num_heads=2, ffn_dim=64, dropout=0.0,
                  make_attention=attention_factory(run), pooling="padded_mean").eval()
    tokens = torch.randint(1, 16, (1, 20))
    padded = torch.cat([tokens, torch.randint(0, 16, (1, 25))], dim=1)
    assert_close(enc(tokens, torch.tensor([20])), enc(padded, torch.tensor([20])), ratio=1e-5)


@pytest.mark.parametrize("override, message", [
    ("model.embed_init_std=-1", "model.embed_init_std=-1: must be null"),
    ("model.embed_init_std=0", "model.embed_init_std=0: must be null"),
    ("model.pooling=port", "must be one of mean, cls, none, padded_mean"),
])
def test_bad_port_settings_are_refused_by_name(override, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        Run.parse(compose_config([override]))


PORT_LR = {"task.optim.lr": 1e-4}  # the ports'; ListOps' default is 1e-3 since the study


@pytest.mark.parametrize("experiment, changed", [
    ("study_init", {"model.embed_init_std": 0.02, **PORT_LR}),
    ("study_attn_dropout", {"model.attention_dropout": 0.1, **PORT_LR}),
    ("study_onecycle", {"task.optim.schedule": "onecycle", **PORT_LR}),
    ("study_padded_mean", {"model.pooling": "padded_mean", **PORT_LR}),
    ("study_lr", {}),  # ListOps' default moved to the study's 1e-3
    ("study_port", {"model.embed_init_std": 0.02, "model.attention_dropout": 0.1, "model.pooling": "padded_mean",
                    "task.optim.schedule": "onecycle", **PORT_LR}),
    ("study_port_lr", {"model.embed_init_std": 0.02, "model.attention_dropout": 0.1, "model.pooling": "padded_mean",
                       "task.optim.schedule": "onecycle"}),
    ("study_port_fused", {"model.embed_init_std": 0.02, "model.pooling": "padded_mean",
                          "task.optim.schedule": "onecycle", **PORT_LR}),
    ("study_port_nobrackets", {"model.embed_init_std": 0.02, "model.attention_dropout": 0.1,
                               "model.pooling": "padded_mean", "task.optim.schedule": "onecycle", **PORT_LR,
                               "task.data.root": "data/no_close_brackets",
                               "task.data.generate.close_brackets": False}),
])
def test_study_experiments_change_only_their_settings(experiment, changed):
    base = flat(compose_config(["task=listops"]))
    study = flat(compose_config(["task=listops", f"experiment={experiment}"]))
    differing = {key: study[key] for key in study if study[key] != base.get(key)}
    assert differing == {**changed, "experiment": experiment, "tag": experiment}
    Run.parse(compose_config(["task=listops", f"experiment={experiment}"]))
