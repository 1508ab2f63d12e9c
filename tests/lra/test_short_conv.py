"""``model.short_conv``: the depthwise convolution on q, k, v against a position-by-position oracle, its
causality, and its refusal of a kernel that mixes nothing."""

from __future__ import annotations

import pytest
import torch

from lra.settings import Run
from lra.short_conv import ShortConv
from lra_base.errors import UserError
from tests.conftest import assert_close
from tests.lra.conftest import compose_config, compose_run


def naive_short_conv(x, mask, weight, causal: bool):
    """``y_t = sum_i weight[:, i] * x_{t + i - left}`` over real positions inside the sequence, one at a time;
    ``weight`` ``(channels, kernel)``, ``left`` the taps before ``t`` (all but one when causal)."""
    kernel = weight.shape[1]
    left = kernel - 1 if causal else (kernel - 1) // 2
    x = x * mask.unsqueeze(-1).to(x.dtype)
    rows = []
    for t in range(x.shape[1]):
        terms = [weight[:, i] * x[:, t + i - left] for i in range(kernel) if 0 <= t + i - left < x.shape[1]]
        rows.append(torch.stack(terms).sum(0))
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kernel", [2, 3, 4])
def test_outputs_and_gradients_match_the_position_by_position_sum(causal, kernel):
    torch.manual_seed(0)
    conv = ShortConv(6, kernel, causal).double()
    mask = torch.tensor([[1] * 9, [1] * 5 + [0] * 4]).bool()
    x = torch.randn(2, 9, 6, dtype=torch.float64, requires_grad=True)
    got = conv(x, mask)
    want = naive_short_conv(x, mask, conv.conv.weight[:, 0], causal)
    assert_close(got, want, ratio=1e-12, what="outputs")
    g = torch.randn_like(got)
    ours = torch.autograd.grad(got, [x, conv.conv.weight], g)
    theirs = torch.autograd.grad(want, [x, conv.conv.weight], g)
    for a, b, what in zip(ours, theirs, ("input", "weight")):
        assert_close(a, b, ratio=1e-12, what=what)
    assert torch.all(ours[0][1, 5:] == 0)  # pads never reach a real position


@pytest.mark.parametrize("kernel, causal, reads", [(4, False, [-1, 0, 1, 2]), (3, False, [-1, 0, 1]),
                                                  (3, True, [-2, -1, 0]), (2, True, [-1, 0])])
def test_the_window_of_each_kernel_written_out(kernel, causal, reads):
    """Which offsets ``s - t`` position ``t`` reads: a one-hot input at ``s`` reaches the outputs ``t = s - offset``."""
    conv = ShortConv(1, kernel, causal)
    with torch.no_grad():
        conv.conv.weight.fill_(1.0)
    x, mask = torch.zeros(1, 9, 1), torch.ones(1, 9, dtype=torch.bool)
    x[0, 4, 0] = 1.0
    reached = torch.nonzero(conv(x, mask)[0, :, 0]).flatten().tolist()
    assert reached == sorted(4 - offset for offset in reads)


def test_the_output_is_contiguous_for_the_attention_kernels():
    out = ShortConv(6, 3, causal=False)(torch.randn(2, 5, 6), torch.ones(2, 5, dtype=torch.bool))
    assert out.is_contiguous()


def test_a_causal_conv_reads_no_later_position():
    conv = ShortConv(4, 3, causal=True)
    x, mask = torch.randn(1, 8, 4), torch.ones(1, 8, dtype=torch.bool)
    changed = x.clone()
    changed[:, 5:] = torch.randn(1, 3, 4)
    assert torch.equal(conv(x, mask)[:, :5], conv(changed, mask)[:, :5])
    assert not torch.allclose(conv(x, mask)[:, 5:], conv(changed, mask)[:, 5:])


def test_the_ar_model_with_a_short_conv_stays_causal():
    from lra.tasks import ar

    cfg = compose_run(["task=ar", "attention=based", "model.dropout=0.0", "model.short_conv=3"])
    model = ar.LitModule(cfg, 66, 66).eval()
    assert all(block.conv.causal for block in model.encoder.blocks[::2])
    tokens = torch.randint(2, 66, (2, 64))
    changed = tokens.clone()
    changed[:, 40:] = torch.randint(2, 66, (2, 24))
    with torch.no_grad():
        before = model({"tokens": tokens, "lengths": torch.full((2,), 64)})
        after = model({"tokens": changed, "lengths": torch.full((2,), 64)})
    torch.testing.assert_close(before[:, :40], after[:, :40])


@pytest.mark.parametrize("value", [1, 0, "three"])
def test_a_kernel_that_mixes_nothing_is_refused_by_name(value, tmp_path):
    with pytest.raises(UserError, match="model.short_conv"):
        Run.parse(compose_config(["attention=linear", "experiment=quick", f"model.short_conv={value}"]))
