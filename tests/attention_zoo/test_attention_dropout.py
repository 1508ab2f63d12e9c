"""Attention dropout (``dropout``) of the mechanisms whose LRA JAX code drops their attention weights.

local, longformer, linformer, sinkhorn and synthesizer take ``attention_dropout_rate`` in
google-research/long-range-arena (lra_benchmarks/models/*/*_attention.py); bigbird (its non-causal
block-sparse path), reformer and performer accept the rate there and ignore it, and the linear transformer
deletes it (a TODO), so those have no option here. The draw is a hash of (seed, sequence, head, query
position, key position), so appended pads leave every real token's output as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import attention_zoo
from attention_zoo._attention_dropout import attention_dropout
from tests.conftest import assert_close

CONF = Path(__file__).resolve().parents[2] / "conf" / "attention"
B, H, N, D, MAX_LEN = 2, 2, 24, 8, 64
CASES = {  # small blocks, windows and chunks, so a sequence of 24 spans several of each
    "local": {"block_size": 4},
    "longformer": {"window": 6, "chunk_size": 4, "num_global": 1},
    "linformer": {"proj_dim": 8},
    "sinkhorn": {"block_size": 4, "sinkhorn_iters": 20},
    "synthesizer": {"chunk_size": 8},
}
NAMES = sorted(CASES)
NOT_IN_LRA_JAX = ("bigbird", "reformer", "performer", "linear")


def make(name: str, p: float) -> torch.nn.Module:
    """The mechanism with dropout ``p``; the same parameters for every ``p``."""
    with torch.random.fork_rng():
        torch.manual_seed(1)
        return attention_zoo.build(name, head_dim=D, num_heads=H, max_len=MAX_LEN, dropout=p, **CASES[name])


def inputs(n: int = N):
    """``q, k, v`` and a mask whose second sequence ends in 7 pads."""
    q, k, v = torch.randn(3, B, H, n, D).unbind(0)
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[1, n - 7:] = False
    return q, k, v, mask


def real_rows(out: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The real tokens' outputs, ``(real tokens, H, D)``."""
    return out.transpose(1, 2)[mask]


@pytest.mark.parametrize("name", NAMES)
def test_default_is_off_and_the_yaml_lists_it(name):
    assert attention_zoo.options(name)["dropout"] == 0.0
    conf = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    assert conf.pop("name") == name and conf["dropout"] == 0.0
    assert conf == attention_zoo.options(name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_a_rate_outside_0_1_is_refused(name, p):
    with pytest.raises(ValueError, match=f"{name} dropout"):
        make(name, p)


def test_mechanisms_whose_lra_jax_code_ignores_the_rate_have_no_option():
    for name in NOT_IN_LRA_JAX:
        assert "dropout" not in attention_zoo.options(name), name


@pytest.mark.parametrize("name", NAMES)
def test_eval_mode_equals_no_dropout_and_draws_nothing(name):
    q, k, v, mask = inputs()
    ref = make(name, 0.0).eval()(q, k, v, mask)
    state = torch.get_rng_state()
    out = make(name, 0.4).eval()(q, k, v, mask)
    assert torch.equal(out, ref)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("name", NAMES)
def test_zero_dropout_in_training_is_the_eval_output(name):
    q, k, v, mask = inputs()
    attn = make(name, 0.0)
    state = torch.get_rng_state()
    out = attn.train()(q, k, v, mask)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(out, attn.eval()(q, k, v, mask))


@pytest.mark.parametrize("name", NAMES)
def test_training_output_differs_stays_finite_and_repeats_with_the_seed(name):
    q, k, v, mask = inputs()
    attn = make(name, 0.3)
    plain = real_rows(attn.eval()(q, k, v, mask), mask)
    attn.train()
    for t in (q, k, v):
        t.requires_grad_(True)
    torch.manual_seed(5)
    out = attn(q, k, v, mask)
    again = attn(q, k, v, mask)  # the next draw
    torch.manual_seed(5)
    assert torch.equal(attn(q, k, v, mask), out)
    assert torch.isfinite(out).all()
    rows = real_rows(out, mask)
    assert (rows - plain).abs().amax(-1).gt(1e-4).float().mean() > 0.5  # most real tokens change
    assert not torch.equal(real_rows(again, mask), rows)
    (rows.square().sum()).backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert q.grad.abs().sum() > 0 or name == "synthesizer"  # the factorized synthesizer ignores q


@pytest.mark.parametrize("name", NAMES)
def test_appended_pads_change_no_real_token_under_dropout(name):
    """Two calls from the same RNG state, one with 13 pads of garbage appended: real tokens agree."""
    q, k, v, mask = inputs()
    attn = make(name, 0.3).train()
    torch.manual_seed(7)
    ref = attn(q, k, v, mask)
    extra = 13
    junk = lambda t: torch.cat([t, 5 * torch.randn(B, H, extra, D)], dim=2)  # noqa: E731
    padded = torch.cat([mask, torch.zeros(B, extra, dtype=torch.bool)], dim=1)
    qj, kj, vj = junk(q), junk(k), junk(v)
    torch.manual_seed(7)
    out = attn(qj, kj, vj, padded)
    assert_close(real_rows(ref, mask), real_rows(out[:, :, :N], mask), ratio=1e-5, what=name)
    assert not torch.equal(real_rows(ref, mask), real_rows(attn.eval()(q, k, v, mask), mask))


@pytest.mark.parametrize("name", NAMES)
def test_the_mean_over_draws_is_the_output_without_dropout(name):
    """Inverted dropout is unbiased: 400 copies of the batch (one mask each) average to the eval output.

    The relative RMSE of the mean is about 0.035 (0.6 / sqrt(400)); without the ``1 / (1 - p)`` scale it
    would be about 0.3.
    """
    copies = 400
    q, k, v, mask = inputs()
    attn = make(name, 0.3)
    plain = real_rows(attn.eval()(q, k, v, mask), mask)
    many = [t.repeat(copies, *[1] * (t.ndim - 1)) for t in (q, k, v, mask)]
    with torch.no_grad():
        out = attn.train()(*many).unflatten(0, (copies, B))
    mean = real_rows(out.mean(0), mask)
    assert_close(plain, mean, ratio=0.07, what=name)
    one = real_rows(out[0], mask)
    assert (one - plain).square().mean() > 0.2**2 * plain.square().mean()  # while a single draw is far off


@pytest.mark.parametrize("name", [n for n in NAMES if attention_zoo.get(n).supports_causal])
def test_causal_outputs_ignore_later_tokens_under_dropout(name):
    q, k, v, mask = inputs()
    with torch.random.fork_rng():
        torch.manual_seed(1)
        attn = attention_zoo.build(name, head_dim=D, num_heads=H, max_len=MAX_LEN, dropout=0.3, causal=True,
                                   **CASES[name]).train()
    later = lambda t: torch.cat([t[:, :, :12], t[:, :, 12:] + 3.0], dim=2)  # noqa: E731
    torch.manual_seed(3)
    ref = attn(q, k, v, mask)
    torch.manual_seed(3)
    out = attn(later(q), later(k), later(v), mask)
    assert_close(ref[:, :, :12], out[:, :, :12], ratio=1e-5, what=name)


def test_the_draw_keeps_1_minus_p_independently_per_sequence_head_and_weight():
    p = 0.25
    weights = torch.full((4, 8, 64, 256), 0.5)
    rows, cols = torch.arange(64)[:, None], torch.arange(256)
    out = attention_dropout(weights, p, 12345, rows, cols)
    kept = out != 0
    assert torch.equal(out[kept], torch.full_like(out[kept], 0.5 / (1 - p)))
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005
    per_lane = kept.float().mean((-1, -2))
    assert (per_lane - (1 - p)).abs().max() < 0.02
    agree = (kept[:, :-1] == kept[:, 1:]).float().mean((-1, -2))  # neighbouring heads: p^2 + (1-p)^2
    assert (agree - (p**2 + (1 - p) ** 2)).abs().max() < 0.02
    assert abs((kept[..., 1:] == kept[..., :-1]).float().mean().item() - 0.625) < 0.005  # neighbouring keys
    assert abs((kept[..., 1:, :] == kept[..., :-1, :]).float().mean().item() - 0.625) < 0.005  # and queries
    other = attention_dropout(weights, p, 12346, rows, cols) != 0
    assert abs((other == kept).float().mean().item() - 0.625) < 0.005
    assert torch.equal(attention_dropout(weights, p, 12345, rows, cols) != 0, kept)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_and_cuda_drop_the_same_weights():
    weights = torch.rand(2, 3, 40, 50)
    rows, cols = torch.arange(40)[:, None], torch.arange(50)
    cpu = attention_dropout(weights, 0.1, 777, rows, cols)
    gpu = attention_dropout(weights.cuda(), 0.1, 777, rows.cuda(), cols.cuda())
    assert torch.equal(cpu != 0, gpu.cpu() != 0)


@pytest.mark.parametrize("name", NAMES)
def test_lra_original_experiments_set_it_from_model_attention_dropout(name):
    from lra.module import attention_factory
    from tests.lra.conftest import compose_run

    run = compose_run(["task=image", "experiment=lra_original", f"attention={name}"])
    assert run.attention.options["dropout"] == 0.0 and run.model.attention_dropout == pytest.approx(0.2)
    assert attention_factory(run)().dropout == pytest.approx(0.2)
