"""analyses.ar_scales: the probe's weights are the mechanism's own, its metrics read known weights right, the
parameter groups cover the model once, AdamW's step size is read right, and the quick command writes its table."""

from __future__ import annotations

import json

import pytest
import torch

import attention_zoo
from analyses import _ar_probe as probe
from analyses import ar_scales
from analyses._microscope_capture import LayerCapture, implicit_matrix
from lra.tasks.ar import IGNORE, make_mqar

N, PAIRS = 16, 4


def mqar_batch(count: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    split = make_mqar(count, seq_len=N, num_pairs=PAIRS, vocab_size=2 + 2 * 8, seed=0)
    tokens = torch.from_numpy(split.tokens.reshape(count, N))
    return tokens, torch.from_numpy(split.extra["targets"])


def causal(name: str, **options) -> torch.nn.Module:
    return attention_zoo.build(name, head_dim=8, num_heads=2, causal=True, **options)


def qk(b: int = 3, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return scale * torch.randn(b, 2, N, 8), scale * torch.randn(b, 2, N, 8), torch.ones(b, N, dtype=torch.bool)


@pytest.mark.parametrize("name, options, scale", [("based", {"feature_dim": 4}, 1.0),
                                                   ("llops", {"features": 8, "degree": 4}, 1.0),
                                                   ("llops", {"features": 8, "degree": 4}, 300.0),
                                                   ("llops", {"features": 8, "constant": True}, 1.0)],
                         ids=["based", "llops", "llops-large-q", "llops-constant"])
def test_the_probed_weights_are_the_mechanisms_own(name, options, scale):
    module = causal(name, **options).double()
    q, k, mask = qk(scale=scale)
    weights, _, _ = probe.causal_weights(probe.features(module, q, k, mask))
    oracle = implicit_matrix(module, q.double(), k.double(), mask=mask).double()
    assert (weights - oracle).abs().max() < 1e-6 * oracle.abs().max()


def test_match_positions_find_the_queried_key_and_its_value():
    tokens, targets = mqar_batch()
    b, i, key_pos, value_pos = probe.match_positions(tokens, targets)
    assert len(i) == 3 * PAIRS
    assert (key_pos < i).all() and (key_pos % 2 == 0).all() and (key_pos < 2 * PAIRS).all()
    assert (tokens[b, key_pos] == tokens[b, i]).all()
    assert (tokens[b, value_pos] == targets[b, i]).all() and (targets[b, i] != IGNORE).all()


def test_uniform_weights_give_the_uniform_metrics():
    module = causal("based", feature_dim=4)
    with torch.no_grad():
        module.w_q.zero_()  # kernel 1 everywhere: every query averages its past uniformly
    q, k, mask = qk()
    tokens, targets = mqar_batch()
    layer = LayerCapture(0, module, q, k, q, mask, q)
    m = probe.layer_metrics(layer, tokens, targets)
    first = 1 / torch.arange(1, N + 1, dtype=torch.float64)
    assert m["eff_keys"] == pytest.approx(1, rel=1e-9)
    assert m["top1"] == pytest.approx(first.mean().item(), rel=1e-9)
    assert m["prev"] == pytest.approx(first[1:].mean().item(), rel=1e-9)
    assert m["match_value"] == pytest.approx(m["uniform"], rel=1e-9)
    assert m["match_key"] == pytest.approx(m["uniform"], rel=1e-9)
    assert m["value_pick"] == pytest.approx(1, rel=1e-9)
    assert m["neg_mass"] == 0


def test_eff_keys_counts_keys_even_where_eps_dominates_the_denominators():
    module = causal("based", feature_dim=4, eps=1e6)  # weights uniform but summing to ~(i + 1) / 1e6
    with torch.no_grad():
        module.w_q.zero_()
    q, k, mask = qk()
    tokens, targets = mqar_batch()
    m = probe.layer_metrics(LayerCapture(0, module, q, k, q, mask, q), tokens, targets)
    assert m["eps_share"] > 0.99
    assert m["eff_keys"] == pytest.approx(1, rel=1e-6)


def test_features_of_equal_mass_are_all_effective_and_one_feature_is_one():
    module = causal("llops", features=8, degree=2)
    q, k, mask = qk()
    tokens, targets = mqar_batch()
    with torch.no_grad():
        for theta in (module.theta_q, module.theta_k):
            theta.copy_(theta[..., :1].clone().expand_as(theta))  # every feature the same map
    equal = probe.layer_metrics(LayerCapture(0, module, q, k, q, mask, q), tokens, targets)
    with torch.no_grad():
        module.theta_q[..., 1:] = 0  # only feature 0 is non-zero
    one = probe.layer_metrics(LayerCapture(0, module, q, k, q, mask, q), tokens, targets)
    assert equal["feat_eff"] == pytest.approx(1, rel=1e-9) and equal["feat_used"] == pytest.approx(1, rel=1e-9)
    assert one["feat_eff"] == pytest.approx(1 / 8, rel=1e-9) and one["feat_used"] == pytest.approx(1 / 8, rel=1e-9)


def test_parameter_groups_cover_every_parameter_once():
    cfg = ar_scales.variant_config("llops", 16, 0, 1e-3, ar_scales.QUICK)
    model, _, _ = ar_scales.build(cfg, probe_size=2)
    groups = probe.parameter_groups(model)
    covered = sum((p.detach()[s] if s is not None else p.detach()).double().pow(2).sum().item()
                  for members in groups.values() for p, s in members)  # float64: slices sum as the whole does
    assert covered == pytest.approx(sum(p.detach().double().pow(2).sum().item() for p in model.parameters()),
                                    rel=1e-9)
    attention = [m for m in model.modules() if isinstance(m, attention_zoo.get("llops"))]
    assert [p for p, _ in groups["sketch1"]] == list(attention[1].parameters())


def test_adam_step_of_a_steady_gradient_is_one_learning_rate():
    weight = torch.nn.Parameter(torch.ones(4))
    optimizer = torch.optim.AdamW([weight], lr=0.1, weight_decay=0.0)
    for _ in range(3):
        optimizer.zero_grad()
        (weight * torch.tensor([1.0, -2.0, 3.0, -4.0])).sum().backward()
        optimizer.step()
    steps = probe.adam_steps(optimizer, {"all": [(weight, None)], "half": [(weight, slice(0, 2))]})
    assert steps["adam_all"] == pytest.approx(1, rel=1e-6)
    assert steps["adam_half"] == pytest.approx(1, rel=1e-6)
    assert probe.adam_steps(torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))]), {"x": []}) == {}


def test_quick_command_writes_rows_per_variant_step_and_layer(tmp_path):
    out, tables = tmp_path / "analyses", tmp_path / "tables"
    assert ar_scales.main(["--quick", "--width", "16", "--out-root", str(out), "--tables", str(tables)]) == 0
    record = json.loads((out / "ar_scales" / "result.json").read_text())
    keys = {(r["variant"], r["step"], r["layer"]) for r in record["rows"]}
    assert keys == {(v, s, layer) for v in ("based", "llops") for s in (0, 2) for layer in ("0", "1", "model")}
    trained = next(r for r in record["rows"] if r["variant"] == "llops" and r["step"] == 2 and r["layer"] == "0")
    assert trained["adam_sketch"] > 0 and trained["grad_qk"] > 0
    assert "ar_scales" in (tables / "ar_scales.md").read_text() and (tables / "ar_scales.png").stat().st_size > 0


def test_an_unknown_variant_names_the_known_ones():
    with pytest.raises(ValueError, match="llops_m256"):
        ar_scales.variant_config("llops_m1", 16, 0, 1e-3, [])


def test_the_sketch_learning_rate_reaches_only_the_attentions_own_parameters():
    cfg = ar_scales.variant_config("based", 16, 0, 1e-3, ar_scales.QUICK)
    model, _, _ = ar_scales.build(cfg, probe_size=2)
    rest, sketch = ar_scales.optimizer_for(model, cfg.task.optim, 1e-5).param_groups
    attention = [m for m in model.modules() if isinstance(m, attention_zoo.get("based"))]
    assert {id(p) for p in sketch["params"]} == {id(p) for m in attention for p in m.parameters()}
    assert len(rest["params"]) + len(sketch["params"]) == len(list(model.parameters()))
    assert (rest["lr"], sketch["lr"]) == (1e-3, 1e-5)


def test_a_variant_stopped_by_a_non_finite_loss_is_named_in_the_notes(tmp_path):
    """Before, the notes said every variant was measured at every step; a stopped one's later steps just vanished."""
    out, tables = tmp_path / "analyses", tmp_path / "tables"
    ar_scales.main(["--quick", "--width", "16", "--variants", "llops", "--lr", "1e30", "--out-root", str(out),
                    "--tables", str(tables)])
    record = json.loads((out / "ar_scales" / "result.json").read_text())
    assert {r["step"] for r in record["rows"]} == {0}
    assert any("llops: not measured at steps [2]" in note for note in record["notes"])
